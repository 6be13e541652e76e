// Runs a libFuzzer target without libFuzzer, so CI (gcc, Bazel) exercises
// it: over its seed corpus, then over deterministic random mutations of the
// seeds. Each target's *_replay_test.cc calls ReplayMain from its main().
//
//   <target>_fuzz_replay_test [--mutations=N] [--seed=S] [FILE_OR_DIR...]
//
// With no paths it reads tests/fuzz/corpus/<name> (relative to the runfiles
// root). When the target gives `accepts`, seeds named valid_* must be
// accepted and invalid_* refused, so a seed that stops reaching the code it
// was written for is caught. A crash or abort inside the target fails the
// test; each mutated input is written to $TEST_UNDECLARED_OUTPUTS_DIR (or
// /tmp) first so it can be replayed alone.
#ifndef RINGMOE_TESTS_FUZZ_REPLAY_H_
#define RINGMOE_TESTS_FUZZ_REPLAY_H_

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ringmoe::fuzz {

// Tokens from a libFuzzer dictionary: one `"..."` or `name="..."` a line,
// with \\, \" and \xNN escapes; blank lines and # comments skipped.
std::vector<std::string> ParseDictionary(absl::string_view text);

// One random edit of `s`: a bit flip, a random byte, an erased, duplicated or
// truncated range, a digit changed, one of `tokens` inserted, or a splice
// with one of `seeds`.
void MutateOnce(std::string& s, const std::vector<std::string>& tokens,
                const std::vector<std::string>& seeds, std::mt19937_64& rng);

struct ReplayTarget {
  // The corpus is tests/fuzz/corpus/<name>, the dictionary (optional)
  // tests/fuzz/<name>.dict, the saved input <name>_fuzz_current_input.
  std::string name;
  // Whether the parser under test accepts `input`; null: seeds are not
  // checked against their names.
  std::function<bool(absl::string_view input)> accepts;
  // A whole mutated input from the seeds; null: 1 to 4 MutateOnce edits of
  // a random seed.
  std::function<std::string(const std::vector<std::string>& seeds,
                            const std::vector<std::string>& tokens,
                            std::mt19937_64& rng)>
      mutate;
  int64_t mutations = 4000;  // default of --mutations
};

int ReplayMain(int argc, char** argv, const ReplayTarget& target);

}  // namespace ringmoe::fuzz

#endif  // RINGMOE_TESTS_FUZZ_REPLAY_H_
