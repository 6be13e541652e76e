#include "engine/moe/token_dispatch.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/moe/expert_parallel.h"

namespace ringmoe::moe {
namespace {

// The first `n` floats of `buffer`, grown when short and never shrunk: the
// staging of one layer is reused by the next without a reallocation or a
// zero-fill of floats about to be overwritten.
absl::Span<float> Floats(std::vector<float>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return absl::MakeSpan(buffer.data(), n);
}

// Where each rank's block starts, in rows.
std::vector<uint64_t> Offsets(const std::vector<uint64_t>& rows) {
  std::vector<uint64_t> offsets(rows.size() + 1, 0);
  std::partial_sum(rows.begin(), rows.end(), offsets.begin() + 1);
  return offsets;
}

}  // namespace

absl::Status TokenDispatchExecutor::ExchangeError(
    int layer, const char* what, const absl::Status& status) const {
  return absl::Status(
      status.code(),
      absl::StrCat("layer ", layer, ": dispatching tokens to experts (", what,
                   ") on rank ", communicator_.rank(), " of ",
                   communicator_.size(), ": ", status.message()));
}

absl::Status TokenDispatchExecutor::Run(
    int layer, absl::Span<const ExpertTask> tasks,
    absl::Span<const backend::MlpTask> alongside, backend::Backend& backend) {
  const int rank = communicator_.rank(), ranks = communicator_.size();
  // A sent row is a record: the expert's id (an int32 in a float's place,
  // so that rows stay aligned), then the row.
  const int64_t record = hidden_ + 1;

  // Every rank's row counts (row s of the matrix: what rank s sends each
  // rank), from which both exchanges' counts follow: this rank receives
  // its column, and the outputs go back along the transpose. One gather
  // per layer, so a communicator that needs the whole matrix
  // (hierarchical) gathers no counts of its own. Each expert's rows, from
  // every rank, go to one rank holding it: its owner, or for a replicated
  // expert the replica ExpertPlacement::AssignExperts picks from the
  // step's rows per expert (then those are gathered instead, and every
  // rank picks alike), so an expert's rows are computed together as in
  // one process.
  const int experts = placement_.num_experts();
  std::vector<int> rank_of(experts);
  std::vector<uint64_t> rows_matrix(static_cast<size_t>(ranks) * ranks, 0);
  if (placement_.num_replicas() > experts) {
    std::vector<uint64_t> rows_per_expert(experts, 0);
    for (const ExpertTask& t : tasks) rows_per_expert[t.expert] += t.x.rows;
    std::vector<uint64_t> gathered(static_cast<size_t>(ranks) * experts);
    if (absl::Status s =
            communicator_.AllGather(parallel::AsBytes(rows_per_expert),
                                    parallel::AsWritableBytes(gathered));
        !s.ok()) {
      return ExchangeError(layer, "AllGather of rows per expert", s);
    }
    std::vector<uint64_t> total(experts, 0);
    for (int p = 0; p < ranks; ++p) {
      for (int e = 0; e < experts; ++e) total[e] += gathered[p * experts + e];
    }
    rank_of = placement_.AssignExperts(total);
    for (int p = 0; p < ranks; ++p) {
      for (int e = 0; e < experts; ++e) {
        rows_matrix[p * ranks + rank_of[e]] += gathered[p * experts + e];
      }
    }
  } else {
    std::vector<uint64_t> rows_to(ranks, 0);
    for (int e = 0; e < experts; ++e) rank_of[e] = placement_.owner(e);
    for (const ExpertTask& t : tasks) rows_to[rank_of[t.expert]] += t.x.rows;
    if (absl::Status s = communicator_.AllGather(
            parallel::AsBytes(rows_to), parallel::AsWritableBytes(rows_matrix));
        !s.ok()) {
      return ExchangeError(layer, "AllGather of row counts", s);
    }
  }
  const std::vector<uint64_t> rows_to(rows_matrix.begin() + rank * ranks,
                                      rows_matrix.begin() + (rank + 1) * ranks);
  std::vector<int> destination;
  for (const ExpertTask& t : tasks) {
    destination.insert(destination.end(), t.x.rows, rank_of[t.expert]);
  }
  const std::vector<uint64_t> rows_from =
      parallel::CountMatrix{rows_matrix}.RecvCounts(ranks, rank);
  const std::vector<uint64_t> to_offsets = Offsets(rows_to);
  const std::vector<uint64_t> from_offsets = Offsets(rows_from);
  const uint64_t sent_rows = to_offsets.back();
  const uint64_t received_rows = from_offsets.back();

  // Where each row went: its place among the rows sent.
  std::vector<uint64_t> sent_at(destination.size());
  {
    std::vector<uint64_t> next(to_offsets.begin(), to_offsets.end() - 1);
    for (size_t i = 0; i < destination.size(); ++i) {
      sent_at[i] = next[destination[i]]++;
    }
  }
  // A backend whose weights are in host memory computes in host memory
  // (CpuBackend): rows are packed from and unpacked into its tensors
  // directly; other backends' rows are staged through the host.
  const bool host = backend.weight_memory() == backend::MemorySpace::kHost;
  absl::Span<float> send = Floats(send_, sent_rows * record);
  {
    size_t i = 0;
    for (const ExpertTask& t : tasks) {
      const float* rows = t.x.data;
      if (!host) {
        float* staged = Floats(staged_, t.x.size()).data();
        backend.CopyToHost(t.x, staged);
        rows = staged;
      }
      for (int64_t r = 0; r < t.x.rows; ++r, ++i) {
        float* out = send.data() + sent_at[i] * record;
        std::memcpy(out, &t.expert, sizeof(int32_t));
        std::memcpy(out + 1, rows + r * hidden_, hidden_ * sizeof(float));
      }
    }
  }
  absl::Span<float> received = Floats(received_, received_rows * record);
  if (absl::Status s = communicator_.AllToAllVWithMatrix(
          parallel::AsBytes(send), parallel::AsWritableBytes(received),
          {rows_matrix, record * sizeof(float)});
      !s.ok()) {
    return ExchangeError(layer, "AllToAllV of input rows", s);
  }

  // The received rows by expert; within an expert by source rank, then in
  // the order sent.
  std::vector<int32_t> expert_of(received_rows);
  for (uint64_t j = 0; j < received_rows; ++j) {
    std::memcpy(&expert_of[j], received.data() + j * record, sizeof(int32_t));
    if (expert_of[j] < 0 || expert_of[j] >= placement_.num_experts() ||
        !placement_.holds(expert_of[j], rank)) {
      return absl::InternalError(absl::StrCat(
          "layer ", layer, ": rank ", rank, " received a row for expert ",
          expert_of[j], ", which it does not run"));
    }
  }
  std::vector<uint64_t> order(received_rows);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) {
    return expert_of[a] < expert_of[b];
  });

  std::vector<ExpertTask> mine;
  backend::Tensor in, out;
  if (received_rows > 0) {
    const int64_t rows = static_cast<int64_t>(received_rows);
    if (&backend != rows_backend_ || rows > in_.tensor().rows) {
      // Grown by half again, so that a few larger layers do not reallocate
      // at every step.
      const int64_t capacity = &backend != rows_backend_
                                   ? rows
                                   : std::max(rows, in_.tensor().rows * 3 / 2);
      in_ = backend.NewTensor(capacity, hidden_);
      out_ = backend.NewTensor(capacity, hidden_);
      rows_backend_ = &backend;
    }
    in = in_.tensor().Rows(0, rows);
    out = out_.tensor().Rows(0, rows);
    float* sorted =
        host ? in.data : Floats(staged_, received_rows * hidden_).data();
    for (uint64_t k = 0; k < received_rows; ++k) {
      std::memcpy(sorted + k * hidden_, received.data() + order[k] * record + 1,
                  hidden_ * sizeof(float));
    }
    if (!host) backend.CopyFromHost(sorted, in);
    for (uint64_t k = 0; k < received_rows;) {
      uint64_t end = k;
      while (end < received_rows &&
             expert_of[order[end]] == expert_of[order[k]]) {
        ++end;
      }
      const int64_t first = static_cast<int64_t>(k);
      const int64_t count = static_cast<int64_t>(end - k);
      mine.push_back(
          {expert_of[order[k]], in.Rows(first, count), out.Rows(first, count)});
      CountRows(expert_of[order[k]], rank, count);
      k = end;
    }
  }
  if (absl::Status s = inner_.Run(layer, mine, alongside, backend); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("rank ", rank, ": ", s.message()));
  }

  // Outputs go back in the order their inputs arrived (send_ now holds
  // them, received_ what comes back).
  send = Floats(send_, received_rows * hidden_);
  if (received_rows > 0) {
    const float* outputs = out.data;
    if (!host) {
      float* staged = Floats(staged_, received_rows * hidden_).data();
      backend.CopyToHost(out, staged);
      outputs = staged;
    }
    for (uint64_t k = 0; k < received_rows; ++k) {
      std::memcpy(send.data() + order[k] * hidden_, outputs + k * hidden_,
                  hidden_ * sizeof(float));
    }
  }
  received = Floats(received_, sent_rows * hidden_);
  if (absl::Status s = communicator_.AllToAllVWithMatrix(
          parallel::AsBytes(send), parallel::AsWritableBytes(received),
          {rows_matrix, hidden_ * sizeof(float), /*transposed=*/true});
      !s.ok()) {
    return ExchangeError(layer, "AllToAllV of output rows", s);
  }
  // Each task's rows from wherever they ran.
  size_t i = 0;
  for (const ExpertTask& t : tasks) {
    float* rows = host ? t.out.data : Floats(staged_, t.out.size()).data();
    for (int64_t r = 0; r < t.out.rows; ++r, ++i) {
      std::memcpy(rows + r * hidden_, received.data() + sent_at[i] * hidden_,
                  hidden_ * sizeof(float));
    }
    if (!host) backend.CopyFromHost(rows, t.out);
  }
  return absl::OkStatus();
}

}  // namespace ringmoe::moe
