// Per-thread working memory for the instruction-set units, which hold no
// standard-library containers (isa.h explains why).
#ifndef RINGMOE_KERNELS_CPU_SCRATCH_H_
#define RINGMOE_KERNELS_CPU_SCRATCH_H_

#include <cstdint>

namespace ringmoe::kernels {

// What a scratch buffer holds. Every use has its own slot, so buffers that
// one kernel needs at the same time never share one.
enum class ScratchSlot : int {
  kActivationsInt8,    // AVX-512 int4 preparation: Int8Chunks; int8 at
                       // kInt8: int8 in column order
  kActivationsInt16,   // AVX-512 int8 preparation: activations as int16
  kScaledActivations,  // fp8 decode products: activations times block scales
  kFp8RowSums,         // fp8 accumulated rows: a segment's unscaled sums
  kSplitActivations,   // AVX-512 bf16 products: columns split by parity
  kWeightPanel,        // prefill products: weight rows widened to float
  kActivationPanel,    // prefill products: activations packed in groups
  kAttentionKeys,      // decode attention: key row pointers
  kAttentionValues,    // decode attention: value row pointers
  kAttentionScores,    // attention scores
  kAttentionOutput,    // prefill attention: running outputs
  kAttentionMax,       // prefill attention: running maxima
  kAttentionSum,       // prefill attention: running denominators
  kCount,
};

// The calling thread's buffer for `slot`: at least `bytes` long, 64-byte
// aligned, contents unspecified. It stays valid until the same thread asks
// for the same slot again (a longer request moves it) and is freed when the
// thread ends.
void* ThreadScratch(ScratchSlot slot, int64_t bytes);

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_SCRATCH_H_
