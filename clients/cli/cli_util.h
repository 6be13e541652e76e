// Helpers the subcommands share.
#ifndef RINGMOE_CLIENTS_CLI_CLI_UTIL_H_
#define RINGMOE_CLIENTS_CLI_CLI_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "memory_ring/ring_stats.h"

namespace ringmoe::cli {

// "1,2,3" -> {1, 2, 3}; spaces allowed; INVALID_ARGUMENT naming the bad item.
absl::StatusOr<std::vector<int32_t>> ParseIdList(absl::string_view text);

// Calls `line_fn(line_number, line)` for each line of the JSONL file at
// `path` that is not blank (numbers from 1), stopping at the first error
// it returns. NOT_FOUND when the file cannot be opened.
absl::Status ForEachJsonlLine(
    const std::string& path,
    const std::function<absl::Status(int, const std::string&)>& line_fn);

// Prints "ringmoe <command>: <status>" on stderr and returns 1.
int Fail(absl::string_view command, const absl::Status& status);

// `count` deterministic token ids in [3, vocab) (clear of the usual special
// tokens 0..2) for benchmarks.
std::vector<int32_t> SyntheticTokens(int64_t count, int64_t vocab,
                                     uint32_t seed);

// With --stats, prints the memory ring's counters as one JSON object on
// stderr.
void MaybePrintRingStats(const memory_ring::RingStats& stats);

}  // namespace ringmoe::cli

#endif  // RINGMOE_CLIENTS_CLI_CLI_UTIL_H_
