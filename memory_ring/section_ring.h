// SectionRing: the SE-MoE ring. Streamed weights come in sections (a
// layer's streamed experts, or the subset a batch routes to); the compute
// tier holds K slots used round-robin. The j-th section scheduled goes to
// slot j % K; it starts loading once the section that last used that slot
// (j - K) is released and once j is within `prefetch_depth` of the newest
// section compute has asked for. So while section i computes, sections
// i+1..i+d fill on the tier's copy path, and a slot is refilled only after
// the compute that read it has finished (the tier's fence).
#ifndef RINGMOE_MEMORY_RING_SECTION_RING_H_
#define RINGMOE_MEMORY_RING_SECTION_RING_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "memory_ring/ring_stats.h"
#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

struct RingOptions {
  int num_slots = 2;       // K >= 2
  int prefetch_depth = 1;  // d < K; 0 = load only when asked for
};

class SectionRing {
 public:
  using Ticket = int64_t;

  // Allocates K slots of `slot_bytes` in the tier. `stats` must outlive it.
  static absl::StatusOr<std::unique_ptr<SectionRing>> Create(
      Tier* tier, uint64_t slot_bytes, RingOptions options, RingStats* stats);
  ~SectionRing();

  // Appends a section (pieces placed at their dst_offset in the slot) to the
  // schedule; loading starts as the protocol allows.
  Ticket Enqueue(std::vector<CopyPiece> pieces);

  // Blocks until the section is in its slot and returns the slot's base;
  // time spent waiting counts as stall. `extra` pieces (needed but not
  // requested ahead) are then loaded into the same slot before returning.
  // The first error of any load is returned, naming what failed.
  absl::StatusOr<uint8_t*> Acquire(Ticket ticket,
                                   std::vector<CopyPiece> extra = {});

  // Replaces what the acquired section's slot holds with `pieces` once the
  // compute issued so far is done (the tier's fence), and waits for them:
  // more of a layer's experts than its sections hold take turns in one slot.
  // Time spent waiting counts as stall; an error names what failed.
  absl::StatusOr<uint8_t*> Refill(Ticket ticket, std::vector<CopyPiece> pieces);

  // Compute is done with the section; its slot may be refilled after the
  // tier's compute fence.
  void Release(Ticket ticket);

  // Drops every section not yet acquired and releases those acquired (for a
  // step abandoned half way), waiting for loads in flight to land first.
  void Reset();

  uint64_t slot_bytes() const { return slot_bytes_; }
  int num_slots() const { return options_.num_slots; }

  // Slot fills so far (test hook: a slot's generation changes only after its
  // previous section was released).
  uint64_t SlotGeneration(int slot) const;

 private:
  enum class State { kQueued, kLoading, kReady, kReleased };
  struct Section {
    std::vector<CopyPiece> pieces;
    State state = State::kQueued;
    absl::Status status;
  };

  SectionRing(Tier* tier, uint64_t slot_bytes, RingOptions options,
              RingStats* stats);

  struct Launch {
    Ticket ticket;
    std::vector<CopyPiece> pieces;
    uint8_t* dst;
    Tier::Fence after;
  };

  // Callers hold mu_ for the members below and these three helpers.
  Section* Find(Ticket ticket);
  bool SlotFree(Ticket ticket) const;
  // Marks every load the protocol allows now as started; the caller hands
  // them to Start() after dropping the lock (a tier may finish a copy on the
  // calling thread).
  std::vector<Launch> CollectLoads();
  void Start(std::vector<Launch> launches);
  void LoadDone(Ticket ticket, uint64_t bytes, absl::Status status);
  // Copies `pieces` into `dst` once `after` is reached and waits for them.
  absl::Status LoadNow(std::vector<CopyPiece> pieces, uint8_t* dst,
                       Tier::Fence after);

  Tier* const tier_;
  const uint64_t slot_bytes_;
  const RingOptions options_;
  RingStats* const stats_;
  std::vector<std::unique_ptr<TierBuffer>> slots_;

  // std::mutex rather than absl::Mutex: Debian's Abseil is not built for
  // ThreadSanitizer, which then cannot see absl::Mutex's ordering.
  mutable std::mutex mu_;
  std::condition_variable changed_;  // a section's state moved
  // Sections [first_, first_ + sections_.size()) by ticket.
  std::deque<Section> sections_;
  Ticket first_ = 0;
  Ticket frontier_ = -1;  // newest ticket asked for
  int loads_in_flight_ = 0;
  std::vector<uint64_t> generation_;
  // Fence recorded when each slot's last section was released.
  std::vector<Tier::Fence> slot_fence_;
};

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_SECTION_RING_H_
