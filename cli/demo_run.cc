#include "cli/demo_run.h"

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "algorithms/compress/codec.h"
#include "algorithms/diloco/robust.h"
#include "algorithms/model/llama.h"
#include "cli/commands.h"
#include "cli/coordinator_setup.h"
#include "cli/demo_events.h"
#include "cli/demo_sites.h"
#include "cli/event_queue.h"
#include "cli/global_eval.h"
#include "cli/log_output.h"
#include "cli/progress.h"
#include "cli/signals.h"
#include "coordinator/screening_note.h"
#include "kernels/cpu/ops.h"
#include "simulate/data_parallel.h"

namespace atl::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// This process's peak resident set (VmHWM) in bytes; 0 when /proc cannot tell.
uint64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
}

// What the progress loop adds up over the committed rounds.
struct RunTotals {
  double initial_bpb = 0, final_bpb = 0;
  // Over the whole experiment: a run that resumes a store counts the rounds committed before it
  // (rounds_resumed of rounds_done) from their records, so its summary is the experiment's.
  uint64_t bytes_up = 0, bytes_down = 0, rounds_done = 0, rounds_resumed = 0;
  uint64_t rounds_this_run() const { return rounds_done - rounds_resumed; }
  // Bytes of each sync r: Δ pushed in round r + the pull of its result θ_{r+1} (made in round
  // r+1). The first pull of θ (round 0) is the bootstrap, reported on its own.
  std::map<uint64_t, uint64_t> sync_bytes;
  uint64_t initial_pull_bytes = 0;
  double wall_s = 0;
  // The coordinator's commits (Event::commit_s): their sum and the longest, in seconds.
  double commit_s = 0, commit_max_s = 0;
  double privacy_epsilon = -1;  // ε after the last committed round; -1: [privacy] off
  // Screening over all rounds: updates clipped or dropped (of which dropped as replays, as stale
  // updates), the updates the honest sites (all but the last --byzantine) pushed and how many of
  // them were dropped (what screening costs an honest run), and the largest ratio of an update's
  // norm to its round's reference (lower median) norm: how far apart the updates were.
  uint64_t updates_clipped = 0, updates_dropped = 0, updates_replayed = 0, updates_stale = 0;
  uint64_t honest_updates = 0, honest_updates_dropped = 0;
  // What screening did since the last progress line (coordinator::screening_note of each round).
  std::string screening_since_line;
  double max_norm_ratio = 0;
  uint64_t peak_sync() const {
    uint64_t peak = 0;
    for (const auto& [r, b] : sync_bytes) peak = std::max(peak, b);
    return peak;
  }
};

// Everything a running demo holds, in destruction order: the sites go before the coordinator
// whose engine they call.
struct DemoRun {
  DemoRun(const DemoExperiment& experiment, SiteMode site_mode) : d(experiment), mode(site_mode) {}
  const DemoExperiment& d;
  const SiteMode mode;
  std::string run_dir, tls_dir, store_dir;
  std::vector<float> initial_theta;  // --init-from, else empty (θ_0 = init_params)
  std::unique_ptr<GlobalEvaluator> evaluator;
  EventQueue events;
  std::unique_ptr<RunningCoordinator> rc;
  std::unique_ptr<DemoSites> sites;
  uint32_t fragments() const { return d.config.diloco.streaming_fragments; }
  bool tls() const { return mode == SiteMode::kProcesses && !d.insecure; }
  const char* transport() const {
    return mode == SiteMode::kInProcess ? "in-process" : d.insecure ? "plaintext" : "TLS 1.3 mTLS";
  }
};

// The global evaluation on Brown's held-out documents, of the served model: with LoRA, base +
// adapters (the base's tokenizer).
Status make_evaluator(DemoRun& run) {
  const DemoExperiment& d = run.d;
  GlobalEvalOptions eval_options;
  eval_options.data_spec = "brown";
  eval_options.brown_dir = d.brown_dir;
  eval_options.batch = static_cast<int>(d.config.train.batch_size);
  eval_options.max_tokens = d.eval_tokens;
  if (run.rc->base) eval_options.tokenizer_blob = run.rc->base->meta.tokenizer;
  ATOLL_ASSIGN_OR_RETURN(run.evaluator, GlobalEvaluator::create(run.rc->model, eval_options));
  if (run.rc->base) {
    // One bf16 copy ([lora] base_dtype) for the evaluator and every in-process site.
    const algorithms::LoraConfig lora = coordinator::lora_config(run.rc->config);
    run.evaluator->attach_lora(lora, run.rc->base->frozen(lora.base_storage, false));
  }
  return Status::Ok();
}

