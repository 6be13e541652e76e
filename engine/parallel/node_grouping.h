// NodeGrouping: which node (machine) each rank of a job runs on. The
// hierarchical all-to-all (hierarchical_communicator.h) routes traffic
// between nodes through one leader per node, so it needs the grouping; it
// comes from MPI's shared-memory split (MpiCommunicator::SharedMemoryNodes)
// or is forced with Consecutive (the engine's --ranks_per_node, which lets
// one machine pretend to be several nodes in tests and benchmarks).
//
// Nodes are numbered 0, 1, ... in the order of their lowest rank, so node 0
// holds rank 0; a node's ranks are kept ascending and its leader is the
// lowest of them. The ranks of a node need not be consecutive.
#ifndef RINGMOE_ENGINE_PARALLEL_NODE_GROUPING_H_
#define RINGMOE_ENGINE_PARALLEL_NODE_GROUPING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ringmoe::parallel {

class NodeGrouping {
 public:
  // Ranks with equal labels share a node (label_of_rank[r] names rank r's
  // node: any value, e.g. the lowest rank there). INVALID_ARGUMENT for an
  // empty job.
  static absl::StatusOr<NodeGrouping> FromLabels(
      absl::Span<const int64_t> label_of_rank);

  // Ranks 0..K-1 on node 0, K..2K-1 on node 1, and so on, for K =
  // ranks_per_node. When K does not divide `size` the last node holds the
  // remaining size % K ranks; K >= size makes one node. INVALID_ARGUMENT
  // when size < 1 or K < 1.
  static absl::StatusOr<NodeGrouping> Consecutive(int size, int ranks_per_node);

  int size() const { return static_cast<int>(node_of_rank_.size()); }
  int num_nodes() const { return static_cast<int>(ranks_of_node_.size()); }
  // For rank in [0, size()) and node in [0, num_nodes()).
  int node_of(int rank) const { return node_of_rank_[rank]; }
  const std::vector<int>& ranks_of(int node) const {
    return ranks_of_node_[node];
  }
  int leader(int node) const { return ranks_of_node_[node].front(); }

  // The nodes' ranks, e.g. "{0,1} {2,3} {4}", for logs and test messages.
  std::string ToString() const;

 private:
  explicit NodeGrouping(std::vector<int> node_of_rank);

  std::vector<int> node_of_rank_;
  std::vector<std::vector<int>> ranks_of_node_;
};

// Whether the hierarchical all-to-all can send fewer messages between nodes
// than the flat one: the ranks span more than one node and some node holds
// more than one rank (with one rank per node, or one node, the leaders'
// routes only add copies and intra-node hops).
bool HierarchicalAllToAllPays(const NodeGrouping& nodes);

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_NODE_GROUPING_H_
