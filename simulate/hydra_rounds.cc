#include "simulate/hydra_rounds.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>

#include "algorithms/hydra/aggregate.h"
#include "algorithms/hydra/cost.h"
#include "algorithms/hydra/importance.h"
#include "algorithms/hydra/select.h"
#include "algorithms/hydra/trainer.h"
#include "algorithms/model/subnet.h"
#include "kernels/core/philox.h"
#include "node/hydra_site.h"
#include "node/inner_step.h"
#include "node/site_config.h"

namespace atl::simulate {

namespace al = atl::algorithms;
namespace hy = atl::algorithms::hydra;
using Clock = std::chrono::steady_clock;

double eval_bpb(al::InnerTrainer& ev, const al::ParamSet& params,
                const al::data::TokenDataset& data, int T, int64_t max_tokens) {
  const int64_t rows = std::min<int64_t>(max_tokens / T, (data.size() - 1) / T);
  std::vector<int32_t> buf(static_cast<size_t>(rows) * (T + 1));
  for (int64_t r = 0; r < rows; ++r)
    std::copy(data.tokens.begin() + r * T, data.tokens.begin() + r * T + T + 1,
              buf.begin() + r * (T + 1));
  const double nats = ev.evaluate(params, buf.data(), static_cast<int>(rows));
  return nats / std::log(2.0);  // byte tokenizer: one token per byte
}

namespace {

// First ⌈r·n⌉ units (HeteroFL) or a window of that size starting at `start` (FedRolex).
std::vector<uint8_t> window(int n, double r, int start) {
  const int k = std::clamp(static_cast<int>(std::ceil(r * n - 1e-9)), 1, n);
  std::vector<uint8_t> m(n, 0);
  for (int j = 0; j < k; ++j) m[(start + j) % n] = 1;
  return m;
}

al::Subnet width_subnet(const al::ModelConfig& mc, int G, double r, int start) {
  al::Subnet s = al::full_subnet(mc, G, true);
  for (auto& l : s.layers) {
    l.heads = window(al::head_units(mc), r, start);  // KV groups (docs/hydra.md)
    l.ffn_blocks = window(G, r, start);
  }
  return s;
}

// The subnetworks of round r for `method` into `masks` (one per site): the full model, HeteroFL's
// or FedRolex's width windows, or a selection (Hydra: importance on θ; random: uniform random
// scores) every reselect_every rounds, otherwise the masks stay as they were.
Status round_masks(const std::string& method, const SimOptions& opt,
                   const std::vector<SimSite>& sites, const hy::CostModel& cm,
                   const al::ParamSet& theta, int r, std::vector<al::Subnet>& masks) {
  const al::ModelConfig& mc = opt.model;
  const int K = static_cast<int>(sites.size()), T = opt.train.seq, B = opt.train.batch;
  auto seed_of = [&](int k) { return sites[k].seed_index >= 0 ? sites[k].seed_index : k; };
  if (method == "full") {
    for (auto& m : masks) m = al::full_subnet(mc, opt.ffn_blocks, true);
  } else if (method == "heterofl" || method == "fedrolex") {
    for (int k = 0; k < K; ++k)
      masks[k] = width_subnet(mc, opt.ffn_blocks, sites[k].budget, method == "fedrolex" ? r : 0);
  } else if (r % opt.reselect_every == 0) {
    std::vector<hy::SiteInput> in;
    for (int k = 0; k < K; ++k) {
      hy::SiteInput s{"site-" + std::to_string(k), sites[k].budget,
                      hy::empty_scores(mc, opt.ffn_blocks)};
      if (method == "hydra") {
        ATOLL_ASSIGN_OR_RETURN(
            auto rep, node::measure_importance(mc, theta, sites[k].train, opt.seed + seed_of(k), r,
                                               opt.importance_batches, B, T, opt.ffn_blocks));
        s.scores.layer.assign(rep.layer().begin(), rep.layer().end());
        s.scores.head.assign(rep.head().begin(), rep.head().end());
        s.scores.ffn.assign(rep.ffn().begin(), rep.ffn().end());
      } else {  // random: the same selection machinery on uniform random scores
        const Philox rng(opt.seed * 1000003 + r, static_cast<uint64_t>(seed_of(k)) + 17);
        uint64_t c = 0;
        for (double& x : s.scores.head) x = rng.uniform_double(c++);
        for (double& x : s.scores.ffn) x = rng.uniform_double(c++);
        for (double& x : s.scores.layer) x = rng.uniform_double(c++);
      }
      in.push_back(std::move(s));
    }
    hy::SelectOptions so;
    so.min_train_share = opt.min_train_share;
    // The random baseline draws its units as before (plain objective on random scores).
    so.removal_penalty = method == "hydra" ? opt.removal_penalty : 0.0;
    if (method == "hydra") so.trained_layers = opt.trained_layers;
    ATOLL_ASSIGN_OR_RETURN(auto sel, hy::select_subnetworks(cm, in, so));
    for (int k = 0; k < K; ++k) masks[k] = sel.sites[k].subnet;  // ids sort as site-0..3
    if (opt.trace)
      for (int k = 0; k < K; ++k)
        std::fprintf(stderr, "trace %s r%d site %d selected: trained score %.4f removed %.4f\n",
                     method.c_str(), r, k, sel.sites[k].trained_value, sel.sites[k].removed_score);
  }
  return Status::Ok();
}

// θ of round 0: the base model, or (lora) opt.lora's adapters initialized from the seed (B = 0:
// the merged model is the base model).
al::ParamSet initial_theta(bool lora, const SimOptions& opt, const al::ParamSet& base) {
  if (!lora) return base;
  al::ParamSet adapters(al::make_lora_layout(opt.lora, opt.model));
  al::init_lora_params(adapters, opt.lora, opt.model, opt.seed);
  return adapters;
}

// One LoRA inner step per site, the site worker's (node::make_inner_step with a LoRA site over
// the frozen base), at opt.lora_lr.
StatusOr<std::vector<std::unique_ptr<node::InnerStep>>> lora_steps(
    const SimOptions& opt, int K, std::shared_ptr<const al::FrozenBase> frozen) {
  node::SiteConfig site;
  site.model = opt.model;
  site.train = opt.train;
  if (opt.lora_lr > 0) {
    site.train.lr = opt.lora_lr;
    site.train.min_lr = opt.lora_lr / 10;
  }
  site.lora = opt.lora;
  node::InnerStepOptions options;
  options.lora_base = std::move(frozen);
  std::vector<std::unique_ptr<node::InnerStep>> steps;
  for (int k = 0; k < K; ++k) {
    ATOLL_ASSIGN_OR_RETURN(auto step, node::make_inner_step(site, options));
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace

StatusOr<SimResult> run_hydra_sim(const std::string& method, const SimOptions& opt,
                                  const std::vector<SimSite>& sites, const al::ParamSet& base) {
  if (method != "full" && method != "heterofl" && method != "fedrolex" && method != "random" &&
      method != "hydra" && method != "lora")
    return InvalidArgument("unknown method '" + method +
                           "': use full, heterofl, fedrolex, random, hydra or lora");
  const bool lora = method == "lora";
  const auto t_start = Clock::now();
  const al::ModelConfig& mc = opt.model;
  const int K = static_cast<int>(sites.size()), T = opt.train.seq, B = opt.train.batch;
  auto seed_of = [&](int k) { return sites[k].seed_index >= 0 ? sites[k].seed_index : k; };
  hy::CostModel cm{mc, opt.ffn_blocks, T};
  // A site's inner steps: Hydra's trainer on its subnetwork (the full one for "full"), or the
  // site worker's LoRA step over the frozen base, where θ is the adapter set.
  std::vector<al::hydra::HydraTrainer> trainers;
  std::vector<std::unique_ptr<node::InnerStep>> adapter_steps;
  if (lora) {
    ATOLL_ASSIGN_OR_RETURN(
        adapter_steps,
        lora_steps(opt, K, al::FrozenBase::fp32(std::make_shared<const al::ParamSet>(base))));
  } else {
    for (int k = 0; k < K; ++k) trainers.emplace_back(mc, opt.train);
  }
  al::ParamSet theta = initial_theta(lora, opt, base), local(theta.layout());
  std::vector<float> momentum(theta.numel(), 0.0f), delta(theta.numel());
  std::vector<uint32_t> held(theta.numel());
  std::vector<al::Subnet> masks(K);
  SimResult res;
  res.method = method;
  res.sites.resize(K);
  std::vector<double> flops_sum(K, 0), step_ms_sum(K, 0);
  std::vector<int64_t> steps(K, 0);
  al::InnerTrainer ev(mc, opt.train);
  // The model θ stands for: θ itself, or (lora) the base with the adapters merged in, as the
  // site would export it. Valid until the next call.
  al::ParamSet merged;
  auto model_of = [&](const al::ParamSet& params) -> StatusOr<const al::ParamSet*> {
    if (!lora) return &params;
    ATOLL_ASSIGN_OR_RETURN(merged, al::merge_lora(base, params, opt.lora, mc));
    return &merged;
  };
  auto site_bpb = [&](const al::ParamSet& params, const al::data::TokenDataset& data,
                      int64_t max_tokens) -> StatusOr<double> {
    ATOLL_ASSIGN_OR_RETURN(const al::ParamSet* model, model_of(params));
    return eval_bpb(ev, *model, data, T, max_tokens);
  };
  // Every element, for a step that trains them all (lora).
  std::vector<uint32_t> all_elements(lora ? theta.numel() : 0);
  std::iota(all_elements.begin(), all_elements.end(), 0u);
  double sent_elements = 0;  // Σ over rounds and sites of the elements sent
  std::vector<std::string> prev_subnet(K);
  // Each site's best θ on its own validation split so far (node/kept_theta.h): the global θ
  // round g starts from (g = 0: the base model) or its own θ_local of round r.
  using Kind = node::KeptSource::Kind;
  const bool keep_best =
      opt.site_keeps == node::KeepBest::kGlobal || opt.site_keeps == node::KeepBest::kPersonal;
  std::vector<node::BestTheta> best(K);
  if (keep_best) {
    for (int k = 0; k < K; ++k) {
      if (sites[k].site_val.size() < static_cast<int64_t>(T) + 1)
        return InvalidArgument("keeping the best θ: site " + sites[k].genre +
                               " has no validation split of its own (give it --site-val-docs)");
      ATOLL_ASSIGN_OR_RETURN(const double b,
                             site_bpb(theta, sites[k].site_val, opt.site_val_tokens));
      best[k].offer({Kind::kGlobal, 0}, b, theta.vec());
    }
  }
  for (int r = 0; r < opt.rounds; ++r) {
    // Masks of this round (none for the adapters).
    if (!lora) ATOLL_RETURN_IF_ERROR(round_masks(method, opt, sites, cm, theta, r, masks));
    // Every site trains its subnetwork from θ; Δ at its held elements.
    std::vector<std::vector<uint32_t>> idx(K);
    std::vector<std::vector<float>> d(K);
    std::vector<hy::MaskedUpdate> ups;
    for (int k = 0; k < K; ++k) {
      if (!lora) ATOLL_RETURN_IF_ERROR(trainers[k].set_subnet(masks[k]));
      std::copy(theta.vec().begin(), theta.vec().end(), local.vec().begin());
      float first_loss = 0, last_loss = 0, full_loss = 0;
      if (opt.trace) {
        auto b0 = al::data::sample_global_batch(sites[k].train, opt.seed + 101 * seed_of(k),
                                                static_cast<int64_t>(r) * opt.inner_steps, B, T);
        ATOLL_ASSIGN_OR_RETURN(const al::ParamSet* model, model_of(theta));
        full_loss = ev.evaluate(*model, b0.tokens.data(), B);
      }
      for (int s = 0; s < opt.inner_steps; ++s) {
        const int64_t step = static_cast<int64_t>(r) * opt.inner_steps + s;
        auto batch =
            al::data::sample_global_batch(sites[k].train, opt.seed + 101 * seed_of(k), step, B, T);
        const auto t0 = Clock::now();
        al::StepStats st;
        if (lora) {
          ATOLL_ASSIGN_OR_RETURN(st, adapter_steps[k]->step(local, batch, nullptr, step));
        } else {
          st = trainers[k].step(local, batch.tokens.data(), step);
        }
        step_ms_sum[k] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        // FLOPs are counted by Hydra's trainer only (the lora rows report 0).
        if (!lora)
          flops_sum[k] += trainers[k].last_step_flops() / (al::flops_per_token(mc, T) * B * T);
        ++steps[k];
        if (!std::isfinite(st.loss)) return Internal(method + ": inner training diverged");
        if (s == 0) first_loss = st.loss;
        last_loss = st.loss;
      }
      if (opt.trace) {
        const std::string sn = lora ? "adapters" : al::to_string(masks[k]);
        std::fprintf(stderr,
                     "trace %s r%d site %d %s%s cost %.3f | loss full %.4f subnet %.4f "
                     "(damage %+.4f) last %.4f\n",
                     method.c_str(), r, k, sn.c_str(), sn == prev_subnet[k] ? "" : " (new)",
                     lora ? 1.0 : hy::cost_fraction(cm, masks[k]), full_loss, first_loss,
                     first_loss - full_loss, last_loss);
        prev_subnet[k] = sn;
      }
      if (opt.site_keeps == node::KeepBest::kPersonal) {
        ATOLL_ASSIGN_OR_RETURN(const double b,
                               site_bpb(local, sites[k].site_val, opt.site_val_tokens));
        best[k].offer({Kind::kPersonal, static_cast<uint64_t>(r)}, b, local.vec());
      }
      idx[k] = lora ? all_elements : trainers[k].indices();
      d[k].resize(idx[k].size());
      node::masked_delta(theta.vec(), local.vec(), idx[k], d[k]);
      sent_elements += static_cast<double>(idx[k].size());
      if (lora) continue;  // memory is counted by Hydra's trainer only (the lora rows report 0)
      const double mem = 4.0 * static_cast<double>(theta.numel()) * 2 /* θ_local, gradient */ +
                         static_cast<double>(trainers[k].optimizer_state_bytes()) +
                         static_cast<double>(trainers[k].model().buffer_bytes());
      res.sites[k].peak_mem_mb = std::max(res.sites[k].peak_mem_mb, mem / (1 << 20));
      res.sites[k].last_subnet = al::to_string(masks[k]);
    }
    for (int k = 0; k < K; ++k)
      ups.push_back({"site-" + std::to_string(k), static_cast<uint64_t>(opt.inner_steps) * B * T,
                     idx[k], d[k], lora ? 1.0 : hy::forward_share(cm, masks[k])});
    ATOLL_RETURN_IF_ERROR(
        hy::aggregate_masked(ups, delta, held, method == "hydra" ? opt.forward_share_power : 0.0));
    if (opt.trace) {
      // ρ = ‖Δ‖ / ‖θ‖ over the held elements: how far a round moves the trained weights,
      // relative to their size (removing a unit moves them by 100 %).
      double dd = 0, tt = 0;
      for (size_t j = 0; j < delta.size(); ++j)
        if (held[j])
          dd += double(delta[j]) * delta[j], tt += double(theta.vec()[j]) * theta.vec()[j];
      std::fprintf(stderr, "trace %s r%d rho %.4f\n", method.c_str(), r, std::sqrt(dd / tt));
    }
    ATOLL_RETURN_IF_ERROR(hy::masked_outer_step(
        {static_cast<float>(opt.outer_lr), static_cast<float>(opt.outer_momentum)}, theta.vec(),
        momentum, delta, held, r == 0));
    if (keep_best)
      for (int k = 0; k < K; ++k) {
        ATOLL_ASSIGN_OR_RETURN(const double b,
                               site_bpb(theta, sites[k].site_val, opt.site_val_tokens));
        best[k].offer({Kind::kGlobal, static_cast<uint64_t>(r) + 1}, b, theta.vec());
      }
    if (opt.trace) {
      std::fprintf(stderr, "trace %s r%d val_bpb", method.c_str(), r);
      for (int k = 0; k < K; ++k) {
        ATOLL_ASSIGN_OR_RETURN(const double b,
                               site_bpb(theta, sites[k].validation, opt.eval_tokens));
        std::fprintf(stderr, " %.4f", b);
      }
      std::fprintf(stderr, "\n");
    }
  }
  res.mean_bpb = 0;
  res.worst_bpb = 0;
  for (int k = 0; k < K; ++k) {
    auto& s = res.sites[k];
    if (keep_best) {
      const node::KeptTheta& kept = *best[k].kept();
      std::copy(kept.params.begin(), kept.params.end(), local.vec().begin());
      const int round = static_cast<int>(kept.source.round);
      s.best_round = kept.source.kind == Kind::kGlobal ? round - 1 : 1000 + round;
    }
    ATOLL_ASSIGN_OR_RETURN(
        s.val_bpb, site_bpb(keep_best ? local : theta, sites[k].validation, opt.eval_tokens));
    s.flops_fraction = flops_sum[k] / std::max<int64_t>(steps[k], 1);
    s.step_ms = step_ms_sum[k] / std::max<int64_t>(steps[k], 1);
    res.mean_bpb += s.val_bpb / K;
    res.worst_bpb = std::max(res.worst_bpb, s.val_bpb);
  }
  res.bytes_per_round = 4.0 * sent_elements / (static_cast<double>(opt.rounds) * K);
  res.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return res;
}

}  // namespace atl::simulate
