// A packed expert runs bitwise like the expert it was packed from, in every
// stored format (bf16, fp8 with block scales, mxfp4 with biases).
#include "engine/model/packed_mlp.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/architecture.h"
#include "engine/model/config.h"
#include "engine/model/model_weights.h"
#include "gtest/gtest.h"

namespace ringmoe::model {
namespace {

TEST(PackedMlpTest, PackedExpertComputesBitwiseLikeTheStoredOne) {
  for (const char* name : {"mixtral", "deepseek_v3_fp8", "gpt_oss"}) {
    SCOPED_TRACE(name);
    const std::string dir = std::string("tests/testdata/moe-tiny/") + name;
    auto spec = LoadModelConfig(dir);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto checkpoint = checkpoint::Checkpoint::Open(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    auto arch = FindArchitecture(spec->architecture);
    ASSERT_TRUE(arch.ok());
    auto weights = BindModelWeights(*spec, **arch, **checkpoint);
    ASSERT_TRUE(weights.ok()) << weights.status();
    const LayerWeights& layer = weights->layers.back();
    const MlpWeights& stored = layer.experts[1];
    const uint64_t bytes = PackedMlpBytes(stored);
    uint64_t parts = 0;
    for (const Weight* m :
         {&stored.gate, &stored.up, &stored.gate_up, &stored.down}) {
      if (!m->empty()) parts += backend::StoredBytes(*m);
    }
    parts += (stored.gate_up_bias.size + stored.down_bias.size) * 4;
    EXPECT_GE(bytes, parts);
    EXPECT_LT(bytes, parts + 12 * 64);  // at most an alignment pad per part
    std::vector<uint8_t> packed(bytes + 64);
    uint8_t* base = packed.data() +
                    (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    PackMlp(stored, base);
    const MlpWeights view =
        PackedMlpView(stored, base, backend::MemorySpace::kHost);
    EXPECT_EQ(view.down.data >= base && view.down.data < base + bytes, true);

    const int64_t n = 3, hidden = spec->hidden_size;
    std::vector<float> x(n * hidden);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.05f * ((i * 37) % 11) - 0.2f;
    std::vector<float> want(n * hidden), got(n * hidden, -1);
    backend::CpuBackend cpu(nullptr);
    const backend::MlpTask a{
        &stored, {x.data(), n, hidden}, {want.data(), n, hidden}};
    const backend::MlpTask b{
        &view, {x.data(), n, hidden}, {got.data(), n, hidden}};
    cpu.RunMlps({&a, 1});
    cpu.RunMlps({&b, 1});
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0);
    // A view into other memory is labelled so.
    EXPECT_EQ(
        PackedMlpView(stored, base, backend::MemorySpace::kDevice).down.memory,
        backend::MemorySpace::kDevice);
  }
}

}  // namespace
}  // namespace ringmoe::model
