// The `ringmoe` command: offline generation, logits and tokenization on a
// model directory, and device listing.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "clients/cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: ringmoe <command> [flags]\n"
    "commands:\n"
    "  generate  --model DIR (--prompt TEXT | --input_ids 1,2,3) --max_tokens N\n"
    "            [--temperature T --top_k K --top_p P --min_p M --seed S ...]\n"
    "            [--stream] [--json]\n"
    "  logits    --model DIR --input_ids 1,2,3 --out FILE.safetensors\n"
    "  tokenize  (--model DIR | --tokenizer FILE) (--text TEXT | --jsonl FILE)\n"
    "            [--add_special_tokens=false]\n"
    "  devices   list the CUDA devices\n"
    "Run `ringmoe --helpfull` for every flag.";

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() != 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const std::string command = positional[1];
  if (command == "generate") return ringmoe::cli::RunGenerate();
  if (command == "logits") return ringmoe::cli::RunLogits();
  if (command == "tokenize") return ringmoe::cli::RunTokenize();
  if (command == "devices") return ringmoe::cli::RunDevices();
  std::fprintf(stderr, "ringmoe: unknown command '%s'\n%s\n", command.c_str(), kUsage);
  return 2;
}
