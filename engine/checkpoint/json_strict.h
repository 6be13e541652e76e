// JSON parsing for untrusted checkpoint files.
#ifndef RINGMOE_ENGINE_CHECKPOINT_JSON_STRICT_H_
#define RINGMOE_ENGINE_CHECKPOINT_JSON_STRICT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace ringmoe::checkpoint {

// Parses `text` as one JSON value without ever throwing. Rejects, beyond
// syntax errors, what nlohmann accepts silently: duplicate keys in an object
// (it would keep the last one) and more than `max_depth` nested arrays and
// objects. Error messages do not name a file; callers prefix it.
absl::StatusOr<nlohmann::json> ParseJsonStrict(absl::string_view text,
                                               int max_depth);

}  // namespace ringmoe::checkpoint

#endif  // RINGMOE_ENGINE_CHECKPOINT_JSON_STRICT_H_
