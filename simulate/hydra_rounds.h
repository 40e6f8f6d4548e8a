// The Hydra benchmark's rounds (`atoll bench hydra`, bench/hydra): every site trains its
// subnetwork on its own Brown genre from the same base model, one site after the other in one
// process, and the round is aggregated with the code the coordinator runs
// (algorithms/hydra/aggregate.h). Each site trains with the trainer the site worker's Hydra step
// wraps (algorithms/hydra/trainer.h, node/inner_step.h), measures importance and forms its masked
// Δ with the site worker's own functions (node/hydra_site.h), and keeps its best θ with the site
// worker's BestTheta (node/kept_theta.h).
//
// Why a loop here and not virtual sites over the round engine (simulate/virtual_sites.h): three
// of the benchmark's methods are selection policies the engine does not have (HeteroFL width
// slicing, FedRolex rolling windows, random units), and every method must see the same batches
// for a paired comparison, while the engine's sites key theirs by node id; the sites draw their
// documents per seed (--train-docs), which no data spec names; and a site trained alone keeps its
// federation batches (seed_index). The distributed Hydra path, with the same trainer, importance
// and aggregation, is tested separately (tests/integration/hydra_process_test.cc,
// hydra_simulate_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/data/dataset.h"
#include "algorithms/hydra/select.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/status.h"
#include "node/kept_theta.h"

namespace atl::simulate {

struct SimSite {
  std::string genre;  // Brown genre letter(s), e.g. "a"
  double budget = 1.0;
  // What keys the site's batches, importance and random draws: its index in the federation
  // (-1: its position in the `sites` list). A site trained alone keeps its federation index so
  // it sees the same batches as in the federation.
  int seed_index = -1;
  // validation: where the result is reported (the genre's held-out documents, never trained on
  // and never looked at during training). site_val: the site's own validation split, carved out
  // of its own documents; only keep_best reads it.
  algorithms::data::TokenDataset train, validation, site_val;
};

struct SimOptions {
  algorithms::ModelConfig model;
  algorithms::TrainerConfig train;  // inner AdamW (total_steps = rounds · inner)
  int ffn_blocks = 4;
  int rounds = 4;
  int inner_steps = 10;
  int importance_batches = 2;
  int reselect_every = 1;
  double min_train_share = 0.5;   // hydra.min_train_share (select.h)
  double removal_penalty = 10.0;  // hydra.removal_penalty (select.h), Hydra only: random keeps 0
  // hydra.trained_layers (select.h), Hydra only: random keeps one global S.
  algorithms::hydra::TrainedLayers trained_layers = algorithms::hydra::TrainedLayers::kGlobal;
  // hydra.forward_share_power p (aggregate.h), Hydra only: each site's update weighs
  // tokens · φ^p, φ its forward share (cost.h). 0: tokens alone, as before.
  double forward_share_power = 0.0;
  double outer_lr = 1.0;
  double outer_momentum = 0.0;
  int64_t eval_tokens = 16384;  // validation targets per site evaluation
  uint64_t seed = 1;
  // What each site ends with (node/kept_theta.h), chosen on its own validation split
  // SimSite::site_val, at most site_val_tokens targets per evaluation: kOff the last global θ;
  // kGlobal the best of the base model and the global θ after every round; kPersonal those and
  // the site's own θ_local after every round. kAuto means kOff here (the benchmark's sites have
  // no validation split unless --site-val-docs gives them one).
  node::KeepBest site_keeps = node::KeepBest::kOff;
  int64_t site_val_tokens = 8192;
  // Method "lora": the adapters every site trains over the frozen base (rank, alpha, targets:
  // algorithms/model/lora.h), initialized from `seed` (init_lora_params: the same adapters for
  // every method that uses them), at inner peak lr lora_lr (min lr a tenth of it; 0: train.lr).
  algorithms::LoraConfig lora;
  double lora_lr = 0;
  // Diagnostics (bench --trace): per round and site, the subnetwork, whether it changed (the
  // optimizer state is reset then), the loss of θ on the site's first batch of the round with the
  // full forward and with the site's forward (the damage of removing units), the last inner loss,
  // and after the outer step each site's validation bpb. One line per site and round on stderr.
  bool trace = false;
};

struct SimSiteResult {
  double val_bpb = 0;
  double flops_fraction = 0;  // mean over rounds, counted by Llama under the subnetwork
  double peak_mem_mb = 0;     // θ_local + gradient + optimizer state + activations (buffers)
  double step_ms = 0;         // mean inner step wall time (noisy on a shared machine)
  std::string last_subnet;
  // The round after which the site's kept θ was the global θ (-1: the base model); + 1000 when it
  // kept its own θ_local of that round (KeepBest::kPersonal).
  int best_round = -1;
};

struct SimResult {
  std::string method;
  std::vector<SimSiteResult> sites;
  double mean_bpb = 0, worst_bpb = 0;
  // What one site sends a round, mean over sites and rounds: 4 bytes (fp32) per element of its
  // pseudo-gradient (the whole θ for full, the trained elements of a subnetwork, the adapters for
  // lora; a subnetwork's element indices not counted).
  double bytes_per_round = 0;
  double seconds = 0;
};

// method: "full", "heterofl", "fedrolex", "random", "hydra", or "lora": every site trains
// opt.lora's adapters over the frozen `base` with the site worker's LoRA step
// (node/inner_step.h), θ is the adapter set (aggregated, outer-stepped and kept as the full
// model's θ is), and a site's bpb is that of the base with its adapters merged in (merge_lora).
// A site_keeps other than kOff needs every site's site_val.
StatusOr<SimResult> run_hydra_sim(const std::string& method, const SimOptions& opt,
                                  const std::vector<SimSite>& sites,
                                  const algorithms::ParamSet& base);

// Validation bits per byte of θ on `data` (byte tokenizer: one token per byte), at most
// max_tokens targets in rows of T + 1.
double eval_bpb(algorithms::InnerTrainer& evaluator, const algorithms::ParamSet& params,
                const algorithms::data::TokenDataset& data, int T, int64_t max_tokens);

}  // namespace atl::simulate
