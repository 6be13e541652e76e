#include "engine/runtime/engine_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "memory_ring/placement.h"

ABSL_FLAG(std::string, model, "",
          "Hugging Face checkpoint directory (config.json, safetensors, "
          "tokenizer.json).");
ABSL_FLAG(std::string, device, "cpu",
          "Where the model runs: cpu, cuda:N (builds with CUDA only) or "
          "standin (a CPU-backed stand-in for a GPU, for tests).");
ABSL_FLAG(int, threads, 0, "CPU threads for the engine; 0 = all cores.");
ABSL_FLAG(std::string, weight_dtype, "auto",
          "Format of the MLP (expert) weights after loading: auto (as "
          "stored), bf16, f16, f32, int8 or int4 (both with one scale per "
          "--weight_group_size columns).");
ABSL_FLAG(bool, quantize_attention, false,
          "Also convert the attention projections to --weight_dtype.");
ABSL_FLAG(bool, quantize_lm_head, false,
          "Also convert lm_head (and the embedding, where tied to it) to "
          "--weight_dtype.");
ABSL_FLAG(std::string, activation_precision, "f32",
          "Precision of the activations in the CPU's products of bf16, "
          "fp8, mxfp4 and int8 weights: f32 (exact to float32), bf16 (bf16 "
          "products round them to bf16, as llama.cpp and GPU servers do, "
          "where the CPU multiplies bf16 natively (AVX512-BF16): faster "
          "prefill and decode; so do fp8 decode products where the "
          "CPU also has AVX512-VBMI) or int8 (as bf16, and mxfp4 products, "
          "and int8 ones of one row on AVX-512, quantize them to one int8 "
          "level per block of 32, as llama.cpp's Q8_0: faster mxfp4 and int8 "
          "decode).");
ABSL_FLAG(std::string, weight_prefetch, "auto",
          "How the CPU's decode products fetch weights ahead from memory: "
          "auto (the faster on this machine, measured at start-up in "
          "0.1-0.2 s), software (prefetch instructions ahead of the "
          "streams) or hardware (the hardware prefetchers alone). Outputs "
          "do not depend on it.");
ABSL_FLAG(std::string, resident_weights, "auto",
          "With every weight resident on the CPU (no expert streaming): "
          "where the weights kept as the checkpoint stores them are read: "
          "mapped (in place, from the checkpoint's page-cache pages), copied "
          "(into memory of their own at load, in 2 MiB pages where the host "
          "gives them) or auto (copied where the host gives huge pages and "
          "the page cache holds the checkpoint mostly in 4 KiB pages, as it "
          "does a file just written or first read in small pieces: their "
          "TLB misses slow decode).");
ABSL_FLAG(int, weight_group_size, 32,
          "Columns per scale of int8 and int4 weights: 32 or 64.");
ABSL_FLAG(int64_t, kv_cache_tokens, 0,
          "KV-cache capacity in tokens (of full-attention sequences) over all "
          "sequences; 0 = max(4096, max_position_embeddings).");
ABSL_FLAG(int64_t, kv_block_size, 16,
          "Positions per KV-cache block (a block holds one layer's).");
ABSL_FLAG(std::string, host_memory_budget, "",
          "RAM for weights, e.g. 1GiB or 512MiB; empty = no limit. With "
          "--device=cpu, experts that do not fit stream from the checkpoint "
          "through the memory ring; with a device, RAM (pinned) for the "
          "experts outside device memory, the rest streaming from the "
          "checkpoint to the device through two staging buffers in it.");
ABSL_FLAG(std::string, device_memory_budget, "",
          "GPU memory for weights, ring slots and expert cache with "
          "--device=cuda:N, e.g. 40GiB; empty = the device's, every weight "
          "resident. Routed experts that do not fit run hybrid: from the "
          "GPU's cache, on the CPU or streamed to the GPU (--placement).");
ABSL_FLAG(std::string, placement, "auto",
          "With --device_memory_budget: where experts outside device memory "
          "run: auto (per step and expert, by a cost model calibrated at "
          "start-up), cpu (where their weights lie), stream (copied to the "
          "GPU through the ring), gpu (none may be outside: refuse a budget "
          "too small).");
ABSL_FLAG(bool, route_on_device, true,
          "With --device=cuda:N: MoE layers whose experts are all in device "
          "memory route and run them on the GPU, with no wait for the host "
          "between layers; false routes every layer on the host.");
