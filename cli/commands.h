// Subcommands of the atoll binary. Each takes the arguments after its command words and
// returns the process exit code (0 ok, 1 runtime failure, 2 bad usage).
#pragma once

#include <string>
#include <vector>

#include "kernels/core/status.h"

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

// The exit code of a refused input or failed step, by who can fix it: 2 when the user's input is
// wrong and giving it differently fixes it (a flag, a name, a file they named or what it holds:
// InvalidArgument, NotFound, AlreadyExists, FailedPrecondition, PermissionDenied, OutOfRange),
// 1 when the environment failed (I/O errors, internal errors, unreachable peers: the rest).
int exit_code_for(const Status& status);
// fail(command, status.message(), exit_code_for(status)).
int fail(const std::string& command, const Status& status);

}  // namespace atl::cli