// Run directory, certificates, the LoRA base, the embedded coordinator and the evaluator. Exit
// code on failure.
std::optional<int> prepare(const std::string& cmd, DemoRun& run) {
  const DemoExperiment& d = run.d;
  const auto model = model_config_of(d.config);
  auto run_dir = demo_run_dir(d.store, "atoll-" + cmd);
  if (!run_dir.ok()) return fail(cmd, run_dir.status().message());
  run.run_dir = *run_dir;
  run.tls_dir = run.run_dir + "/tls";
  run.store_dir = run.run_dir + "/store";
  // The dashboard is HTTPS with the coordinator's certificate, in-process sites too.
  if (!d.insecure && (run.mode == SiteMode::kProcesses || d.http != "off"))
    if (Status s = provision_dev_ca(run.tls_dir, {"coordinator"}, d.site_names); !s.ok())
      return fail(cmd, s.message());
  kernels::cpu::set_num_threads(static_cast<int>(run.mode == SiteMode::kInProcess ? d.threads : 1));

  CoordinatorLaunch launch;
  launch.config = d.config;
  if (d.config.is_lora() && d.config.lora.base.empty()) {
    auto base = pretrain_demo_base(d, run.run_dir);
    if (!base.ok()) {
      if (install_stop_signals()->load()) return stopped_exit_code();
      return fail(cmd, base.status().message());
    }
    launch.config.lora.base = *base;
  }
  launch.store_dir = run.store_dir;
  launch.tls_dir = run.tls_dir;
  launch.insecure = d.insecure;
  if (run.mode == SiteMode::kInProcess) launch.listen = "";  // no gRPC: the sites are threads
  if (d.init_from) {
    auto ck = initial_checkpoint(*d.init_from, model);
    if (!ck.ok()) return fail(cmd, ck.status().message(), 2);
    run.initial_theta = std::move(ck->theta);
    launch.initial_theta = run.initial_theta;  // its tokenizer is not the sites' (Brown in bytes)
  }
  launch.on_event = [&run](const coordinator::Event& e) { run.events.push(e); };
  if (d.http != "off") launch.http_listen = d.http;
  if (d.bulk_lane && !d.insecure && !launch.listen.empty()) launch.bulk_listen = "127.0.0.1:0";
  auto running = launch_coordinator(launch);
  if (!running.ok()) return fail(cmd, running.status().message(), d.config.is_lora() ? 2 : 1);
  run.rc = std::move(running).value();
  if (Status s = make_evaluator(run); !s.ok()) return fail(cmd, s.message());
  return std::nullopt;
}

void print_header(const DemoRun& run) {
  const DemoExperiment& d = run.d;
  const auto layout = coordinator::theta_layout(run.rc->config);
  std::printf("atoll %s: %zu sites, %" PRId64 " rounds x %" PRId64
              " inner steps, %s %s "
              "params, codec %s, %s\n",
              run.mode == SiteMode::kInProcess ? "simulate" : "demo", d.site_names.size(), d.rounds,
              d.inner_steps, run.rc->base ? "adapters" : "model",
              format_count(static_cast<double>(layout.numel())).c_str(),
              d.config.train.codec.c_str(),
              run.mode == SiteMode::kInProcess ? "in-process sites"
              : d.insecure                     ? "INSECURE plaintext"
                                               : "TLS 1.3 mTLS");
  if (run.rc->base)
    std::printf(
        "LoRA r=%u alpha=%g on %s: %s adapter parameters travel, of %s in the base %s "
        "(sha256 %.16s...)\n",
        run.rc->config.lora.rank, run.rc->config.lora.alpha, run.rc->config.lora.targets.c_str(),
        format_count(static_cast<double>(layout.numel())).c_str(),
        format_count(static_cast<double>(run.rc->base->params->numel())).c_str(),
        run.rc->base->path.c_str(), run.rc->base->fingerprint.c_str());
  if (run.rc->server && run.rc->server->bulk_port() != 0)
    std::printf("coordinator %s, store %s, bulk lane port %d\n",
                run.rc->server->address().c_str(), run.store_dir.c_str(),
                run.rc->server->bulk_port());
  else if (run.rc->server)
    std::printf("coordinator %s, store %s\n", run.rc->server->address().c_str(),
                run.store_dir.c_str());
  else
    std::printf("coordinator in-process, store %s\n", run.store_dir.c_str());
}