ABSL_FLAG(bool, cuda_graphs, true,
          "With --route_on_device: decode steps of at most 8 tokens replay "
          "CUDA graphs recorded from their operations instead of issuing "
          "each from the host.");
ABSL_FLAG(int, ring_slots, 3,
          "Memory ring: slots (K >= 2), each holding one section of a layer's "
          "streamed experts.");
ABSL_FLAG(int, ring_section_experts, 0,
          "Memory ring: experts per section; 0 = as many as the budget holds "
          "in every slot, up to a whole layer.");
ABSL_FLAG(
    int, prefetch_depth, 2,
    "Memory ring: sections loaded ahead of the one computing (< ring_slots).");
ABSL_FLAG(
    std::string, ring_mode, "auto",
    "Memory ring: layer (stream whole layers), expert (only the experts a "
    "batch routes to, predicted ahead) or auto (by batch size).");
ABSL_FLAG(bool, expert_cache, true,
          "Memory ring: keep hot experts in the memory the ring does not use.");
ABSL_FLAG(bool, direct_io, true,
          "Memory ring: read the checkpoint with O_DIRECT.");
ABSL_FLAG(int, io_threads, 2, "Memory ring: threads reading the checkpoint.");

namespace ringmoe::runtime {

absl::StatusOr<EngineOptions> EngineOptionsFromFlags() {
  EngineOptions options;
  options.model_dir = absl::GetFlag(FLAGS_model);
  if (options.model_dir.empty()) {
    return absl::InvalidArgumentError("--model DIR is required");
  }
  options.device = absl::GetFlag(FLAGS_device);
  int device_index = 0;
  if (options.device != "cpu" && options.device != "standin" &&
      !(absl::StartsWith(options.device, "cuda:") &&
        absl::SimpleAtoi(options.device.substr(5), &device_index) &&
        device_index >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=", options.device, ": expected cpu, cuda:N or standin"));
  }
  const bool on_device = options.device != "cpu";
  // More threads than this would only fail to start (or thrash).
  constexpr int kMaxThreads = 1024;
  if (absl::GetFlag(FLAGS_threads) < 0 ||
      absl::GetFlag(FLAGS_threads) > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be 0 (all cores) or in [1, ", kMaxThreads,
                     "], got ", absl::GetFlag(FLAGS_threads)));
  }
  options.threads = absl::GetFlag(FLAGS_threads);
  const std::string dtype = absl::GetFlag(FLAGS_weight_dtype);
  model::WeightConversion& conversion = options.weight_conversion;
  if (dtype == "f32") {
    conversion.mlp_type = kernels::WeightType::kF32;
  } else if (dtype == "bf16") {
    conversion.mlp_type = kernels::WeightType::kBF16;
  } else if (dtype == "f16") {
    conversion.mlp_type = kernels::WeightType::kF16;
  } else if (dtype == "int8") {
    conversion.mlp_type = kernels::WeightType::kInt8;
  } else if (dtype == "int4") {
    conversion.mlp_type = kernels::WeightType::kInt4;
  } else if (dtype != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight_dtype=", dtype,
                     ": expected auto, bf16, f16, f32, int8 or int4"));
  }
  conversion.attention = absl::GetFlag(FLAGS_quantize_attention);
  conversion.lm_head = absl::GetFlag(FLAGS_quantize_lm_head);
  {
    const std::string precision = absl::GetFlag(FLAGS_activation_precision);
    bool known = false;
    for (const kernels::ActivationPrecision p :
         {kernels::ActivationPrecision::kF32,
          kernels::ActivationPrecision::kBf16,
          kernels::ActivationPrecision::kInt8}) {
      if (precision == kernels::ActivationPrecisionName(p)) {
        options.activation_precision = p;
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("--activation_precision=", precision,
                       ": expected f32, bf16 or int8"));
    }
  }
  if (const std::string prefetch = absl::GetFlag(FLAGS_weight_prefetch);
      prefetch == "auto") {
    options.weight_prefetch.reset();
  } else if (prefetch == "software" || prefetch == "hardware") {
    options.weight_prefetch = prefetch == "hardware"
                                  ? kernels::WeightPrefetch::kHardwareOnly
                                  : kernels::WeightPrefetch::kSoftware;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight_prefetch=", prefetch,
                     ": expected auto, software or hardware"));
  }
  if (const std::string resident = absl::GetFlag(FLAGS_resident_weights);
      resident == "auto") {
    options.resident_weights = ResidentWeights::kAuto;
  } else if (resident == "mapped") {
    options.resident_weights = ResidentWeights::kMapped;
  } else if (resident == "copied") {
    options.resident_weights = ResidentWeights::kCopied;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--resident_weights=", resident, ": expected auto, mapped or copied"));
  }
  conversion.group_size = absl::GetFlag(FLAGS_weight_group_size);
  if (conversion.group_size != 32 && conversion.group_size != 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--weight_group_size=", conversion.group_size, ": expected 32 or 64"));
  }
  absl::StatusOr<PlacementMode> placement =
      ParsePlacementMode(absl::GetFlag(FLAGS_placement));
  if (!placement.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", placement.status().message()));
  }
  options.placement = *placement;
  options.route_on_device = absl::GetFlag(FLAGS_route_on_device);
  options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  StreamingOptions& ring = options.streaming;
  if (const std::string budget = absl::GetFlag(FLAGS_device_memory_budget);
      !budget.empty()) {
    if (!on_device) {
      return absl::InvalidArgumentError(
          "--device_memory_budget applies to --device=cuda:N; with "
          "--device=cpu use --host_memory_budget");
    }
    absl::StatusOr<uint64_t> bytes = memory_ring::ParseByteSize(budget);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device_memory_budget: ", bytes.status().message()));
    }
    options.device_memory_budget = static_cast<int64_t>(*bytes);
  }
  if (const std::string budget = absl::GetFlag(FLAGS_host_memory_budget);
      !budget.empty()) {
    absl::StatusOr<uint64_t> bytes = memory_ring::ParseByteSize(budget);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--host_memory_budget: ", bytes.status().message()));
    }
    ring.memory_budget = *bytes;
  }
  ring.num_slots = absl::GetFlag(FLAGS_ring_slots);
  ring.prefetch_depth = absl::GetFlag(FLAGS_prefetch_depth);
  if (ring.num_slots < 2 || ring.prefetch_depth < 0 ||
      ring.prefetch_depth >= ring.num_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ring_slots must be at least 2 and --prefetch_depth in "
                     "[0, ring_slots - 1]; got ",
                     ring.num_slots, " and ", ring.prefetch_depth));
  }
  ring.section_experts = absl::GetFlag(FLAGS_ring_section_experts);
  if (ring.section_experts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ring_section_experts must be >= 0 (0: as many as fit); "
                     "got ",
                     ring.section_experts));
  }
  const std::string mode = absl::GetFlag(FLAGS_ring_mode);
  if (mode == "auto") {
    ring.mode = RingMode::kAuto;
  } else if (mode == "layer") {
    ring.mode = RingMode::kLayer;
  } else if (mode == "expert") {
    ring.mode = RingMode::kExpert;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--ring_mode=", mode, ": expected auto, layer or expert"));
  }
  ring.expert_cache = absl::GetFlag(FLAGS_expert_cache);
  ring.direct_io = absl::GetFlag(FLAGS_direct_io);
  ring.io_threads = absl::GetFlag(FLAGS_io_threads);
  if (ring.io_threads < 1 || ring.io_threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--io_threads must lie in [1, 256], got ", ring.io_threads));
  }
  options.kv_cache_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  options.kv_block_size = absl::GetFlag(FLAGS_kv_block_size);
  // Bounds far above any real cache, so that sizes computed from them
  // cannot overflow; whether the cache fits is checked against the
  // machine's memory when the model loads.
  constexpr int64_t kMaxKvTokens = int64_t{1} << 40;
  constexpr int64_t kMaxKvBlock = int64_t{1} << 20;
  if (options.kv_cache_tokens < 0 || options.kv_cache_tokens > kMaxKvTokens ||
      options.kv_block_size <= 0 || options.kv_block_size > kMaxKvBlock) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv_cache_tokens must lie in [0, 2^40] and --kv_block_size in [1, "
        "2^20], got ",
        options.kv_cache_tokens, " and ", options.kv_block_size));
  }
  return options;
}

}  // namespace ringmoe::runtime
