// Subcommands of the atoll binary. Each takes the arguments after its command words and
// returns the process exit code (0 ok, 1 runtime failure, 2 bad usage).
#pragma once

#include <string>
#include <vector>

namespace atl::cli {

using Args = std::vector<std::string>;

int cmd_train(const Args& args);
int cmd_generate(const Args& args);
int cmd_eval(const Args& args);
int cmd_ca(const Args& args);
int cmd_coordinator(const Args& args);
int cmd_node(const Args& args);
// `atoll node --role teacher|student` (cli/distill_node.cc).
int cmd_distill_node(const Args& args, const std::string& role);
int cmd_demo(const Args& args);
// `atoll simulate` (cli/simulate_cmd.cc): the demo's experiment with in-process sites.
int cmd_simulate(const Args& args);
// `atoll demo --algorithm hydra` (cli/demo_hydra.cc).
int demo_hydra(const Args& args);
// `atoll demo --algorithm distill` (cli/demo_distill.cc).
int cmd_demo_distill(const Args& args);
// `atoll simulate --algorithm distill` (cli/demo_distill.cc): the same, students in-process.
int cmd_simulate_distill(const Args& args);
int cmd_bench(const Args& args);
int cmd_token(const Args& args);
// `atoll import hf DIR --out CKPT` and `atoll export hf CKPT --out DIR` (cli/hf_cmd.cc).
int cmd_import(const Args& args);
int cmd_export(const Args& args);

// Prints "atoll <command>: <message>" to stderr (one line) and returns the exit code.
int fail(const std::string& command, const std::string& message, int code = 1);

}  // namespace atl::cli
