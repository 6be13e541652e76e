#include "engine/moe/expert_parallel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ringmoe::moe {

Routing PicksOf(const Routing& predicted,
                absl::FunctionRef<bool(int32_t expert)> runs_here) {
  Routing picks;
  picks.top_k = 1;
  for (size_t i = 0; i < predicted.experts.size(); ++i) {
    if (!runs_here(predicted.experts[i])) continue;
    picks.experts.push_back(predicted.experts[i]);
    picks.weights.push_back(predicted.weights[i]);
  }
  picks.num_tokens = static_cast<int64_t>(picks.experts.size());
  return picks;
}

void DistributedExpertExecutor::Predict(int layer, const Routing& predicted) {
  inner_.Predict(layer, PicksOf(predicted, [&](int32_t expert) {
                   return placement_.holds(expert, communicator_.rank());
                 }));
}

absl::Status DistributedExpertExecutor::ExchangeRows(
    backend::Backend& backend, const backend::Tensor& send,
    const backend::Tensor& recv, RowCollective collective) {
  if (rows_communicator_ != nullptr) {
    // A device communicator runs on a stream of its own, after what the
    // host has seen finish.
    backend.Synchronize();
    return collective(
        *rows_communicator_,
        parallel::AsBytes(absl::MakeConstSpan(send.data, send.size())),
        parallel::AsWritableBytes(absl::MakeSpan(recv.data, recv.size())));
  }
  staged_send_.resize(send.size());
  staged_recv_.resize(recv.size());
  if (send.size() > 0) backend.CopyToHost(send, staged_send_.data());
  RETURN_IF_ERROR(collective(communicator_, parallel::AsBytes(staged_send_),
                             parallel::AsWritableBytes(staged_recv_)));
  if (recv.size() > 0) backend.CopyFromHost(staged_recv_.data(), recv);
  return absl::OkStatus();
}

backend::Tensor DistributedExpertExecutor::RowsOf(
    backend::Backend& backend, backend::Backend::Buffer& buffer, int64_t rows,
    int64_t cols) {
  const backend::Tensor& have = buffer.tensor();
  if (buffer.backend() != &backend || have.cols != cols || have.rows < rows) {
    const int64_t capacity = buffer.backend() != &backend || have.cols != cols
                                 ? std::max<int64_t>(rows, 1)
                                 : std::max(rows, have.rows * 3 / 2);
    buffer = backend.NewTensor(capacity, cols);
  }
  return buffer.tensor().Rows(0, rows);
}

void DistributedExpertExecutor::RowScatter::Add(const backend::Tensor& src,
                                                const backend::Tensor& dst) {
  sources_.push_back(src);
  for (int64_t r = 0; r < dst.rows; ++r) pointers_.push_back(dst.row(r));
}

void DistributedExpertExecutor::RowScatter::Write(backend::Backend& backend) {
  writes_.clear();
  size_t at = 0;
  for (const backend::Tensor& src : sources_) {
    writes_.push_back(
        {src, absl::MakeConstSpan(pointers_.data() + at,
                                  static_cast<size_t>(src.rows))});
    at += src.rows;
  }
  if (!writes_.empty()) backend.WriteRows(writes_);
}

absl::Status ExpertParallelExecutor::Run(
    int layer, absl::Span<const ExpertTask> tasks,
    absl::Span<const backend::MlpTask> alongside, backend::Backend& backend) {
  const int rank = communicator_.rank(), ranks = communicator_.size();
  auto with_rank = [&](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("rank ", rank, ": ", status.message()));
  };
  // Every rank has the same tasks, so where none has rows (or the job is
  // one rank) every rank alike skips the exchange.
  const bool any_rows =
      std::any_of(tasks.begin(), tasks.end(),
                  [](const ExpertTask& t) { return t.x.rows > 0; });
  if (ranks == 1 || !any_rows) {
    absl::Status status = inner_.Run(layer, tasks, alongside, backend);
    return status.ok() ? status : with_rank(status);
  }
  shares_.clear();
  std::vector<int64_t> rows_of(ranks, 0);  // output rows each rank sends
  std::vector<uint64_t> rows_per_expert(placement_.num_experts(), 0);
  int64_t cols = 0;
  for (const ExpertTask& t : tasks) {
    rows_per_expert[t.expert] += t.x.rows;
    cols = t.out.cols;
  }
  const std::vector<int> rank_of = placement_.AssignExperts(rows_per_expert);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ExpertTask& t = tasks[i];
    if (t.x.rows == 0) continue;
    shares_.push_back({i, rank_of[t.expert]});
    rows_of[rank_of[t.expert]] += t.out.rows;
  }
  // This rank's tasks write their outputs straight into its block, in
  // share order.
  const backend::Tensor send = RowsOf(backend, send_, rows_of[rank], cols);
  std::vector<ExpertTask> mine;
  int64_t at = 0;
  for (const Share& share : shares_) {
    if (share.rank != rank) continue;
    const ExpertTask& t = tasks[share.task];
    mine.push_back({t.expert, t.x, send.Rows(at, t.out.rows)});
    at += t.out.rows;
    CountRows(t.expert, rank, t.x.rows);
  }
  if (absl::Status status = inner_.Run(layer, mine, alongside, backend);
      !status.ok()) {
    return with_rank(status);
  }

  // Every rank knows every rank's shares, so each knows the size of every
  // block; a block holds its rank's shares' rows in share order.
  std::vector<uint64_t> bytes_of(ranks);
  int64_t total = 0;
  for (int p = 0; p < ranks; ++p) {
    bytes_of[p] = rows_of[p] * cols * sizeof(float);
    total += rows_of[p];
  }
  const backend::Tensor received = RowsOf(backend, received_, total, cols);
  if (absl::Status status = ExchangeRows(
          backend, send, received,
          [&](parallel::Communicator& communicator,
              absl::Span<const uint8_t> send_bytes,
              absl::Span<uint8_t> recv_bytes) {
            return communicator.AllGatherV(send_bytes, recv_bytes, bytes_of);
          });
      !status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("layer ", layer,
                     ": exchanging expert outputs (AllGatherV of ",
                     total * cols * sizeof(float), " bytes from ", ranks,
                     " ranks) on rank ", rank, ": ", status.message()));
  }
  std::vector<int64_t> next(ranks, 0);
  for (int p = 1; p < ranks; ++p) next[p] = next[p - 1] + rows_of[p - 1];
  unpack_.Clear();
  for (const Share& share : shares_) {
    const backend::Tensor& out = tasks[share.task].out;
    unpack_.Add(received.Rows(next[share.rank], out.rows), out);
    next[share.rank] += out.rows;
  }
  unpack_.Write(backend);
  return absl::OkStatus();
}

}  // namespace ringmoe::moe
