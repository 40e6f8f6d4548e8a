// The coordinator's bulk lane end to end: a real CoordinatorServer over mTLS with its lane, real
// node clients (node::CoordinatorClient over GrpcCoordinatorCalls) pulling and pushing through
// it, and the same experiment's θ as over gRPC streams.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "kernels/core/file_io.h"
#include "service_harness.h"
#include "transport/bulk_lane.h"
#include "transport/channel.h"
#include "transport/tls/ca.h"
#include "transport/tls/openssl_util.h"

namespace atl::coordinator {
namespace {

using namespace std::chrono_literals;
using testing::Coordinator;
using testing::FakeNode;
using testing::tls_client;
using testing_util::TempDir;
namespace pb = atoll_pb::v1;

constexpr size_t kNumel = 4096;

struct Experiment {
  TempDir store_dir, tls_dir;
  std::string ca = tls_dir.sub("tls");
  algorithms::ParamSet init = testing_util::toy_params(kNumel);
  std::unique_ptr<Coordinator> c;

  Experiment(const ExperimentConfig& cfg, int nodes, bool bulk_lane) {
    EXPECT_TRUE(transport::ca_init(ca).ok());
    EXPECT_TRUE(transport::ca_issue(ca, "coordinator", transport::Role::kServer).ok());
    EXPECT_TRUE(transport::ca_issue(ca, "ops", transport::Role::kAdmin).ok());
    for (int i = 0; i < nodes; ++i)
      EXPECT_TRUE(
          transport::ca_issue(ca, "node-" + std::to_string(i), transport::Role::kNode).ok());
    auto creds = transport::server_credentials(ca, "coordinator");
    auto bulk = transport::server_identity(ca, "coordinator");
    EXPECT_TRUE(creds.ok() && bulk.ok());
    ServiceOptions opts;
    opts.identity = IdentitySource::kTlsCertificate;
    c = Coordinator::start(store_dir.path(), cfg, init, opts, *creds, "127.0.0.1:0", {},
                           bulk_lane ? &*bulk : nullptr);
  }

  // Runs the experiment with `nodes` fake trainers to its end; their errors.
  std::vector<std::string> run(int nodes) {
    EXPECT_TRUE(c->service->start().ok());
    std::vector<FakeNode> fakes(nodes);
    std::vector<std::thread> threads;
    const auto until = std::chrono::steady_clock::now() + 60s;
    for (int i = 0; i < nodes; ++i) {
      fakes[i].options = tls_client(c->address(), ca, "node-" + std::to_string(i));
      fakes[i].index = static_cast<uint32_t>(i);
      fakes[i].layout_fp = algorithms::layout_fingerprint(init.layout());
      threads.emplace_back([&fakes, i, until] { fakes[i].run(until); });
    }
    for (auto& t : threads) t.join();
    std::vector<std::string> errors;
    for (auto& f : fakes) {
      EXPECT_TRUE(f.stopped);
      errors.insert(errors.end(), f.errors.begin(), f.errors.end());
    }
    auto fin = c->service->wait_until_finished(Clock::now() + 10s);
    EXPECT_TRUE(fin.ok() && *fin == ExperimentState::kFinished);
    return errors;
  }
};

TEST(BulkLaneService, PullsAndPushesTakeTheLaneAndThetaIsTheGrpcRunsBitForBit) {
  const ExperimentConfig cfg = testing::small_config("bulk", 3, 2);
  Experiment lane(cfg, 2, /*bulk_lane=*/true);
  ASSERT_TRUE(lane.c);
  ASSERT_NE(lane.c->server->bulk_port(), 0);
  // Nodes learn the lane's port when they join.
  node::CoordinatorClient probe(tls_client(lane.c->address(), lane.ca, "node-0"));
  auto joined = probe.join();
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  EXPECT_EQ(joined->bulk_port(), static_cast<uint32_t>(lane.c->server->bulk_port()));
  // A node built before the lane lists no such feature: it is not given the port, which it would
  // refuse as an unknown field and stop on, and trains over gRPC instead.
  {
    auto tls = transport::client_credentials(lane.ca, "node-1", "coordinator");
    ASSERT_TRUE(tls.ok()) << tls.status().to_string();
    auto stub =
        atoll_pb::v1::Coordinator::NewStub(transport::create_channel(lane.c->address(), *tls));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    atoll_pb::v1::JoinRequest older;
    older.set_node_name("node-1");
    atoll_pb::v1::JoinResponse answer;
    const grpc::Status st = stub->Join(&ctx, older, &answer);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(answer.bulk_port(), 0u);
    EXPECT_EQ(answer.node_id(), "node-1");
  }

  EXPECT_TRUE(lane.run(2).empty());
  // Every pull and push of 3 rounds x 2 nodes went over the lane.
  const transport::BulkLaneServer* b = lane.c->server->bulk_lane();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->pulls_sent(), 6u);
  EXPECT_EQ(b->pushes_received(), 6u);