void print_sites(const DemoRun& run, double initial_bpb, uint64_t start_round) {
  const DemoExperiment& d = run.d;
  const size_t honest = d.site_names.size() - static_cast<size_t>(d.byzantine);
  for (size_t i = 0; i < d.site_names.size(); ++i)
    std::printf("  %s: %s%s%s\n", d.site_names[i].c_str(), d.site_data[i].c_str(),
                i >= honest ? ", Byzantine: " : "", i >= honest ? simulate::attack_name(d.attack) : "");
  std::printf("%s\n", coordinator::protection_summary(d.config).c_str());
  for (const std::string& line : coordinator::ignored_settings(d.config))
    std::printf("%s\n", line.c_str());
  if (start_round > 0 && !d.site_states)
    std::printf(
        "resuming the experiment in this store at round %" PRIu64
        ": the sites start again from a fresh optimizer state and error feedback, so the run "
        "will not end on the bits of an uninterrupted one (--site-states keeps them)\n",
        start_round);
  std::printf("round %3" PRIu64 " | val bpb %.4f (%s)\n", start_round / run.fragments(),
              initial_bpb, start_round > 0 ? "resumed" : "initial");
  std::fflush(stdout);
}

Status start_sites(DemoRun& run) {
  const DemoExperiment& d = run.d;
  std::vector<SiteSpec> specs;
  const size_t honest = d.site_names.size() - static_cast<size_t>(d.byzantine);
  for (size_t i = 0; i < d.site_names.size(); ++i) {
    SiteSpec spec{d.site_names[i], d.site_data[i]};
    if (i >= honest) {
      spec.attack = d.attack;
      spec.attack_seed = d.config.seed ^ (0x9E3779B97F4A7C15ull * (i + 1));  // one key per site
    }
    specs.push_back(std::move(spec));
  }
  const SiteLaunch launch{run.mode,
                          run.rc->server ? run.rc->server->address() : "",
                          run.tls_dir,
                          d.insecure,
                          static_cast<int>(d.threads),
                          d.brown_dir,
                          run.run_dir,
                          run.rc->base,
                          d.keep_best,
                          d.site_states ? run.run_dir + "/site-states" : "",
                          run.rc->metrics.get()};
  ATOLL_ASSIGN_OR_RETURN(run.sites, launch_sites(run.rc->service->engine(), specs, launch));
  return run.rc->service->start();
}

void tally_screening(const DemoExperiment& d, const coordinator::RoundRecord& rec, RunTotals& t) {
  const size_t honest_sites = d.site_names.size() - static_cast<size_t>(d.byzantine);
  const std::set<std::string> honest(d.site_names.begin(), d.site_names.begin() + honest_sites);
  std::vector<double> norms;
  for (const auto& p : rec.participants) {
    if (!p.pushed) continue;
    norms.push_back(p.norm);
    if (honest.count(p.node_id)) {
      ++t.honest_updates;
      t.honest_updates_dropped += p.screen == "dropped";
    }
    t.updates_clipped += p.screen == "clipped";
    t.updates_dropped += p.screen == "dropped";
    t.updates_replayed += p.screen == "dropped" && p.screen_reason == "replay";
    t.updates_stale += p.screen == "dropped" && p.screen_reason == "stale";
  }
  const double reference = algorithms::reference_norm(norms);
  if (reference > 0)
    for (double n : norms) t.max_norm_ratio = std::max(t.max_norm_ratio, n / reference);
}

