// Engine flags shared by ringmoe_server and the offline `ringmoe` commands,
// so both load a model the same way.
#ifndef RINGMOE_ENGINE_RUNTIME_ENGINE_FLAGS_H_
#define RINGMOE_ENGINE_RUNTIME_ENGINE_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "engine/runtime/engine.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, device);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(std::string, weight_dtype);
ABSL_DECLARE_FLAG(bool, quantize_attention);
ABSL_DECLARE_FLAG(int, weight_group_size);
ABSL_DECLARE_FLAG(int64_t, kv_cache_tokens);
ABSL_DECLARE_FLAG(int64_t, kv_block_size);
ABSL_DECLARE_FLAG(std::string, host_memory_budget);
ABSL_DECLARE_FLAG(std::string, device_memory_budget);
ABSL_DECLARE_FLAG(std::string, placement);
ABSL_DECLARE_FLAG(int, ring_slots);
ABSL_DECLARE_FLAG(int, prefetch_depth);
ABSL_DECLARE_FLAG(std::string, ring_mode);
ABSL_DECLARE_FLAG(bool, expert_cache);
ABSL_DECLARE_FLAG(bool, direct_io);
ABSL_DECLARE_FLAG(int, io_threads);

namespace ringmoe::runtime {

// EngineOptions from the flags above; INVALID_ARGUMENT or UNIMPLEMENTED for
// values this build cannot serve, naming the flag.
absl::StatusOr<EngineOptions> EngineOptionsFromFlags();

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_ENGINE_FLAGS_H_
