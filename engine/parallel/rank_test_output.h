// Test output of a gtest binary run as every rank of an mpirun job: rank 0
// prints as usual; the other ranks print only their failures, each with its
// rank, so a job's log reads as one test's.
#ifndef RINGMOE_ENGINE_PARALLEL_RANK_TEST_OUTPUT_H_
#define RINGMOE_ENGINE_PARALLEL_RANK_TEST_OUTPUT_H_

namespace ringmoe::parallel {

// Call after testing::InitGoogleTest, before RUN_ALL_TESTS.
void PrintOnlyFailuresUnlessRankZero(int rank);

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_RANK_TEST_OUTPUT_H_
