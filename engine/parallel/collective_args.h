// Argument checks every Communicator makes before it communicates, so each
// implementation refuses the same calls with the same words.
#ifndef RINGMOE_ENGINE_PARALLEL_COLLECTIVE_ARGS_H_
#define RINGMOE_ENGINE_PARALLEL_COLLECTIVE_ARGS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ringmoe::parallel {

// INVALID_ARGUMENT, naming the collective and the mismatch, when the
// arguments break Communicator's contract for `world_size` ranks.
absl::Status CheckAllToAll(int world_size, absl::Span<const uint8_t> send,
                           absl::Span<uint8_t> recv);
// `rank` is the caller's: the block it sends itself must be the size it
// expects from itself.
absl::Status CheckAllToAllV(int world_size, int rank,
                            absl::Span<const uint8_t> send,
                            absl::Span<const uint64_t> send_counts,
                            absl::Span<uint8_t> recv,
                            absl::Span<const uint64_t> recv_counts);
absl::Status CheckBroadcast(int world_size, int root);
absl::Status CheckAllGather(int world_size, absl::Span<const uint8_t> send,
                            absl::Span<uint8_t> recv);
// `rank` is the caller's: its own block must be its send's size.
absl::Status CheckAllGatherV(int world_size, int rank,
                             absl::Span<const uint8_t> send,
                             absl::Span<uint8_t> recv,
                             absl::Span<const uint64_t> recv_counts);

// Where each rank's block starts in a buffer of blocks of `counts` bytes in
// rank order (exclusive prefix sums).
std::vector<uint64_t> BlockOffsets(absl::Span<const uint64_t> counts);

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_COLLECTIVE_ARGS_H_
