// What the Hydra benchmark's sites hold and start from (`atoll bench hydra`, bench/hydra): each
// site's documents drawn from its Brown genre, the base model trained on the other genres, and
// each site's result when it fine-tunes alone. The rounds themselves: simulate/hydra_rounds.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "simulate/hydra_rounds.h"

namespace atl::simulate {

// How much of its genre a site holds. train_docs 0: every training document of the genre (the
// genre's held-out documents are the test set either way). Otherwise the site draws, keyed by the
// seed and its index, site_val_docs documents as its own validation split and the next
// train_docs as its training data, from the genre's training documents: a few documents per
// genre, as a real fine-tuning site has; the same seed gives every method the same documents.
struct SiteDataDraw {
  int64_t train_docs = 0;
  int64_t site_val_docs = 0;
  uint64_t seed = 0;
};

// Site `index` of the benchmark: genre letter(s) `genre` of the Brown corpus in brown_dir at
// budget `budget`; validation = the genre's held-out documents, train (and site_val) drawn as
// `draw` says. One line for a genre without held-out documents or with too few documents.
StatusOr<SimSite> load_genre_site(const std::string& genre, double budget, int index,
                                  const SiteDataDraw& draw, const std::string& brown_dir);

// The base model every method fine-tunes: `steps` AdamW steps (lr `lr`, warmup 10, weight decay
// 0.1) on the Brown genres `genres` (letters, e.g. "bcd"), from the seed's initialization
// (opt.model, opt.train's batch and sequence, opt.seed).
StatusOr<algorithms::ParamSet> train_brown_base(const SimOptions& opt, const std::string& genres,
                                                int64_t steps, double lr,
                                                const std::string& brown_dir);

// Each site's validation bpb when it fine-tunes `method` alone: a federation of one per site
// with the same rounds, steps, batches (the site keeps its federation index) and keep-best
// rule, the outer step θ ← θ_local (outer lr 1, no momentum: plain local training).
StatusOr<std::vector<double>> bpb_trained_alone(const std::string& method, const SimOptions& opt,
                                                const std::vector<SimSite>& sites,
                                                const algorithms::ParamSet& base);

}  // namespace atl::simulate