// One progress line per outer round (Streaming: after every fragment synced once).
// Adds a committed round's bytes, screening and privacy figures to the totals.
void tally_round(const DemoRun& run, const coordinator::RoundRecord& rec, RunTotals& t) {
  t.bytes_up += rec.bytes_up;
  t.bytes_down += rec.bytes_down + coordinator::late_bytes_down_total(rec);
  t.sync_bytes[rec.round] += rec.bytes_up;
  if (rec.round == 0)
    t.initial_pull_bytes = rec.bytes_down;
  else
    t.sync_bytes[rec.round - 1] += rec.bytes_down;
  ++t.rounds_done;
  t.privacy_epsilon = rec.privacy_epsilon;
  tally_screening(run.d, rec, t);
}

// The rounds a store already holds when this run resumes it (start_round > 0), into the totals.
Status tally_stored_rounds(const DemoRun& run, RunTotals& t, uint64_t start_round) {
  for (uint64_t r = 0; r < start_round; ++r) {
    ATOLL_ASSIGN_OR_RETURN(coordinator::RoundRecord rec,
                           run.rc->store->load_round(run.rc->service->experiment_id(), r));
    tally_round(run, rec, t);
  }
  t.rounds_resumed = t.rounds_done;
  return Status::Ok();
}

void on_round_committed(DemoRun& run, const coordinator::RoundRecord& rec,
                        const std::vector<float>* committed_params, RunTotals& t,
                        Clock::time_point t0, uint64_t start_round, uint64_t& outer_up,
                        uint64_t& outer_down, double& outer_s) {
  const uint32_t P = run.fragments();
  const uint64_t total_syncs = run.d.config.diloco.rounds;
  tally_round(run, rec, t);
  t.screening_since_line += coordinator::screening_note(rec);
  outer_up += rec.bytes_up;
  outer_down += rec.bytes_down;
  outer_s += rec.duration_s;
  if ((rec.round + 1) % P != 0 && rec.round + 1 < total_syncs) return;
  if (auto v =
          run.evaluator->evaluate_and_publish(*run.rc, run.rc->service->experiment_id(),
                                              rec.round + 1, committed_params, (rec.round + 1) / P);
      v.ok())
    t.final_bpb = *v;
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const double eta =
      elapsed / static_cast<double>(t.rounds_this_run()) *
      (static_cast<double>(total_syncs - start_round) - static_cast<double>(t.rounds_this_run()));
  const std::string losses = format_participant_losses(rec);
  const std::string epsilon =
      t.privacy_epsilon == -1 ? "" : format_line(" | privacy epsilon %.4g", t.privacy_epsilon);
  std::printf("round %3" PRIu64 "/%" PRIu64
              " | val bpb %.4f%s | loss%s | up %s down %s | "
              "%s | ETA %s%s\n",
              (rec.round + 1) / P, static_cast<uint64_t>(run.d.rounds), t.final_bpb,
              epsilon.c_str(), losses.c_str(), format_bytes(static_cast<double>(outer_up)).c_str(),
              format_bytes(static_cast<double>(outer_down)).c_str(),
              format_duration(outer_s).c_str(), format_duration(eta).c_str(),
              t.screening_since_line.c_str());
  t.screening_since_line.clear();
  outer_up = outer_down = 0;
  outer_s = 0;
  std::fflush(stdout);
}

// Follows the coordinator's events until the experiment finishes. Exit code when it does not.
std::optional<int> watch_rounds(const std::string& cmd, DemoRun& run, RunTotals& t,
                                uint64_t start_round) {
  const auto t0 = Clock::now();
  uint64_t outer_up = 0, outer_down = 0;  // since the last progress line (P syncs)
  double outer_s = 0;
  DemoEventHandlers handlers;
  handlers.on_round_committed = [&](const coordinator::Event& e) {
    t.commit_s += e.commit_s;
    t.commit_max_s = std::max(t.commit_max_s, e.commit_s);
    on_round_committed(run, *e.record, e.params.get(), t, t0, start_round, outer_up, outer_down,
                       outer_s);
  };
  if (auto code = follow_demo_events(cmd, run.events, *run.sites, run.store_dir, handlers))
    return code;
  run.sites->finish();
  t.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return std::nullopt;
}

