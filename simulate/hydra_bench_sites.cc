#include "simulate/hydra_bench_sites.h"

#include <algorithm>
#include <utility>

#include "algorithms/data/dataset.h"
#include "algorithms/data/tokenizer.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"
#include "node/data_source.h"
#include "node/site_data.h"
#include "simulate/train_on_data.h"

namespace atl::simulate {

namespace al = atl::algorithms;

StatusOr<SimSite> load_genre_site(const std::string& genre, double budget, int index,
                                  const SiteDataDraw& draw, const std::string& brown_dir) {
  SimSite s;
  s.genre = genre;
  s.budget = budget;
  ATOLL_ASSIGN_OR_RETURN(auto spec, node::parse_data_spec("brown:" + s.genre));
  ATOLL_ASSIGN_OR_RETURN(auto docs, node::load_documents(spec, brown_dir));
  auto split = al::data::split_documents(std::move(docs));
  const al::data::ByteTokenizer bytes;
  if (split.validation.empty())
    return InvalidArgument("genre " + s.genre + " has no held-out documents to report on");
  s.validation = al::data::build_dataset(split.validation, bytes);
  std::vector<al::data::Document> pool = std::move(split.train), mine, own_val;
  if (draw.train_docs == 0) {
    mine = std::move(pool);
  } else {
    if (draw.train_docs + draw.site_val_docs > static_cast<int64_t>(pool.size()))
      return InvalidArgument("genre " + s.genre + " has " + std::to_string(pool.size()) +
                             " training documents, fewer than --train-docs + --site-val-docs");
    // Fisher-Yates on a Philox stream keyed by (seed, site index).
    const Philox rng(draw.seed * 7919 + 11, static_cast<uint64_t>(index) + 1);
    for (size_t i = pool.size() - 1; i > 0; --i)
      std::swap(pool[i],
                pool[static_cast<size_t>(rng.uniform_double(i) * static_cast<double>(i + 1))]);
    for (int64_t j = 0; j < draw.site_val_docs; ++j) own_val.push_back(std::move(pool[j]));
    for (int64_t j = 0; j < draw.train_docs; ++j)
      mine.push_back(std::move(pool[draw.site_val_docs + j]));
  }
  s.train = al::data::build_dataset(mine, bytes);
  if (!own_val.empty()) s.site_val = al::data::build_dataset(own_val, bytes);
  return s;
}

StatusOr<al::ParamSet> train_brown_base(const SimOptions& opt, const std::string& genres,
                                        int64_t steps, double lr, const std::string& brown_dir) {
  std::string base_genres;  // "bcd" -> "b,c,d"
  for (char g : genres) {
    if (!base_genres.empty()) base_genres += ',';
    base_genres += g;
  }
  ATOLL_ASSIGN_OR_RETURN(auto base_spec, node::parse_data_spec("brown:" + base_genres));
  ATOLL_ASSIGN_OR_RETURN(auto base_data,
                         node::load_site_data(base_spec, node::TokenizerChoice{}, brown_dir));
  al::ParamSet base(al::make_layout(opt.model));
  al::init_params(base, opt.model, opt.seed);
  al::TrainerConfig bt = opt.train;
  bt.lr = lr;
  bt.min_lr = lr / 10;
  bt.warmup = 10;
  bt.total_steps = std::max<int64_t>(steps, 1);
  bt.weight_decay = 0.1;
  al::InnerTrainer base_trainer(opt.model, bt);
  simulate::TrainOnDataOptions run;
  run.data_seed = opt.seed;
  run.end_step = steps;
  ATOLL_RETURN_IF_ERROR(simulate::train_on_data(base_trainer, base, base_data.train, run));
  return base;
}

StatusOr<std::vector<double>> bpb_trained_alone(const std::string& method, const SimOptions& opt,
                                                const std::vector<SimSite>& sites,
                                                const al::ParamSet& base) {
  SimOptions alone = opt;
  alone.outer_lr = 1.0;  // θ ← θ_local after each round: plain local training
  alone.outer_momentum = 0.0;
  alone.trace = false;
  std::vector<double> bpb;
  for (size_t k = 0; k < sites.size(); ++k) {
    SimSite site = sites[k];
    site.seed_index = static_cast<int>(k);
    auto r = run_hydra_sim(method, alone, {site}, base);
    if (!r.ok()) return Internal("alone, site " + site.genre + ": " + r.status().message());
    bpb.push_back(r->sites[0].val_bpb);
  }
  return bpb;
}

}  // namespace atl::simulate
