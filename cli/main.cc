// atoll: one binary, one subcommand per job.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "kernels/core/build_info.h"
#include "kernels/core/heap_policy.h"
#include "kernels/cpu/backend_info.h"

namespace atl::cli {

int fail(const std::string& command, const std::string& message, int code) {
  std::fprintf(stderr, "atoll %s: %s\n", command.c_str(), message.c_str());
  return code;
}

int exit_code_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kPermissionDenied:
    case StatusCode::kOutOfRange:
      return 2;
    default:
      return 1;
  }
}

int fail(const std::string& command, const Status& status) {
  return fail(command, status.message(), exit_code_for(status));
}

namespace {

struct Command {
  const char* name;
  int (*run)(const Args&);
  const char* help;
  // Writes a coordinator store (θ, configs, token hashes, the audit log) or a node's --state-dir
  // (θ_local, optimizer moments, its kept θ): everything the process creates is owner-only
  // (umask 077), including the SST files RocksDB writes later.
  bool private_files = false;
  // Streams θ and updates or commits rounds (θ-sized buffers): runs under the stream heap
  // policy (kernels/core/heap_policy.h).
  bool stream_heap = false;
};

const Command kCommands[] = {
    {"demo", cmd_demo, "DiLoCo across 4 local sites over mTLS gRPC (Atoll's main job)", true, true},
    {"simulate", cmd_simulate,
     "the demo's experiment with N virtual sites in this process (same θ, bit for bit)", true,
     true},
    {"train", cmd_train, "train a model on one site"},
    {"generate", cmd_generate, "sample text from a checkpoint"},
    {"eval", cmd_eval, "validation bits per byte of a checkpoint (--json: one JSON line)"},
    {"ca", cmd_ca, "experiment certificate authority: `ca init`, `ca issue`, `ca show`"},
    {"coordinator", cmd_coordinator, "run a coordinator", true, true},
    {"node", cmd_node, "run a node that joins a coordinator", true, true},
    {"token", cmd_token,
     "dashboard/API tokens: `token create --role viewer|admin`, `token list`, `token revoke`",
     true},
    {"bench", cmd_bench,
     "benchmarks: `bench train`, `bench sgemm`, `bench codecs`, `bench distill-loss`, "
     "`bench moe`, `bench hydra`, `bench lane`"},
    {"import", cmd_import, "`import hf DIR --out CKPT`: a Hugging Face Llama/Qwen2/Mistral model"},
    {"export", cmd_export,
     "`export hf CKPT --out DIR`: a checkpoint as a Hugging Face model; `export peft CKPT --out "
     "DIR`: a LoRA checkpoint's adapters as a PEFT adapter"},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: atoll <command> [flags]   (atoll <command> --help for its flags)\n\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
  std::fprintf(out, "  %-12s %s\n", "--version",
               "the version, the CPU, its BLAS kernels and the build's vector instructions");
}

}  // namespace
}  // namespace atl::cli

int main(int argc, char** argv) {
  using namespace atl::cli;
  atl::kernels::cpu::use_feature_blas_kernels(argv);  // may restart the process (backend_info.h)
  // So may this; it refuses a limit in which nothing fits (OpenBLAS would spin for ever).
  if (const atl::Status fits = atl::kernels::cpu::fit_blas_threads_to_address_limit(argv);
      !fits.ok()) {
    std::fprintf(stderr, "atoll: %s\n", fits.message().c_str());
    return 1;
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    const std::string date = atl::build_commit_date();
    std::printf("atoll %s (commit %s%s)\n%s\n", atl::atoll_version(), atl::build_commit(),
                date.empty() ? "" : (", " + date).c_str(),
                atl::kernels::cpu::backend_description().c_str());
    return 0;
  }
  Args args(argv + 2, argv + argc);
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    if (c.private_files) ::umask(077);
    if (c.stream_heap) atl::use_stream_heap_policy();
    // Output reaches a log file line by line (as on a terminal): a process killed mid-run used to
    // lose every line still in stdio's 4 KiB buffer ("checkpoint: ..." lines included).
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    try {
      return c.run(args);
    } catch (const std::bad_alloc&) {
      // A size no check caught (a model or buffer larger than this machine's memory, or than a
      // ulimit -v / cgroup allows): one line instead of "terminate called ... std::bad_alloc".
      std::fprintf(stderr,
                   "atoll %s: out of memory: a model, batch or buffer needs more memory than this "
                   "process may use (see `free -h` and `ulimit -v`); make it smaller\n",
                   c.name);
      return 1;
    }
  }
  std::fprintf(stderr, "atoll: unknown command '%s' (run `atoll --help` for the list)\n", argv[1]);
  return 2;
}