// Validation bpb of the data-parallel equivalent (NaN without --baseline). Exit code on failure.
StatusOr<double> baseline_bpb(DemoRun& run) {
  const DemoExperiment& d = run.d;
  if (!d.baseline) return NAN;
  const int64_t steps = d.rounds * d.inner_steps;
  std::printf("baseline: data-parallel, %zu workers x %u rows, %" PRId64 " steps ...\n",
              d.site_names.size(), d.config.train.batch_size, steps);
  std::fflush(stdout);
  kernels::cpu::set_num_threads(0);
  algorithms::ParamSet p(algorithms::make_layout(run.rc->model));
  algorithms::init_params(p, run.rc->model, d.config.seed);
  if (!run.initial_theta.empty()) p.vec() = run.initial_theta;  // the same θ_0 as DiLoCo
  std::vector<simulate::DataParallelSite> sites;
  for (size_t i = 0; i < d.site_names.size(); ++i) sites.push_back({d.site_names[i], d.site_data[i]});
  simulate::DataParallelOptions o;
  o.brown_dir = d.brown_dir;
  o.stop = install_stop_signals();
  ATOLL_RETURN_IF_ERROR(simulate::train_data_parallel(d.config, sites, p, o));
  kernels::cpu::set_num_threads(1);
  return run.evaluator->bpb(p);
}

// What the run's bytes are compared with, in bytes.
struct ByteComparison {
  // Data-parallel training would all-reduce the fp32 gradient every inner step: a ring
  // all-reduce makes each of the N workers send 2(N−1)/N · numel·4 bytes per step.
  double ddp = 0;
  // Plain DiLoCo on the same run: every sync pushes the whole Δ (through the codec) and pulls
  // the whole θ, from every node; R such syncs. (Streaming pulls the result of every sync but the
  // very last; plain DiLoCo skips the pull after its last round.)
  uint64_t plain_per_sync = 0, plain_total = 0;
  // LoRA: θ is the adapters; a full-parameter run of the same model would push and pull
  // full_numel values per site and sync.
  uint64_t theta_numel = 0, full_numel = 0, full_per_sync = 0;
};

// Bytes one site pushes for a Δ of `numel` values through `codec` (fp32 without one). With a
// "+zstd" codec, the bytes before the entropy stage (the frame's size depends on the values), so
// the comparisons built on it are upper bounds (the summary says so).
uint64_t update_bytes(const std::string& codec, uint64_t numel) {
  if (codec == "none") return numel * 4;
  if (auto bits = algorithms::compress::bits_per_value(codec, numel); bits.ok())
    return static_cast<uint64_t>(std::ceil(*bits * static_cast<double>(numel) / 8.0));
  return numel * 4;
}

ByteComparison compare_bytes(const DemoRun& run) {
  const DemoExperiment& d = run.d;
  const uint64_t numel = coordinator::theta_layout(run.rc->config).numel();
  const size_t N = d.site_names.size();
  ByteComparison c;
  const double steps = static_cast<double>(d.rounds) * static_cast<double>(d.inner_steps);
  c.ddp = steps * 2.0 * static_cast<double>(N - 1) * static_cast<double>(numel) * 4.0;
  const std::string& codec = d.config.train.codec;
  // Pulls: the whole fp32 θ, or with a compressed broadcast (pull_codec names a codec) the
  // update message after the first, full pull.
  const std::string& pull = d.config.diloco.pull_codec;
  const bool broadcast = d.config.compressed_broadcast();
  auto down_bytes = [&](uint64_t n) { return broadcast ? update_bytes(pull, n) : n * 4; };
  c.plain_per_sync = static_cast<uint64_t>(N) * (update_bytes(codec, numel) + down_bytes(numel));
  c.plain_total = static_cast<uint64_t>(d.rounds) * c.plain_per_sync;
  if (broadcast) c.plain_total += static_cast<uint64_t>(N) * (numel * 4 - down_bytes(numel));
  c.theta_numel = numel;
  c.full_numel = algorithms::make_layout(run.rc->model).numel();
  c.full_per_sync = static_cast<uint64_t>(N) *
                    (update_bytes(codec, c.full_numel) + down_bytes(c.full_numel));
  return c;
}

