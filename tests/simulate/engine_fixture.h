// A started RoundEngine over a RocksDB store in a temporary directory: what virtual sites
// (simulate/virtual_sites.h) or a test's own links run against.
#pragma once

#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/model/llama.h"
#include "coordinator/experiment_config.h"
#include "coordinator/round_engine.h"
#include "coordinator/store.h"
#include "coordinator/test_util.h"

namespace atl::testing_util {

struct EngineOnDisk {
  static algorithms::ParamSet seeded_init(const coordinator::ExperimentConfig& cfg) {
    const algorithms::ModelConfig model = coordinator::model_config(cfg);
    algorithms::ParamSet init(algorithms::make_layout(model));
    algorithms::init_params(init, model, cfg.seed);
    return init;
  }

  TempDir dir;
  std::unique_ptr<coordinator::Store> store;
  std::unique_ptr<coordinator::RoundEngine> engine;  // null when opening failed (test failed)
  std::vector<float> initial;                        // θ_0

  // θ_0 from the experiment's seed, as `atoll coordinator` initialises it.
  explicit EngineOnDisk(const coordinator::ExperimentConfig& cfg)
      : EngineOnDisk(cfg, seeded_init(cfg)) {}
  // θ_0 = init (any layout the test's sites agree on).
  EngineOnDisk(const coordinator::ExperimentConfig& cfg, const algorithms::ParamSet& init) {
    auto s = coordinator::Store::open(dir.sub("store"), {.keep_params = cfg.diloco.keep_params});
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (!s.ok()) return;
    store = std::move(*s);
    initial = init.vec();
    auto e = coordinator::RoundEngine::open(*store, cfg, init);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (!e.ok()) return;
    engine = std::move(*e);
    EXPECT_TRUE(engine->start().ok());
  }
  ~EngineOnDisk() {
    engine.reset();  // before the store
    store.reset();
  }
};

}  // namespace atl::testing_util
