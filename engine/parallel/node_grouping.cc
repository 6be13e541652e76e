#include "engine/parallel/node_grouping.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringmoe::parallel {

NodeGrouping::NodeGrouping(std::vector<int> node_of_rank)
    : node_of_rank_(std::move(node_of_rank)) {
  for (int rank = 0; rank < size(); ++rank) {
    const int node = node_of_rank_[rank];
    if (node == num_nodes()) ranks_of_node_.emplace_back();
    ranks_of_node_[node].push_back(rank);
  }
}

absl::StatusOr<NodeGrouping> NodeGrouping::FromLabels(
    absl::Span<const int64_t> label_of_rank) {
  if (label_of_rank.empty()) {
    return absl::InvalidArgumentError(
        "NodeGrouping: a job has at least one rank; got no labels");
  }
  // Numbered in the order of their lowest rank: the first new label seen
  // gets the next node number.
  std::map<int64_t, int> node_of_label;
  std::vector<int> node_of_rank;
  node_of_rank.reserve(label_of_rank.size());
  for (int64_t label : label_of_rank) {
    const int next = static_cast<int>(node_of_label.size());
    node_of_rank.push_back(node_of_label.emplace(label, next).first->second);
  }
  return NodeGrouping(std::move(node_of_rank));
}

absl::StatusOr<NodeGrouping> NodeGrouping::Consecutive(int size,
                                                       int ranks_per_node) {
  if (size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NodeGrouping: a job has at least one rank; got size ", size));
  }
  if (ranks_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("NodeGrouping: ranks_per_node must be at least 1; got ",
                     ranks_per_node));
  }
  std::vector<int> node_of_rank(size);
  for (int rank = 0; rank < size; ++rank) {
    node_of_rank[rank] = rank / ranks_per_node;
  }
  return NodeGrouping(std::move(node_of_rank));
}

std::string NodeGrouping::ToString() const {
  return absl::StrJoin(
      ranks_of_node_, " ", [](std::string* out, const std::vector<int>& ranks) {
        absl::StrAppend(out, "{", absl::StrJoin(ranks, ","), "}");
      });
}

bool HierarchicalAllToAllPays(const NodeGrouping& nodes) {
  return nodes.num_nodes() > 1 && nodes.num_nodes() < nodes.size();
}

}  // namespace ringmoe::parallel
