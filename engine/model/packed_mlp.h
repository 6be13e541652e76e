// PackedMlp: one MLP's stored parts (each matrix's data and scales, its
// biases) laid out one after another, each 64-byte aligned, in one region:
// the unit the hybrid executor keeps in host memory, streams to a device
// and runs from wherever the copy lands.
#ifndef RINGMOE_ENGINE_MODEL_PACKED_MLP_H_
#define RINGMOE_ENGINE_MODEL_PACKED_MLP_H_

#include <cstdint>

#include "engine/backend/weight.h"

namespace ringmoe::model {

// Bytes `mlp` takes packed.
uint64_t PackedMlpBytes(const backend::MlpWeights& mlp);

// Copies the parts of `mlp` (in host memory) to dst[0, PackedMlpBytes).
void PackMlp(const backend::MlpWeights& mlp, uint8_t* dst);

// `mlp` with every part pointing into the packed copy at `base`, which lies
// in `memory`.
backend::MlpWeights PackedMlpView(const backend::MlpWeights& mlp,
                                  const uint8_t* base,
                                  backend::MemorySpace memory);

}  // namespace ringmoe::model

#endif  // RINGMOE_ENGINE_MODEL_PACKED_MLP_H_