  // The same experiment over gRPC streams ends on the same θ, which is the one computed directly.
  Experiment grpc(cfg, 2, /*bulk_lane=*/false);
  ASSERT_TRUE(grpc.c);
  EXPECT_EQ(grpc.c->server->bulk_lane(), nullptr);
  EXPECT_TRUE(grpc.run(2).empty());
  EXPECT_EQ(lane.c->service->params_fingerprint(), grpc.c->service->params_fingerprint());
  EXPECT_EQ(lane.c->service->params_fingerprint(),
            testing::expected_fingerprint(lane.init, 2, 3, cfg));
}

TEST(BulkLaneService, OnlyNodeCertificatesOfTheExperimentGetThrough) {
  const ExperimentConfig cfg = testing::small_config("bulk-auth", 1, 1);
  Experiment e(cfg, 1, true);
  ASSERT_TRUE(e.c);
  ASSERT_TRUE(e.c->service->start().ok());
  auto pem = [](const std::string& path) { return *atl::read_file(path); };
  auto lane_client = [&](const std::string& name) {
    transport::BulkLaneClientOptions o;
    o.target = "127.0.0.1:" + std::to_string(e.c->server->bulk_port());
    o.identity = std::make_shared<const transport::TlsIdentity>(transport::TlsIdentity{
        pem(transport::ca_cert_path(e.ca)), pem(transport::cert_path(e.ca, name)),
        pem(transport::key_path(e.ca, name))});
    o.server_name = "coordinator";
    return transport::BulkLaneClient(o);
  };
  pb::PullParamsRequest req;
  req.set_experiment_id("bulk-auth");
  pb::TensorHeader h;
  std::string payload;
  bool reached = false;
  // An admin certificate is a valid certificate of this CA, but not a node's.
  Status st = lane_client("ops").pull(req, 1 << 30, &h, &payload, &reached);
  EXPECT_TRUE(reached);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.to_string();
  EXPECT_NE(st.message().find("has role 'admin'"), std::string::npos) << st.message();
  // Another experiment's id: told which one is served.
  req.set_experiment_id("other");
  st = lane_client("node-0").pull(req, 1 << 30, &h, &payload, &reached);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
  EXPECT_NE(st.message().find("serves 'bulk-auth'"), std::string::npos) << st.message();
  EXPECT_EQ(e.c->server->bulk_lane()->pulls_sent(), 0u);
}

TEST(BulkLaneService, ANodeThatCannotReachTheLaneTrainsOverGrpc) {
  const ExperimentConfig cfg = testing::small_config("bulk-fallback", 2, 1);
  Experiment e(cfg, 1, true);
  ASSERT_TRUE(e.c);
  // JoinResponses now name a port where nothing listens (a firewall in front of the lane).
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(s);
  e.c->service->set_bulk_port(ntohs(a.sin_port));
  ::testing::internal::CaptureStderr();
  const std::vector<std::string> errors = e.run(1);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(e.c->server->bulk_lane()->pulls_sent(), 0u);
  EXPECT_EQ(e.c->service->params_fingerprint(), testing::expected_fingerprint(e.init, 1, 2, cfg));
  // One line says so, once (not once per transfer).
  const std::string line = "pulls and pushes stay on gRPC";
  ASSERT_NE(said.find(line), std::string::npos) << said;
  EXPECT_EQ(said.find(line), said.rfind(line)) << said;
  EXPECT_NE(said.find("cannot reach the bulk lane"), std::string::npos) << said;
}

}  // namespace
}  // namespace atl::coordinator
