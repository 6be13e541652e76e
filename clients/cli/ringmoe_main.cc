// The `ringmoe` command: offline generation, logits and tokenization on a
// model directory, and device listing.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "clients/cli/commands.h"
#include "clients/cli/remote_generate.h"

namespace {

constexpr char kUsage[] =
    "usage: ringmoe <command> [flags]\n"
    "commands:\n"
    "  generate  --model DIR (--prompt TEXT | --input_ids 1,2,3) --max_tokens "
    "N\n"
    "            [--temperature T --top_k K --top_p P --min_p M --seed S ...]\n"
    "            [--stream] [--json]\n"
    "  logits    --model DIR --input_ids 1,2,3 --out FILE.safetensors\n"
    "  tokenize  (--model DIR | --tokenizer FILE) (--text TEXT | --jsonl "
    "FILE)\n"
    "            [--add_special_tokens=false]\n"
    "  tokenize  ... --decode (--ids 1,2,3 | --jsonl FILE) "
    "[--skip_special_tokens]\n"
    "  chat-template --tokenizer_dir DIR [--chat_template FILE] --jsonl FILE\n"
    "            render each line's conversation with the chat template\n"
    "  bench     --model DIR [--prompt_tokens P --gen_tokens G --batch B]\n"
    "            engine throughput and this machine's ceilings, as JSON\n"
    "  generate  --server HOST:PORT ...  the same through a running "
    "ringmoe_server\n"
    "  bench-ring --model DIR --host_memory_budget BYTES [--prompt_tokens P "
    "--gen_tokens G]\n"
    "  bench-serve --server HOST:PORT [--concurrency N | --rate R] "
    "[--num_requests N]\n"
    "            [--prompt_tokens_min/max N] [--output_tokens_min/max N]  load "
    "test (JSON)\n"
    "  health    --server HOST:PORT [--service NAME] [--timeout_s S]\n"
    "            grpc.health.v1 check; exit 0 only when SERVING\n"
    "  devices   the CPU (instruction sets, kernel paths) and CUDA devices\n"
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
  if (command == "chat-template") return ringmoe::cli::RunChatTemplate();
  if (command == "health") return ringmoe::cli::RunHealth();
  if (command == "devices") return ringmoe::cli::RunDevices();
  if (command == "bench-serve") return ringmoe::cli::RunBenchServe();
  if (command == "bench") return ringmoe::cli::RunBench();
  if (command == "bench-ring") return ringmoe::cli::RunRingBench();
  std::fprintf(stderr, "ringmoe: unknown command '%s'\n%s\n", command.c_str(),
               kUsage);
  return 2;
}
