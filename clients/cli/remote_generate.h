// `ringmoe generate --server HOST:PORT`: the same output as the offline
// command, produced by a running ringmoe_server over ringmoe.v1.Generation.
#ifndef RINGMOE_CLIENTS_CLI_REMOTE_GENERATE_H_
#define RINGMOE_CLIENTS_CLI_REMOTE_GENERATE_H_

#include <string>

#include "engine/runtime/sampler.h"

namespace ringmoe::cli {

// Exactly one of `prompt` and `id_text` ("1,2,3") is non-empty. Prints as
// the offline command does (streamed text, or one JSON object with --json);
// returns the exit status.
int RunGenerateOnServer(const std::string& server, const std::string& prompt,
                        const std::string& id_text,
                        const runtime::SamplingParams& params, bool stream,
                        bool json);

// `ringmoe bench-serve`; reads its own flags.
int RunBenchServe();

}  // namespace ringmoe::cli

#endif  // RINGMOE_CLIENTS_CLI_REMOTE_GENERATE_H_