void print_summary(const DemoRun& run, const RunTotals& t, double baseline,
                   const ByteComparison& c) {
  const DemoExperiment& d = run.d;
  const uint32_t P = run.fragments();
  const size_t N = d.site_names.size();
  const double sent = static_cast<double>(t.bytes_up + t.bytes_down);
  std::printf("\nsummary: %zu nodes, %" PRIu64 " rounds x %" PRId64 " inner steps, %s\n", N,
              t.rounds_done / P, d.inner_steps, run.transport());
  std::printf("  validation bpb   %.4f -> %.4f\n", t.initial_bpb, t.final_bpb);
  if (std::isfinite(baseline))
    std::printf("  data-parallel    %.4f (same tokens; DiLoCo is %+.2f%%)\n", baseline,
                100.0 * (t.final_bpb - baseline) / baseline);
  std::printf("  bytes sent       %s (up %s, down %s)\n", format_bytes(sent).c_str(),
              format_bytes(static_cast<double>(t.bytes_up)).c_str(),
              format_bytes(static_cast<double>(t.bytes_down)).c_str());
  // Estimates through a "+zstd" codec count the bytes before the entropy stage.
  auto entropy_stage = [](const std::string& spec) {
    auto parsed = algorithms::compress::parse_spec(spec);  // "exact", "full"... are no codec
    return parsed.ok() && parsed->zstd;
  };
  const bool entropy_coded =
      entropy_stage(d.config.train.codec) || entropy_stage(d.config.diloco.pull_codec);
  const char* at_most = entropy_coded ? "at most " : "";
  if (P > 1)
    std::printf("  peak per sync    %s (plain DiLoCo: %s%s); %" PRIu64 " syncs, first pull %s\n",
                format_bytes(static_cast<double>(t.peak_sync())).c_str(), at_most,
                format_bytes(static_cast<double>(c.plain_per_sync)).c_str(), t.rounds_done,
                format_bytes(static_cast<double>(t.initial_pull_bytes)).c_str());
  if (P > 1 || d.config.diloco.overlap_steps > 0)
    std::printf("  streaming        %u fragments, overlap %u steps, merge alpha %.2f "
                "(plain DiLoCo would send %s%s)\n",
                P, d.config.diloco.overlap_steps, d.config.diloco.merge_alpha, at_most,
                format_bytes(static_cast<double>(c.plain_total)).c_str());
  if (run.rc->base && t.rounds_done > 0) {
    const double per_round = sent / static_cast<double>(t.rounds_done);
    std::printf("  LoRA adapters    %s trainable of %s (%.2f%%)\n",
                format_count(static_cast<double>(c.theta_numel)).c_str(),
                format_count(static_cast<double>(c.full_numel)).c_str(),
                100.0 * static_cast<double>(c.theta_numel) / static_cast<double>(c.full_numel));
    // Adapters of a rank near the model's width can hold more values than the weights.
    const double full_over_lora = static_cast<double>(c.full_per_sync) / per_round;
    std::printf("  bytes per round  %s (full-parameter DiLoCo: %s%s, %.1fx %s)\n",
                format_bytes(per_round).c_str(), at_most,
                format_bytes(static_cast<double>(c.full_per_sync)).c_str(),
                full_over_lora >= 1.0 ? full_over_lora : 1.0 / full_over_lora,
                full_over_lora >= 1.0 ? "more" : "fewer: these adapters are larger than the model");
  }
  std::printf("  data-parallel    %s for the same tokens (%.1fx more)\n",
              format_bytes(c.ddp).c_str(), sent > 0 ? c.ddp / sent : 0.0);
  std::printf("  wall time        %s (%.3f rounds/s)\n", format_duration(t.wall_s).c_str(),
              t.wall_s > 0 ? static_cast<double>(t.rounds_this_run()) / t.wall_s : 0.0);
  std::printf("  commits          %.2f s in all, longest %.2f s\n", t.commit_s, t.commit_max_s);
  if (run.mode == SiteMode::kInProcess)
    std::printf("  peak memory      %s for %zu sites\n",
                format_bytes(static_cast<double>(peak_rss_bytes())).c_str(), N);
  std::printf("  final sha256     %s\n", run.rc->service->params_fingerprint().c_str());
  // The frozen base every site trained over, hashed again after the run (in-process sites share
  // this very copy).
  if (run.rc->base)
    std::printf(
        "  base sha256      %s (%s)\n", run.rc->base->params->fingerprint().c_str(),
        run.rc->base->params->fingerprint() == run.rc->base->fingerprint ? "unchanged" : "CHANGED");
}

