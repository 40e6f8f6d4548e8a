// Coordinator over mutual TLS: identity from the client certificate's CN, admins and
// plaintext clients refused, rounds complete as over plaintext.
#include <gtest/gtest.h>

#include "service_harness.h"
#include "transport/tls/ca.h"

namespace atl::coordinator {
namespace {

using namespace std::chrono_literals;
using testing::Coordinator;
using testing::FakeNode;
using testing::tls_client;
using testing_util::TempDir;

TEST(CoordinatorServiceTls, NodesJoinWithTheirCertificateNameAndCompleteRounds) {
  TempDir store_dir, tls_dir;
  const std::string ca = tls_dir.sub("tls");
  ASSERT_TRUE(transport::ca_init(ca).ok());
  ASSERT_TRUE(transport::ca_issue(ca, "coordinator", transport::Role::kServer).ok());
  for (const char* n : {"node-0", "node-1"})
    ASSERT_TRUE(transport::ca_issue(ca, n, transport::Role::kNode).ok());
  ASSERT_TRUE(transport::ca_issue(ca, "ops", transport::Role::kAdmin).ok());
  auto server_creds = transport::server_credentials(ca, "coordinator");
  ASSERT_TRUE(server_creds.ok()) << server_creds.status().to_string();

  const uint32_t rounds = 2;
  const ExperimentConfig cfg = testing::small_config("tls", rounds, 2);
  const algorithms::ParamSet init = testing_util::toy_params(4096);
  ServiceOptions opts;
  opts.identity = IdentitySource::kTlsCertificate;
  auto c = Coordinator::start(store_dir.path(), cfg, init, opts, *server_creds);
  ASSERT_TRUE(c);

  // The certificate decides the identity, not the name the node claims.
  {
    auto o = tls_client(c->address(), ca, "node-0");
    o.node_name = "somebody-else";
    node::CoordinatorClient cl(o);
    auto j = cl.join();
    ASSERT_TRUE(j.ok()) << j.status().to_string();
    EXPECT_EQ(j->node_id(), "node-0");
  }
  // An admin certificate is not a node.
  {
    node::CoordinatorClient admin(tls_client(c->address(), ca, "ops"));
    auto j = admin.join();
    EXPECT_EQ(j.status().code(), StatusCode::kPermissionDenied) << j.status().to_string();
  }
  // Plaintext is refused.
  {
    node::CoordinatorClient plain(testing::insecure_client(c->address(), "node-0"));
    auto j = plain.join();
    EXPECT_EQ(j.status().code(), StatusCode::kUnavailable) << j.status().to_string();
  }

  ASSERT_TRUE(c->service->start().ok());
  const auto until = std::chrono::steady_clock::now() + 20s;
  std::vector<FakeNode> nodes(2);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < 2; ++i) {
    nodes[i].options = tls_client(c->address(), ca, "node-" + std::to_string(i));
    nodes[i].index = i;
    nodes[i].layout_fp = algorithms::layout_fingerprint(init.layout());
    threads.emplace_back([&n = nodes[i], until] { n.run(until); });
  }
  auto fin = c->service->wait_until_finished(until);
  for (auto& t : threads) t.join();
  ASSERT_TRUE(fin.ok()) << fin.status().to_string();
  EXPECT_EQ(*fin, ExperimentState::kFinished);
  auto rec = c->store->load_round("tls", 1);
  ASSERT_TRUE(rec.ok());
  ASSERT_EQ(rec->participants.size(), 2u);
  EXPECT_EQ(rec->participants[0].node_id, "node-0");
  EXPECT_EQ(rec->participants[1].node_id, "node-1");
  EXPECT_EQ(c->service->params_fingerprint(), testing::expected_fingerprint(init, 2, rounds, cfg));
}

}  // namespace
}  // namespace atl::coordinator
