// PackedMlp: one MLP's stored parts (each matrix's data and scales, its
// biases) laid out one after another, each 64-byte aligned, in one region:
// the unit the hybrid executor keeps in host memory, streams to a device
// and runs from wherever the copy lands.
#ifndef RINGMOE_ENGINE_MODEL_PACKED_MLP_H_
#define RINGMOE_ENGINE_MODEL_PACKED_MLP_H_

#include <cstdint>
#include <vector>

#include "engine/backend/weight.h"

namespace ringmoe::model {

// One stored part of an MLP and where it lies packed.
struct PackedPart {
  const void* data = nullptr;  // where it is stored now
  uint64_t bytes = 0;
  uint64_t offset = 0;  // in the packed region
};

// Every part of `mlp` that has bytes, in packing order.
std::vector<PackedPart> PackedMlpParts(const backend::MlpWeights& mlp);

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
