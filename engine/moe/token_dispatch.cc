#include "engine/moe/token_dispatch.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/moe/expert_parallel.h"

namespace ringmoe::moe {
namespace {

// Byte counts of `rows` rows of `width` floats per rank.
std::vector<uint64_t> ByteCounts(const std::vector<uint64_t>& rows,
                                 int64_t width) {
  std::vector<uint64_t> bytes(rows.size());
  for (size_t p = 0; p < rows.size(); ++p) {
    bytes[p] = rows[p] * width * sizeof(float);
  }
  return bytes;
}

// Where each rank's block starts, in rows.
std::vector<uint64_t> Offsets(const std::vector<uint64_t>& rows) {
  std::vector<uint64_t> offsets(rows.size() + 1, 0);
  std::partial_sum(rows.begin(), rows.end(), offsets.begin() + 1);
  return offsets;
}

}  // namespace

void TokenDispatchExecutor::Predict(int layer, const Routing& predicted) {
  inner_.Predict(layer, PicksOf(predicted, [&](int32_t expert) {
                   return placement_.holds(expert, communicator_.rank());
                 }));
}

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

  // Each row goes to a rank holding its expert: the least loaded of the
  // expert's replicas (ExpertPlacement::AssignRanks), in task order.
  std::vector<int32_t> row_experts;
  for (const ExpertTask& t : tasks) {
    row_experts.insert(row_experts.end(), t.x.rows, t.expert);
  }
  const std::vector<int> destination = placement_.AssignRanks(row_experts);
  std::vector<uint64_t> rows_to(ranks, 0);
  for (int d : destination) ++rows_to[d];
  std::vector<uint64_t> rows_from(ranks, 0);
  if (absl::Status s = communicator_.AllToAll(
          parallel::AsBytes(rows_to), parallel::AsWritableBytes(rows_from));
      !s.ok()) {
    return ExchangeError(layer, "AllToAll of row counts", s);
  }
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
  send_.resize(sent_rows * record);
  {
    size_t i = 0;
    for (const ExpertTask& t : tasks) {
      staged_.resize(t.x.size());
      backend.CopyToHost(t.x, staged_.data());
      for (int64_t r = 0; r < t.x.rows; ++r, ++i) {
        float* out = send_.data() + sent_at[i] * record;
        std::memcpy(out, &t.expert, sizeof(int32_t));
        std::memcpy(out + 1, staged_.data() + r * hidden_,
                    hidden_ * sizeof(float));
      }
    }
  }
  received_.resize(received_rows * record);
  if (absl::Status s = communicator_.AllToAllV(
          parallel::AsBytes(send_), ByteCounts(rows_to, record),
          parallel::AsWritableBytes(received_), ByteCounts(rows_from, record));
      !s.ok()) {
    return ExchangeError(layer, "AllToAllV of input rows", s);
  }

  // The received rows by expert; within an expert by source rank, then in
  // the order sent.
  std::vector<int32_t> expert_of(received_rows);
  for (uint64_t j = 0; j < received_rows; ++j) {
    std::memcpy(&expert_of[j], received_.data() + j * record, sizeof(int32_t));
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

  backend::Backend::Buffer in, out;
  std::vector<ExpertTask> mine;
  staged_.resize(received_rows * hidden_);
  if (received_rows > 0) {
    for (uint64_t k = 0; k < received_rows; ++k) {
      std::memcpy(staged_.data() + k * hidden_,
                  received_.data() + order[k] * record + 1,
                  hidden_ * sizeof(float));
    }
    in = backend.NewTensor(static_cast<int64_t>(received_rows), hidden_);
    out = backend.NewTensor(static_cast<int64_t>(received_rows), hidden_);
    backend.CopyFromHost(staged_.data(), in);
    for (uint64_t k = 0; k < received_rows;) {
      uint64_t end = k;
      while (end < received_rows &&
             expert_of[order[end]] == expert_of[order[k]]) {
        ++end;
      }
      const int64_t first = static_cast<int64_t>(k);
      const int64_t count = static_cast<int64_t>(end - k);
      mine.push_back({expert_of[order[k]], in.tensor().Rows(first, count),
                      out.tensor().Rows(first, count)});
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
  send_.resize(received_rows * hidden_);
  if (received_rows > 0) {
    backend.CopyToHost(out.tensor(), staged_.data());
    for (uint64_t k = 0; k < received_rows; ++k) {
      std::memcpy(send_.data() + order[k] * hidden_,
                  staged_.data() + k * hidden_, hidden_ * sizeof(float));
    }
  }
  received_.resize(sent_rows * hidden_);
  if (absl::Status s = communicator_.AllToAllV(
          parallel::AsBytes(send_), ByteCounts(rows_from, hidden_),
          parallel::AsWritableBytes(received_), ByteCounts(rows_to, hidden_));
      !s.ok()) {
    return ExchangeError(layer, "AllToAllV of output rows", s);
  }
  // Each task's rows from wherever they ran.
  size_t i = 0;
  for (const ExpertTask& t : tasks) {
    staged_.resize(t.out.size());
    for (int64_t r = 0; r < t.out.rows; ++r, ++i) {
      std::memcpy(staged_.data() + r * hidden_,
                  received_.data() + sent_at[i] * hidden_,
                  hidden_ * sizeof(float));
    }
    backend.CopyFromHost(staged_.data(), t.out);
  }
  return absl::OkStatus();
}

}  // namespace ringmoe::moe
