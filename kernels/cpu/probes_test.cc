#include "kernels/cpu/probes.h"

#include <string>

#include "base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"

namespace ringmoe::kernels {
namespace {

TEST(WeightPrefetchTest, SetAndNamed) {
  const WeightPrefetch before = GetWeightPrefetch(WeightType::kBF16);
  SetWeightPrefetch(WeightType::kInt8, WeightPrefetch::kHardwareOnly);
  EXPECT_EQ(GetWeightPrefetch(WeightType::kInt8),
            WeightPrefetch::kHardwareOnly);
  EXPECT_EQ(GetWeightPrefetch(WeightType::kBF16), before) << "per type";
  EXPECT_EQ(std::string(WeightPrefetchName(WeightPrefetch::kHardwareOnly)),
            "hardware");
  SetWeightPrefetch(WeightType::kInt8, WeightPrefetch::kSoftware);
  EXPECT_EQ(GetWeightPrefetch(WeightType::kInt8), WeightPrefetch::kSoftware);
  EXPECT_EQ(std::string(WeightPrefetchName(WeightPrefetch::kSoftware)),
            "software");
}

// Small enough for sanitizer builds; what is chosen from memory is
// measured by ringmoe bench (docs/PERFORMANCE.md).
TEST(WeightPrefetchTest, TuningSetsTheFasterChoice) {
  if (!UseAvx2()) GTEST_SKIP() << "the scalar path issues no prefetches";
  ThreadPool pool(2);
  for (int t = 0; t <= static_cast<int>(WeightType::kMxfp4); ++t) {
    const auto type = static_cast<WeightType>(t);
    const WeightPrefetchTuning tuning =
        TuneWeightPrefetch(type, &pool, int64_t{4} << 20, 3);
    EXPECT_EQ(tuning.type, type);
    EXPECT_GT(tuning.software_bytes_per_s, 0) << WeightTypeName(type);
    EXPECT_GT(tuning.hardware_only_bytes_per_s, 0) << WeightTypeName(type);
    EXPECT_EQ(tuning.chosen,
              tuning.hardware_only_bytes_per_s > tuning.software_bytes_per_s
                  ? WeightPrefetch::kHardwareOnly
                  : WeightPrefetch::kSoftware);
    EXPECT_EQ(GetWeightPrefetch(type), tuning.chosen);
    SetWeightPrefetch(type, WeightPrefetch::kSoftware);
  }
  // Inline, and with a size that is not a whole number of rows.
  const WeightPrefetchTuning inline_tuning = TuneWeightPrefetch(
      WeightType::kInt4, nullptr, (int64_t{1} << 20) + 100, 1);
  EXPECT_EQ(GetWeightPrefetch(WeightType::kInt4), inline_tuning.chosen);
  SetWeightPrefetch(WeightType::kInt4, WeightPrefetch::kSoftware);
}

TEST(WeightPrefetchTest, ScalarPathMeasuresNothing) {
  SetForceScalar(true);
  const WeightPrefetchTuning tuning =
      TuneWeightPrefetch(WeightType::kBF16, nullptr);
  SetForceScalar(false);
  EXPECT_EQ(tuning.chosen, WeightPrefetch::kSoftware);
  EXPECT_EQ(tuning.software_bytes_per_s, 0);
  EXPECT_EQ(tuning.hardware_only_bytes_per_s, 0);
}

TEST(ProbesTest, CeilingsArePositive) {
  ThreadPool pool(2);
  EXPECT_GT(MeasureReadBandwidth(&pool, int64_t{8} << 20, 1), 0);
  EXPECT_GT(MeasurePeakFlops(&pool, 1), 0);
}

}  // namespace
}  // namespace ringmoe::kernels
