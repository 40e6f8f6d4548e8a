#include "cli/hydra_run.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "algorithms/hydra/cost.h"
#include "algorithms/model/subnet.h"
#include "cli/coordinator_setup.h"
#include "cli/demo_events.h"
#include "cli/demo_sites.h"
#include "cli/event_queue.h"
#include "cli/signals.h"
#include "kernels/cpu/ops.h"
#include "node/data_source.h"
#include "node/evaluate.h"
#include "node/site_data.h"
#include "simulate/train_on_data.h"

namespace atl::cli {
namespace {

namespace al = atl::algorithms;
using Clock = std::chrono::steady_clock;

struct EvaluatedSite {
  HydraDemoSite site;
  al::data::TokenDataset validation;  // the held-out documents of its genre
  // Bytes, or --base's tokenizer: what the site trains with (bpb counts the bytes of its tokens).
  std::shared_ptr<const al::data::Tokenizer> tokenizer;
  double base_bpb = 0;  // of the base model θ_0
};

// Everything a running Hydra demo holds, in destruction order: the sites go before the
// coordinator whose engine they call.
struct HydraRun {
  HydraRun(const HydraExperiment& experiment, SiteMode site_mode)
      : x(experiment),
        mode(site_mode),
        model(model_config_of(experiment.config)),
        trainer(model, experiment.base_trainer),
        base(al::make_layout(model)) {}
  const HydraExperiment& x;
  const SiteMode mode;
  const al::ModelConfig model;
  // Trains the base model, then evaluates θ on every site's genre (byte tokenizer).
  al::InnerTrainer trainer;
  al::ParamSet base;  // θ_0 of the experiment
  std::vector<EvaluatedSite> sites;
  std::string run_dir, tls_dir;
  EventQueue events;
  std::unique_ptr<RunningCoordinator> rc;
  std::unique_ptr<DemoSites> running_sites;

