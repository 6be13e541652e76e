#include "engine/moe/expert_parallel.h"

#include "absl/strings/str_cat.h"

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

absl::Status ExpertParallelExecutor::Run(
    int layer, absl::Span<const ExpertTask> tasks,
    absl::Span<const backend::MlpTask> alongside, backend::Backend& backend) {
  const int rank = communicator_.rank(), ranks = communicator_.size();
  shares_.clear();
  std::vector<ExpertTask> mine;
  std::vector<int64_t> floats_of(ranks, 0);  // output floats each rank sends
  std::vector<uint64_t> rows_per_expert(placement_.num_experts(), 0);
  for (const ExpertTask& t : tasks) rows_per_expert[t.expert] += t.x.rows;
  const std::vector<int> rank_of = placement_.AssignExperts(rows_per_expert);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ExpertTask& t = tasks[i];
    if (t.x.rows == 0) continue;
    const Share share{i, rank_of[t.expert]};
    shares_.push_back(share);
    floats_of[share.rank] += t.out.size();
    if (share.rank != rank) continue;
    mine.push_back(t);
    CountRows(t.expert, rank, t.x.rows);
  }
  if (absl::Status status = inner_.Run(layer, mine, alongside, backend);
      !status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("rank ", rank, ": ", status.message()));
  }
  if (ranks == 1) return absl::OkStatus();

  // Every rank knows every rank's shares, so each knows the size of every
  // block; a block holds its rank's shares' rows in share order.
  std::vector<uint64_t> bytes_of(ranks);
  int64_t total = 0;
  for (int p = 0; p < ranks; ++p) {
    bytes_of[p] = floats_of[p] * sizeof(float);
    total += floats_of[p];
  }
  send_.resize(floats_of[rank]);
  received_.resize(total);
  float* at = send_.data();
  for (const ExpertTask& t : mine) {
    backend.CopyToHost(t.out, at);
    at += t.out.size();
  }
  if (absl::Status status = communicator_.AllGatherV(
          parallel::AsBytes(send_), parallel::AsWritableBytes(received_),
          bytes_of);
      !status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("layer ", layer,
                     ": exchanging expert outputs (AllGatherV ", "of ",
                     total * sizeof(float), " bytes from ", ranks,
                     " ranks) on rank ", rank, ": ", status.message()));
  }
  std::vector<const float*> next(ranks);
  next[0] = received_.data();
  for (int p = 1; p < ranks; ++p) next[p] = next[p - 1] + floats_of[p - 1];
  for (const Share& share : shares_) {
    const backend::Tensor& out = tasks[share.task].out;
    if (share.rank != rank) backend.CopyFromHost(next[share.rank], out);
    next[share.rank] += out.size();
  }
  return absl::OkStatus();
}

}  // namespace ringmoe::moe
