#include "memory_ring/memory_budget.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ringmoe::memory_ring {

absl::Status MemoryBudget::Take(uint64_t bytes, absl::string_view what) {
  uint64_t used = used_.load();
  do {
    if (limit_ > 0 && used + bytes > limit_) {
      return absl::ResourceExhaustedError(
          absl::StrCat(memory_name_, ": ", what, " needs ", bytes,
                       " bytes, more than the memory budget of ", limit_,
                       " bytes leaves (", used, " taken)"));
    }
  } while (!used_.compare_exchange_weak(used, used + bytes));
  return absl::OkStatus();
}

namespace {

class BudgetedBuffer : public TierBuffer {
 public:
  BudgetedBuffer(std::unique_ptr<TierBuffer> buffer, MemoryBudget* budget)
      : buffer_(std::move(buffer)), budget_(budget) {}
  ~BudgetedBuffer() override { budget_->Give(buffer_->size()); }
  uint8_t* data() override { return buffer_->data(); }
  size_t size() const override { return buffer_->size(); }

 private:
  std::unique_ptr<TierBuffer> buffer_;
  MemoryBudget* budget_;
};

class BudgetedTier : public Tier {
 public:
  BudgetedTier(std::unique_ptr<Tier> tier, MemoryBudget* budget)
      : tier_(std::move(tier)), budget_(budget) {}

  absl::string_view name() const override { return tier_->name(); }

  absl::StatusOr<std::unique_ptr<TierBuffer>> Allocate(size_t bytes) override {
    absl::Status taken = budget_->Take(bytes, "a ring slot or cache");
    if (!taken.ok()) return taken;
    absl::StatusOr<std::unique_ptr<TierBuffer>> buffer = tier_->Allocate(bytes);
    if (!buffer.ok()) {
      budget_->Give(bytes);
      return buffer.status();
    }
    return std::unique_ptr<TierBuffer>(
        new BudgetedBuffer(std::move(*buffer), budget_));
  }

  Fence RecordComputeFence() override { return tier_->RecordComputeFence(); }

  void CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst, Fence after,
                 Done done) override {
    tier_->CopyAsync(std::move(pieces), dst, std::move(after), std::move(done));
  }

  absl::Status CopyWithin(uint8_t* dst, const uint8_t* src,
                          size_t bytes) override {
    return tier_->CopyWithin(dst, src, bytes);
  }

 private:
  std::unique_ptr<Tier> tier_;
  MemoryBudget* budget_;
};

}  // namespace

std::unique_ptr<Tier> WithBudget(std::unique_ptr<Tier> tier,
                                 MemoryBudget* budget) {
  return std::make_unique<BudgetedTier>(std::move(tier), budget);
}

}  // namespace ringmoe::memory_ring
