#include "engine/moe/token_dispatch.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/moe/expert_parallel.h"

namespace ringmoe::moe {
namespace {

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
  const int experts = placement_.num_experts();

  // Every rank's rows per expert: from them every rank picks the same rank
  // for each expert (its owner, or for a replicated expert the replica
  // ExpertPlacement::AssignExperts picks from the step's rows, so that an
  // expert's rows from every rank are computed together as in one
  // process), derives the same matrix of row counts (row s: what rank s
  // sends each rank; this rank receives its column, and the outputs go
  // back along the transpose), and knows the expert of every row it
  // receives.
  std::vector<uint64_t> rows_per_expert(experts, 0);
  for (const ExpertTask& t : tasks) rows_per_expert[t.expert] += t.x.rows;
  std::vector<uint64_t> gathered(static_cast<size_t>(ranks) * experts);
  if (absl::Status s =
          communicator_.AllGather(parallel::AsBytes(rows_per_expert),
                                  parallel::AsWritableBytes(gathered));
      !s.ok()) {
    return ExchangeError(layer, "AllGather of rows per expert", s);
  }
  auto rows_from = [&](int p, int e) { return gathered[p * experts + e]; };
  std::vector<uint64_t> total(experts, 0);
  for (int p = 0; p < ranks; ++p) {
    for (int e = 0; e < experts; ++e) total[e] += rows_from(p, e);
  }
  const std::vector<int> rank_of = placement_.AssignExperts(total);
  std::vector<uint64_t> rows_matrix(static_cast<size_t>(ranks) * ranks, 0);
  for (int p = 0; p < ranks; ++p) {
    for (int e = 0; e < experts; ++e) {
      rows_matrix[p * ranks + rank_of[e]] += rows_from(p, e);
    }
  }
  const std::vector<uint64_t> rows_to(rows_matrix.begin() + rank * ranks,
                                      rows_matrix.begin() + (rank + 1) * ranks);
  const std::vector<uint64_t> to_offsets = Offsets(rows_to);
  const std::vector<uint64_t> from_offsets =
      Offsets(parallel::CountMatrix{rows_matrix}.RecvCounts(ranks, rank));
  const int64_t sent_rows = static_cast<int64_t>(to_offsets.back());
  const int64_t arrived_rows = static_cast<int64_t>(from_offsets.back());

  // The rows for a rank go in expert order, an expert's in task order: each
  // task's rows are consecutive, from task_at[i].
  std::vector<size_t> by_expert(tasks.size());
  std::iota(by_expert.begin(), by_expert.end(), 0);
  std::stable_sort(by_expert.begin(), by_expert.end(), [&](size_t a, size_t b) {
    return tasks[a].expert < tasks[b].expert;
  });
  std::vector<int64_t> task_at(tasks.size());
  {
    std::vector<uint64_t> next(to_offsets.begin(), to_offsets.end() - 1);
    for (size_t i : by_expert) {
      const ExpertTask& t = tasks[i];
      task_at[i] = static_cast<int64_t>(next[rank_of[t.expert]]);
      next[rank_of[t.expert]] += t.x.rows;
    }
  }
  const backend::Tensor sent = RowsOf(backend, sent_, sent_rows, hidden_);
  scatter_.Clear();
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].x.rows > 0) {
      scatter_.Add(tasks[i].x, sent.Rows(task_at[i], tasks[i].x.rows));
    }
  }
  scatter_.Write(backend);
  const backend::Tensor arrived =
      RowsOf(backend, arrived_, arrived_rows, hidden_);
  const parallel::CountMatrix matrix{rows_matrix, hidden_ * sizeof(float)};
  if (absl::Status s = ExchangeRows(
          backend, sent, arrived,
          [&](parallel::Communicator& communicator,
              absl::Span<const uint8_t> send, absl::Span<uint8_t> recv) {
            return communicator.AllToAllVWithMatrix(send, recv, matrix);
          });
      !s.ok()) {
    return ExchangeError(layer, "AllToAllV of input rows", s);
  }

  // What arrived, by expert; within an expert by source rank, then in the
  // order sent. in_ row k is arrived row order[k].
  std::vector<int32_t> order;
  std::vector<ExpertTask> mine;
  const backend::Tensor in = RowsOf(backend, in_, arrived_rows, hidden_);
  const backend::Tensor out = RowsOf(backend, out_, arrived_rows, hidden_);
  {
    // Where each source's rows of the next expert start.
    std::vector<uint64_t> next(from_offsets.begin(), from_offsets.end() - 1);
    for (int e = 0; e < experts; ++e) {
      if (rank_of[e] != rank) continue;
      const int64_t first = static_cast<int64_t>(order.size());
      for (int p = 0; p < ranks; ++p) {
        for (uint64_t r = 0; r < rows_from(p, e); ++r) {
          order.push_back(static_cast<int32_t>(next[p]++));
        }
      }
      const int64_t count = static_cast<int64_t>(order.size()) - first;
      if (count == 0) continue;
      mine.push_back({e, in.Rows(first, count), out.Rows(first, count)});
      CountRows(e, rank, count);
    }
  }
  if (arrived_rows > 0) backend.GatherRows(arrived, order, in);
  if (absl::Status s = inner_.Run(layer, mine, alongside, backend); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("rank ", rank, ": ", s.message()));
  }

  // Outputs go back in the order their inputs arrived (into arrived_, now
  // free), and come back into sent_ in the order this rank sent them.
  if (arrived_rows > 0) {
    std::vector<int32_t> inverse(arrived_rows);
    for (int64_t k = 0; k < arrived_rows; ++k) {
      inverse[order[k]] = static_cast<int32_t>(k);
    }
    backend.GatherRows(out, inverse, arrived);
  }
  if (absl::Status s = ExchangeRows(
          backend, arrived, sent,
          [&](parallel::Communicator& communicator,
              absl::Span<const uint8_t> send, absl::Span<uint8_t> recv) {
            return communicator.AllToAllVWithMatrix(
                send, recv,
                {rows_matrix, hidden_ * sizeof(float), /*transposed=*/true});
          });
      !s.ok()) {
    return ExchangeError(layer, "AllToAllV of output rows", s);
  }
  scatter_.Clear();
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].out.rows > 0) {
      scatter_.Add(sent.Rows(task_at[i], tasks[i].out.rows), tasks[i].out);
    }
  }
  scatter_.Write(backend);
  return absl::OkStatus();
}

}  // namespace ringmoe::moe