  double bpb(const al::ParamSet& theta, const EvaluatedSite& s) {
    return node::evaluate_bpb(trainer.model(), theta, s.validation, *s.tokenizer,
                              x.base_trainer.seq, x.base_trainer.batch, x.eval_tokens)
        .bpb;
  }
};

Status load_site_validation(HydraRun& run) {
  const std::string tokenizer = run.x.base ? run.x.base->meta.tokenizer : std::string();
  for (const HydraDemoSite& site : run.x.sites) {
    ATOLL_ASSIGN_OR_RETURN(node::DataSpec spec, node::parse_data_spec("brown:" + site.genre));
    ATOLL_ASSIGN_OR_RETURN(node::SiteData data,
                           node::load_site_data_with_blob(spec, tokenizer, run.x.brown_dir));
    run.sites.push_back({site, std::move(data.validation), std::move(data.tokenizer), 0.0});
  }
  return Status::Ok();
}

// θ_0 is --base: its parameters, then its bpb on each site's genre.
void take_base_model(const std::string& cmd, HydraRun& run) {
  const node::BaseModel& base = *run.x.base;
  run.base.vec() = base.fp32()->vec();
  std::printf("atoll %s --algorithm hydra: base model %s (%s params, sha256 %.16s...)\n",
              cmd.c_str(), base.path.c_str(), std::to_string(run.base.numel()).c_str(),
              base.fingerprint.c_str());
  for (auto& s : run.sites) s.base_bpb = run.bpb(run.base, s);
}

// θ_0: the model trained on the genres no site holds, then its bpb on each site's genre.
Status train_base_model(const std::string& cmd, HydraRun& run) {
  const HydraExperiment& x = run.x;
  ATOLL_ASSIGN_OR_RETURN(node::DataSpec spec, node::parse_data_spec(x.base_data_spec));
  ATOLL_ASSIGN_OR_RETURN(node::SiteData data,
                         node::load_site_data(spec, node::TokenizerChoice{}, x.brown_dir));
  al::init_params(run.base, run.model, x.config.seed);
  std::printf("atoll %s --algorithm hydra: base model (%s params) on Brown genres %s for %" PRId64
              " steps\n",
              cmd.c_str(), std::to_string(run.base.numel()).c_str(),
              x.base_data_spec.substr(x.base_data_spec.find(':') + 1).c_str(), x.base_steps);
  simulate::TrainOnDataOptions o;
  o.data_seed = x.config.seed;
  o.end_step = x.base_steps;
  o.after_step = [&x](const simulate::TrainedStep& t) {
    if ((t.step + 1) % 50 == 0 || t.step + 1 == x.base_steps)
      std::printf("  base step %" PRId64 " loss %.4f\n", t.step + 1, t.stats->loss),
          std::fflush(stdout);
    return Status::Ok();
  };
  o.stop = install_stop_signals();
  ATOLL_RETURN_IF_ERROR(simulate::train_on_data(run.trainer, run.base, data.train, o));
  for (auto& s : run.sites) s.base_bpb = run.bpb(run.base, s);
  return Status::Ok();
}

// Run directory, certificates and the embedded coordinator (θ_0 = the base model).
Status launch(const std::string& cmd, HydraRun& run) {
  const HydraExperiment& x = run.x;
  ATOLL_ASSIGN_OR_RETURN(run.run_dir, demo_run_dir(x.store, "atoll-hydra"));
  run.tls_dir = run.run_dir + "/tls";
  // Node processes need certificates unless insecure; the dashboard (HTTPS) always does.
  const bool dashboard = x.http != "off" && !x.insecure;
  if (!x.insecure && (run.mode == SiteMode::kProcesses || dashboard)) {
    std::vector<std::string> names;
    for (const auto& s : x.sites) names.push_back(s.name);
    ATOLL_RETURN_IF_ERROR(provision_dev_ca(run.tls_dir, {"coordinator"}, names));
  }
  CoordinatorLaunch launch;
  launch.config = x.config;
  launch.store_dir = run.run_dir + "/store";
  launch.tls_dir = run.tls_dir;
  launch.insecure = x.insecure;
  if (run.mode == SiteMode::kInProcess) launch.listen = "";  // no gRPC: the sites are threads
  launch.initial_theta = run.base.vec();
  launch.on_event = [&run](const coordinator::Event& e) { run.events.push(e); };
  if (dashboard) launch.http_listen = x.http;
  ATOLL_ASSIGN_OR_RETURN(run.rc, launch_coordinator(launch));
  if (run.rc->server)
    std::printf("coordinator %s (%s), run directory %s\n", run.rc->server->address().c_str(),
                x.insecure ? "INSECURE plaintext" : "TLS 1.3 mTLS", run.run_dir.c_str());
  else
    std::printf("coordinator in-process (in-process sites), run directory %s\n",
                run.run_dir.c_str());
  // The experiment page shows each site's subnetwork as a layers x heads grid.
  if (run.rc->http) ATOLL_RETURN_IF_ERROR(announce_dashboard(*run.rc, cmd, /*always=*/true));
  return Status::Ok();
}

Status start_sites(HydraRun& run) {
  const HydraExperiment& x = run.x;
  std::vector<SiteSpec> specs;
  for (const auto& s : run.sites) {
    std::printf("  %s: brown:%s, budget %.2f, base bpb %.4f\n", s.site.name.c_str(),
                s.site.genre.c_str(), s.site.budget, s.base_bpb);
    specs.push_back({s.site.name, "brown:" + s.site.genre, s.site.budget});
  }
  if (run.mode == SiteMode::kInProcess) {
    // One process-wide setting: every site thread trains with x.threads kernel threads, as a
    // node process started with --threads would.
    kernels::cpu::set_num_threads(static_cast<int>(x.threads));
  }
  const SiteLaunch launch{run.mode,
                          run.rc->server ? run.rc->server->address() : "",
                          run.tls_dir,
                          x.insecure,
                          static_cast<int>(x.threads),
                          x.brown_dir,
                          run.run_dir,
                          x.base,
                          x.keep_best,
                          "",  // Hydra's round states are not written (node/sync_strategy.h)
                          run.rc->metrics.get()};
  ATOLL_ASSIGN_OR_RETURN(run.running_sites, launch_sites(run.rc->service->engine(), specs, launch));
  std::fflush(stdout);
  return run.rc->service->start();
}

// θ after `rounds_done` rounds: the store's copy (what the round committed), or the service's
// current θ when the store no longer keeps that version.
al::ParamSet committed_theta(HydraRun& run, uint64_t rounds_done) {
  al::ParamSet theta(al::make_layout(run.model));
  auto p = run.rc->store->load_params(run.rc->service->experiment_id(), rounds_done);
  theta.vec() =
      p.ok() && p->size() == theta.numel() ? std::move(p).value() : run.rc->service->params();
  return theta;
}

// The round's line, then one per site: budget, FLOPs fraction of its subnetwork, validation bpb
// of the new θ on its own genre (against the base model's) and the subnetwork.
void print_round(HydraRun& run, const coordinator::RoundRecord& rec, Clock::time_point t0) {
  const int blocks = static_cast<int>(run.x.config.hydra.ffn_blocks);
  const al::hydra::CostModel cm{run.model, blocks, run.x.base_trainer.seq};
  const al::ParamSet theta = committed_theta(run, rec.round + 1);
  std::printf("round %" PRIu64 " committed | loss %.4f | %.1f s\n", rec.round, rec.mean_loss,
              std::chrono::duration<double>(Clock::now() - t0).count());
  const auto subnets = run.rc->service->hydra_subnets();
  for (const auto& s : run.sites) {
    std::string sub = "?";
    for (const auto& [id, text] : subnets)
      if (id == s.site.name) sub = text;
    double frac = 0;
    if (auto parsed = al::subnet_from_string(sub, run.model, blocks); parsed.ok())
      frac = al::hydra::cost_fraction(cm, *parsed);
    std::printf("  %s budget %.2f | FLOPs %.2f | bpb %.4f (base %.4f) | %s\n", s.site.name.c_str(),
                s.site.budget, frac, run.bpb(theta, s), s.base_bpb, sub.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int run_hydra_experiment(const std::string& cmd, const HydraExperiment& x, SiteMode mode) {
  kernels::cpu::set_num_threads(1);  // the base model and the evaluations, in either mode
  HydraRun run(x, mode);
  if (Status s = load_site_validation(run); !s.ok()) return fail(cmd, s.message());
  if (x.base) {
    take_base_model(cmd, run);
  } else if (Status s = train_base_model(cmd, run); !s.ok()) {
    if (install_stop_signals()->load()) return std::printf("interrupted\n"), stopped_exit_code();
    return fail(cmd, s.message());
  }
  if (Status s = launch(cmd, run); !s.ok()) return fail(cmd, s.message());
  if (Status s = start_sites(run); !s.ok()) return fail(cmd, s.message());
  const auto t0 = Clock::now();
  DemoEventHandlers handlers;
  handlers.on_round_committed = [&](const coordinator::Event& e) {
    print_round(run, *e.record, t0);
  };
  handlers.on_finished = [](const coordinator::Event& e) {
    std::printf("finished: %s\n", e.message.c_str());
  };
  if (auto code =
          follow_demo_events(cmd, run.events, *run.running_sites, run.run_dir + "/store", handlers))
    return *code;
  run.running_sites->finish();
  std::printf("subnetwork notation per layer: T|F (trained|frozen) : heads : FFN blocks\n");
  std::printf("final sha256 %s\n", run.rc->service->params_fingerprint().c_str());
  std::fflush(stdout);
  serve_after_done(run.rc->http.get(), x.after, install_stop_signals());
  return 0;
}

int hydra_command(const std::string& cmd, const Args& args, SiteMode mode) {
  std::vector<FlagSpec> specs = hydra_experiment_flags();
  if (mode == SiteMode::kInProcess) refuse_flag(specs, "insecure", kInsecureInProcess);
  // The sibling variants take --config; here it gets the same pointer as with LoRA.
  specs.push_back({"config", true, "", ""});
  refuse_flag(specs, "config",
              "--config runs DiLoCo and Streaming DiLoCo experiment files; --algorithm hydra "
              "takes its flags (or run the file with atoll coordinator --config and atoll node)");
  Flags flags(cmd + " --algorithm hydra", std::move(specs));
  if (Status s = flags.parse(args); !s.ok()) return fail(cmd, s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto experiment = parse_hydra_experiment(flags);
  if (!experiment.ok()) return fail(cmd, experiment.status().message(), 2);
  return run_hydra_experiment(cmd, *experiment, mode);
}

}  // namespace atl::cli
