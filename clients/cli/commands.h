// The `ringmoe` subcommands. Each reads its flags (already parsed) and
// returns the process exit status.
#ifndef RINGMOE_CLIENTS_CLI_COMMANDS_H_
#define RINGMOE_CLIENTS_CLI_COMMANDS_H_

namespace ringmoe::cli {

int RunBench();
int RunChatTemplate();
int RunDevices();
int RunGenerate();
int RunHealth();
int RunLogits();
int RunRingBench();
int RunTokenize();

}  // namespace ringmoe::cli

#endif  // RINGMOE_CLIENTS_CLI_COMMANDS_H_
