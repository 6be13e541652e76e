// libFuzzer target: arbitrary bytes as a model's config.json.
//
// Besides "no crash, no sanitizer report": every rejection names the file,
// and every accepted spec holds what the loader and the runtime index and
// multiply by without further checks (one entry per layer, positive
// dimensions, widths that fit in int64).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "engine/model/config.h"
#include "engine/model/model_spec.h"

namespace {

constexpr char kSource[] = "fuzz";

[[noreturn]] void Fail(const char* what, absl::string_view detail = "") {
  std::fprintf(stderr, "config fuzzer: %s %.*s\n", what,
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

void CheckProduct(int64_t a, int64_t b, const char* what) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) Fail("overflows int64:", what);
}

void CheckSpec(const ringmoe::model::ModelSpec& spec) {
  if (spec.vocab_size <= 0 || spec.hidden_size <= 0 || spec.num_layers <= 0 ||
      spec.num_heads <= 0) {
    Fail("accepted a non-positive dimension");
  }
  if (spec.mla.has_value()) {
    if (spec.mla->kv_lora_rank <= 0) Fail("MLA without a latent rank");
  } else if (spec.head_dim <= 0 || spec.num_kv_heads <= 0 ||
             spec.num_heads % spec.num_kv_heads != 0) {
    Fail("accepted bad attention heads");
  }
  if (spec.layer_sliding_window.size() !=
          static_cast<size_t>(spec.num_layers) ||
      spec.layer_is_moe.size() != static_cast<size_t>(spec.num_layers)) {
    Fail("per-layer settings do not match num_hidden_layers");
  }
  CheckProduct(spec.num_heads, spec.head_dim, "num_heads * head_dim");
  CheckProduct(spec.num_kv_heads, spec.head_dim, "num_kv_heads * head_dim");
  CheckProduct(spec.vocab_size, spec.hidden_size, "vocab * hidden");
  if (spec.num_experts < 0 || spec.experts_per_token < 0 ||
      spec.experts_per_token > spec.num_experts) {
    Fail("experts_per_token outside [0, num_experts]");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ringmoe::model::ModelSpec> spec =
      ringmoe::model::ParseModelConfig(text, kSource);
  if (!spec.ok()) {
    if (!absl::StartsWith(spec.status().message(), kSource)) {
      Fail("error does not name the file:", spec.status().message());
    }
    return 0;
  }
  CheckSpec(*spec);
  return 0;
}
