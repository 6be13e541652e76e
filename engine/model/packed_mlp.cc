#include "engine/model/packed_mlp.h"

#include <cstring>
#include <type_traits>

#include "engine/model/model_weights.h"

namespace ringmoe::model {
namespace {

constexpr uint64_t kAlign = 64;

// Calls part(pointer, bytes) for every stored part of `mlp` that has bytes,
// in packing order; `pointer` is the field itself, so `part` may move it.
template <typename Part>
void VisitParts(backend::MlpWeights& mlp, Part&& part) {
  for (backend::Weight* m : MlpMatrices(&mlp)) {
    part(m->data, backend::DataBytes(*m));
    part(m->scales, backend::GroupScaleBytes(*m));
    part(m->block_scales, backend::BlockScaleBytes(*m));
    part(m->exponents, backend::ExponentBytes(*m));
  }
  for (backend::Vector* v : {&mlp.gate_up_bias, &mlp.down_bias}) {
    part(v->data, v->size * static_cast<int64_t>(sizeof(float)));
  }
}

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

std::vector<PackedPart> PackedMlpParts(const backend::MlpWeights& mlp) {
  backend::MlpWeights copy = mlp;
  std::vector<PackedPart> parts;
  uint64_t offset = 0;
  VisitParts(copy, [&](const auto* pointer, int64_t bytes) {
    if (pointer == nullptr || bytes <= 0) return;
    parts.push_back({pointer, static_cast<uint64_t>(bytes), offset});
    offset = AlignUp(offset + bytes);
  });
  return parts;
}

uint64_t PackedMlpBytes(const backend::MlpWeights& mlp) {
  const std::vector<PackedPart> parts = PackedMlpParts(mlp);
  return parts.empty() ? 0 : AlignUp(parts.back().offset + parts.back().bytes);
}

void PackMlp(const backend::MlpWeights& mlp, uint8_t* dst) {
  for (const PackedPart& part : PackedMlpParts(mlp)) {
    std::memcpy(dst + part.offset, part.data, part.bytes);
  }
}

backend::MlpWeights PackedMlpView(const backend::MlpWeights& mlp,
                                  const uint8_t* base,
                                  backend::MemorySpace memory) {
  backend::MlpWeights view = mlp;
  uint64_t offset = 0;
  VisitParts(view, [&](auto*& pointer, int64_t bytes) {
    if (pointer == nullptr || bytes <= 0) return;
    pointer = reinterpret_cast<std::remove_reference_t<decltype(pointer)>>(
        base + offset);
    offset = AlignUp(offset + bytes);
  });
  for (backend::Weight* m : MlpMatrices(&view)) m->memory = memory;
  view.gate_up_bias.memory = view.down_bias.memory = memory;
  return view;
}

}  // namespace ringmoe::model
