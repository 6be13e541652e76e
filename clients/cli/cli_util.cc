#include "clients/cli/cli_util.h"

#include <fstream>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

ABSL_FLAG(
    bool, stats, false,
    "Print the memory ring's counters as one JSON object on stderr at exit.");

namespace ringmoe::cli {

absl::Status ForEachJsonlLine(
    const std::string& path,
    const std::function<absl::Status(int, const std::string&)>& line_fn) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    absl::Status status = line_fn(line_number, line);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ParseIdList(absl::string_view text) {
  std::vector<int32_t> ids;
  for (absl::string_view item :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    int32_t id;
    if (!absl::SimpleAtoi(item, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", item, "' in the id list is not an integer"));
    }
    ids.push_back(id);
  }
  return ids;
}

std::vector<int32_t> SyntheticTokens(int64_t count, int64_t vocab,
                                     uint32_t seed) {
  std::vector<int32_t> ids(count);
  uint32_t state = seed * 2654435761u + 1;
  for (int32_t& id : ids) {
    state = state * 1664525u + 1013904223u;
    id = 3 + static_cast<int32_t>(state % static_cast<uint32_t>(vocab - 3));
  }
  return ids;
}

void MaybePrintRingStats(const memory_ring::RingStats& stats) {
  if (absl::GetFlag(FLAGS_stats)) std::cerr << stats.ToJson() << "\n";
}

int Fail(absl::string_view command, const absl::Status& status) {
  std::cerr << "ringmoe " << command << ": " << status << "\n";
  return 1;
}

}  // namespace ringmoe::cli