Status write_summary_json(const DemoRun& run, const RunTotals& t, double baseline,
                          const ByteComparison& c, const std::string& path) {
  const DemoExperiment& d = run.d;
  const coordinator::ExperimentConfig& cfg = d.config;
  const uint32_t P = run.fragments();
  const size_t N = d.site_names.size();
  const bool dp = cfg.privacy.clip_norm > 0;
  std::ofstream out(path);
  out << "{\"initial_val_bpb\":" << json_number(t.initial_bpb)
      << ",\"final_val_bpb\":" << json_number(t.final_bpb);
  if (std::isfinite(baseline)) out << ",\"baseline_val_bpb\":" << json_number(baseline);
  out << ",\"bytes_sent\":" << t.bytes_up + t.bytes_down << ",\"bytes_up\":" << t.bytes_up
      << ",\"bytes_down\":" << t.bytes_down
      << ",\"ddp_bytes_equivalent\":" << static_cast<uint64_t>(c.ddp)
      << ",\"tls\":" << (run.tls() ? "true" : "false") << ",\"sites\":\""
      << (run.mode == SiteMode::kInProcess ? "in-process" : "processes") << "\""
      << ",\"nodes\":" << N << ",\"byzantine\":" << d.byzantine << ",\"attack\":\""
      << simulate::attack_name(d.attack) << "\",\"screen\":\"" << cfg.robust.screen
      << "\",\"norm_multiple\":" << json_number(cfg.robust.norm_multiple) << ",\"aggregator\":\""
      << cfg.robust.aggregator
      << "\""
      // Under differential privacy the records hold no norms, so no clip count or ratio.
      << ",\"updates_clipped\":" << (dp ? "null" : std::to_string(t.updates_clipped))
      << ",\"updates_dropped\":" << t.updates_dropped
      << ",\"updates_replayed\":" << t.updates_replayed << ",\"replay_cosine\":"
      << json_number(cfg.robust.screen == "off" ? 0.0 : cfg.robust.replay_cosine)
      << ",\"updates_stale\":" << t.updates_stale << ",\"honest_updates\":" << t.honest_updates
      << ",\"honest_updates_dropped\":" << t.honest_updates_dropped << ",\"stale_margin\":"
      << json_number(cfg.robust.screen == "off" ? 0.0 : cfg.robust.stale_margin)
      << ",\"max_norm_ratio\":" << (dp ? "null" : json_number(t.max_norm_ratio))
      << ",\"rounds\":" << t.rounds_done / P << ",\"inner_steps\":" << d.inner_steps
      << ",\"codec\":\"" << cfg.train.codec << "\""
      << ",\"fragments\":" << P << ",\"overlap_steps\":" << cfg.diloco.overlap_steps
      << ",\"merge_alpha\":" << json_number(cfg.diloco.merge_alpha) << ",\"pull_codec\":\""
      << cfg.diloco.pull_codec << "\""
      << ",\"syncs\":" << t.rounds_done << ",\"peak_bytes_per_sync\":" << t.peak_sync()
      << ",\"initial_pull_bytes\":" << t.initial_pull_bytes
      << ",\"plain_peak_bytes_per_sync\":" << c.plain_per_sync
      << ",\"plain_bytes_sent\":" << c.plain_total
      << ",\"error_feedback\":" << (cfg.train.error_feedback ? "true" : "false")
      << ",\"outer_lr\":" << json_number(cfg.diloco.outer_lr)
      << ",\"outer_momentum\":" << json_number(cfg.diloco.outer_momentum)
      << ",\"warm_start\":" << (run.initial_theta.empty() ? "false" : "true");
  if (run.rc->base)
    out << ",\"lora_rank\":" << run.rc->config.lora.rank << ",\"lora_targets\":\""
        << run.rc->config.lora.targets << "\",\"trainable_params\":" << c.theta_numel
        << ",\"full_params\":" << c.full_numel << ",\"bytes_per_round\":"
        << (t.rounds_done ? (t.bytes_up + t.bytes_down) / t.rounds_done : 0)
        << ",\"full_bytes_per_round\":" << c.full_per_sync << ",\"base_fingerprint\":\""
        << run.rc->base->fingerprint << "\"";
  if (cfg.privacy.clip_norm > 0)
    out << ",\"privacy_clip_norm\":" << json_number(cfg.privacy.clip_norm)
        << ",\"privacy_noise_multiplier\":" << json_number(cfg.privacy.noise_multiplier)
        << ",\"privacy_delta\":" << json_number(cfg.privacy.delta)
        << ",\"privacy_epsilon\":" << json_number(t.privacy_epsilon);
  out << ",\"final_fingerprint\":\"" << run.rc->service->params_fingerprint() << "\""
      << ",\"wall_s\":" << json_number(t.wall_s) << ",\"commit_s\":" << json_number(t.commit_s)
      << ",\"commit_max_s\":" << json_number(t.commit_max_s) << ",\"rounds_per_s\":"
      << json_number(t.wall_s > 0 ? static_cast<double>(t.rounds_this_run()) / t.wall_s : 0.0)
      << ",\"peak_rss_bytes\":" << peak_rss_bytes() << "}\n";
  if (!out) return IoError("cannot write --summary-json " + path);
  return Status::Ok();
}

}  // namespace

