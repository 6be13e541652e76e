#ifndef RINGMOE_BASE_STATISTICS_H_
#define RINGMOE_BASE_STATISTICS_H_

#include <vector>

namespace ringmoe {

// The median of `values`: the middle one of an odd count, the upper of the
// two middle ones of an even count (always a measured value, never an
// average of two); 0 for none. Benchmarks quote medians of repeated runs.
double Median(std::vector<double> values);

}  // namespace ringmoe

#endif  // RINGMOE_BASE_STATISTICS_H_
