#include "simulate/data_parallel.h"

#include "algorithms/data/dataset.h"
#include "algorithms/optim/inner_trainer.h"
#include "node/data_source.h"
#include "node/site_data.h"
#include "node/node_runner.h"  // site_seed

namespace atl::simulate {

Status train_data_parallel(const coordinator::ExperimentConfig& config,
                           const std::vector<DataParallelSite>& sites,
                           algorithms::ParamSet& params, const DataParallelOptions& options) {
  const algorithms::ModelConfig model = coordinator::model_config(config);
  // Streaming DiLoCo's config counts fragment syncs as rounds (R·P of them), each outer round
  // still H inner steps: R·H steps in all, as plain DiLoCo.
  const uint32_t P = std::max<uint32_t>(config.diloco.streaming_fragments, 1);
  const int64_t steps = static_cast<int64_t>(config.diloco.rounds / P) * config.diloco.inner_steps;
  const int rows = static_cast<int>(config.train.batch_size);
  algorithms::TrainerConfig tc = coordinator::trainer_config(config, steps);
  tc.batch = static_cast<int>(sites.size()) * rows;
  algorithms::InnerTrainer trainer(model, tc);

  std::vector<node::SiteData> data;
  std::vector<uint64_t> seeds;
  for (const auto& site : sites) {
    ATOLL_ASSIGN_OR_RETURN(node::DataSpec spec, node::parse_data_spec(site.data_spec));
    ATOLL_ASSIGN_OR_RETURN(node::SiteData d,
                           node::load_site_data(spec, node::TokenizerChoice{}, options.brown_dir));
    data.push_back(std::move(d));
    seeds.push_back(node::site_seed(config.seed, site.name));
  }
  std::vector<int32_t> batch;  // (sites · rows, T + 1) token ids
  for (int64_t s = 0; s < steps; ++s) {
    batch.clear();
    for (size_t i = 0; i < sites.size(); ++i) {
      auto b = algorithms::data::sample_global_batch(data[i].train, seeds[i], s, rows,
                                                     model.seq_len);
      batch.insert(batch.end(), b.tokens.begin(), b.tokens.end());
    }
    trainer.step(params, batch.data(), s);
    if (options.stop && options.stop->load())
      return Unavailable("data-parallel baseline interrupted at step " + std::to_string(s + 1) +
                         " of " + std::to_string(steps));
  }
  return Status::Ok();
}

}  // namespace atl::simulate