int run_demo_experiment(const std::string& cmd, const DemoExperiment& d, SiteMode mode) {
  DemoRun run(d, mode);
  if (auto code = prepare(cmd, run)) return *code;
  RunTotals totals;
  const uint64_t start_round = run.rc->service->current_round();
  auto initial =
      run.evaluator->evaluate_and_publish(*run.rc, run.rc->service->experiment_id(), start_round);
  if (!initial.ok()) return fail(cmd, initial.status().message());
  totals.initial_bpb = totals.final_bpb = *initial;
  print_header(run);
  if (run.rc->http) {
    if (Status st = announce_dashboard(*run.rc, cmd, /*always=*/true); !st.ok())
      return fail(cmd, st.message());
  } else if (d.insecure && d.http != "off") {
    std::printf("dashboard: off (it needs TLS; drop --insecure)\n");
  }
  print_sites(run, *initial, start_round);
  if (Status s = tally_stored_rounds(run, totals, start_round); !s.ok())
    return fail(cmd, s.message());
  if (start_round > 0) {  // the summary starts from θ_0's figure, as an uninterrupted run's
    auto first = run.rc->manager->published_metric(run.rc->service->experiment_id(), 0, "val_bpb");
    if (first.ok() && *first) totals.initial_bpb = **first;
  }
  if (run.rc->service->state() == coordinator::ExperimentState::kFinished) {
    // The same command again after a crash between the last commit and the outputs: the
    // experiment is done, and its summary and outputs come from the store.
    std::printf(
        "the experiment in this store is finished: no rounds left to train; the summary "
        "and outputs are those of its committed rounds\n");
  } else {
    if (Status s = start_sites(run); !s.ok()) return fail(cmd, s.message());
    if (auto code = watch_rounds(cmd, run, totals, start_round)) return *code;
  }
  auto baseline = baseline_bpb(run);
  if (!baseline.ok()) {
    if (install_stop_signals()->load()) return stopped_exit_code();
    return fail(cmd, baseline.status().message());
  }
  const ByteComparison bytes = compare_bytes(run);
  print_summary(run, totals, *baseline, bytes);
  if (d.summary_json)
    if (Status s = write_summary_json(run, totals, *baseline, bytes, *d.summary_json); !s.ok())
      return fail(cmd, s.message());
  if (d.out) {
    if (Status s = write_final_checkpoint(*run.rc, run.rc->service->experiment_id(), *d.out);
        !s.ok())
      return fail(cmd, s.message());
    std::printf("  final checkpoint %s\n", d.out->c_str());
  }
  serve_after_done(run.rc->http.get(), d.after, install_stop_signals());
  return 0;
}

}  // namespace atl::cli
