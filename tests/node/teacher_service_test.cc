// The Teacher service and its client in one process (node/teacher_service.h,
// node/teacher_client.h): a teacher that holds other parameters than the student checked at its
// start refuses the student's requests, a server without the Teacher service is named as such,
// and a DiLoCo site's certificate-name failure names --teacher-name.
#include "node/teacher_service.h"

#include <grpcpp/client_context.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/philox.h"
#include "node/distill_inner.h"
#include "node/teacher_client.h"
#include "tests/node/node_test_util.h"
#include "tools/temp_dir.h"
#include "transport/channel.h"
#include "transport/proto/atoll.grpc.pb.h"
#include "transport/tls/ca.h"
#include "transport/tls/credentials.h"

namespace atl::node {
namespace {

namespace al = atl::algorithms;
namespace pb = atoll_pb::v1;
using namespace std::chrono_literals;

constexpr int kVocab = 64, kBatch = 2, kSeq = 12;

al::ModelConfig model_cfg() {
  al::ModelConfig c;
  c.vocab = kVocab;
  c.dim = 16;
  c.layers = 1;
  c.heads = 2;
  c.ffn_hidden = 32;
  c.seq_len = kSeq;
  return c;
}

al::TrainerConfig train_cfg() {
  al::TrainerConfig t;
  t.batch = kBatch;
  t.seq = kSeq;
  t.lr = 1e-2;
  t.min_lr = 1e-3;
  t.warmup = 1;
  t.total_steps = 10;
  return t;
}

// The parameters of a teacher "checkpoint": its init seed tells two checkpoints apart.
al::ParamSet checkpoint_params(uint64_t seed) {
  al::ParamSet p(al::make_layout(model_cfg()));
  al::init_params(p, model_cfg(), seed);
  return p;
}

// A teacher process's service and server, plaintext on loopback, serving the whole vocabulary.
struct Teacher {
  std::unique_ptr<TeacherService> service;
  std::unique_ptr<TeacherServer> server;
};
Teacher start_teacher(const al::ParamSet& params, const std::string& listen) {
  TeacherServiceOptions o;
  o.model = model_cfg();
  o.params = params;
  o.data = testing::random_tokens(kVocab);
  o.data_spec = "random";
  o.vocab_begin = 0;
  o.vocab_end = kVocab;
  o.require_tls_identity = false;
  Teacher t;
  t.service = std::make_unique<TeacherService>(std::move(o));
  auto server = TeacherServer::start(*t.service, listen, transport::insecure_server_credentials());
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  if (server.ok()) t.server = std::move(server).value();
  return t;
}

pb::TargetsRequest one_row_request(const std::string& fingerprint) {
  pb::TargetsRequest req;
  req.set_seed(7);
  req.set_step(0);
  req.set_batch_size(kBatch);
  req.set_row_begin(0);
  req.set_row_end(1);
  req.set_seq(kSeq);
  req.set_vocab_begin(0);
  req.set_vocab_end(kVocab);
  req.set_representation("bf16");
  req.set_params_fingerprint(fingerprint);
  return req;
}

grpc::Status call_targets(const std::string& address, const pb::TargetsRequest& req) {
  auto stub = pb::Teacher::NewStub(
      transport::create_channel(address, transport::insecure_client_credentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto reader = stub->Targets(&ctx, req);
  pb::TargetsChunk chunk;
  while (reader->Read(&chunk)) {
  }
  return reader->Finish();
}

// A teacher holding other parameters (restarted with another checkpoint) refuses a request that
// carries the fingerprint the student checked, with one line naming both and the fix; its own
// fingerprint and an empty one (a student older than the field) are served.
TEST(TeacherService, RefusesRequestsCheckedAgainstOtherParameters) {
  const al::ParamSet first = checkpoint_params(9), other = checkpoint_params(10);
  ASSERT_NE(first.fingerprint(), other.fingerprint());
  Teacher t = start_teacher(other, "127.0.0.1:0");
  ASSERT_NE(t.server, nullptr);

  const grpc::Status refused =
      call_targets(t.server->address(), one_row_request(first.fingerprint()));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(refused.error_message(),
            "teacher: holds parameters " + other.fingerprint().substr(0, 16) +
                ", not the parameters " + first.fingerprint().substr(0, 16) +
                " the student checked at its start (the teacher was restarted with another "
                "checkpoint): point the student at teachers of one checkpoint, restarting this "
                "teacher with the checkpoint it served before or the student with this one");
  EXPECT_EQ(t.service->requests_served(), 0u);

  EXPECT_TRUE(call_targets(t.server->address(), one_row_request(other.fingerprint())).ok());
  EXPECT_TRUE(call_targets(t.server->address(), one_row_request("")).ok());
  EXPECT_EQ(t.service->requests_served(), 2u);
}

DistillNodeOptions student_options(const std::string& teacher) {
  DistillNodeOptions o;
  o.teachers = {teacher};
  o.alpha = 0.5;
  o.tau = 2.0;
  o.loss_rows = 8;
  o.loss_shards = 3;
  o.rpc_timeout_s = 10;
  o.wait_s = 30;  // covers the restart below
  o.send_tokens = true;
  return o;
}

// The teacher is stopped after a step and another checkpoint is served on its address: the
// student's channel reconnects without a word, and the next step stops with the teacher's line
// (kFailedPrecondition: exit code 2) instead of training on the other model's logits.
TEST(TeacherService, StudentStopsWhenTheTeacherComesBackWithAnotherCheckpoint) {
  const al::ParamSet first = checkpoint_params(9), other = checkpoint_params(10);
  Teacher t = start_teacher(first, "127.0.0.1:0");
  ASSERT_NE(t.server, nullptr);
  const std::string address = t.server->address();
  auto step =
      DistillInnerStep::create(student_options(address), transport::insecure_client_credentials(),
                               model_cfg(), train_cfg(), nullptr);
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  const auto data = testing::random_tokens(kVocab);
  al::ParamSet student = checkpoint_params(3);
  const auto batch = [&](int64_t s) {
    return al::data::sample_global_batch(data, 1, s, kBatch, kSeq).tokens;
  };
  ASSERT_TRUE((*step)->step(student, batch(0), 0, nullptr).ok());
  EXPECT_EQ(t.service->requests_served(), 1u);

  t.server->shutdown();
  t = start_teacher(other, address);
  ASSERT_NE(t.server, nullptr);
  const std::string trained = student.fingerprint();
  auto refused = (*step)->step(student, batch(1), 1, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  const std::string& line = refused.status().message();
  EXPECT_EQ(line.rfind("teacher " + address + ": teacher: holds parameters " +
                           other.fingerprint().substr(0, 16) + ", not the parameters " +
                           first.fingerprint().substr(0, 16),
                       0),
            0u)
      << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_EQ(student.fingerprint(), trained);  // nothing trained on the other model's logits
  EXPECT_EQ(t.service->requests_served(), 0u);
}

// A server without the Teacher service (here one with the Coordinator service, as at a
// coordinator's port) answers UNIMPLEMENTED with no message: the student says what that means.
TEST(TeacherService, ServerWithoutTheTeacherServiceIsNamed) {
  pb::Coordinator::Service coordinator;  // every method UNIMPLEMENTED
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", transport::insecure_server_credentials(), &port);
  builder.RegisterService(&coordinator);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  TeacherClientOptions o;
  o.addresses = {address};
  o.tls = transport::insecure_client_credentials();
  o.rpc_timeout_s = 10;
  auto client = TeacherClient::connect(o, kVocab);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.status().message(),
            "teacher " + address +
                ": the server at this address does not serve the Teacher service (is it a "
                "coordinator?): give the address of an `atoll node --role teacher`");
  server->Shutdown();
}

// A DiLoCo site names its teachers with --teacher-name: a teacher certificate without that name
// is explained with that flag (--server-name names the coordinator).
TEST(TeacherService, SiteTeacherNameFailureNamesTeacherNameFlag) {
  atl::testing::TempDir dir;
  const std::string tls_dir = dir / "tls";
  ASSERT_TRUE(transport::ca_init(tls_dir).ok());
  ASSERT_TRUE(transport::ca_issue(tls_dir, "teacher", transport::Role::kServer).ok());
  ASSERT_TRUE(transport::ca_issue(tls_dir, "node-1", transport::Role::kNode).ok());
  auto server_tls = transport::server_credentials(tls_dir, "teacher");
  ASSERT_TRUE(server_tls.ok()) << server_tls.status().to_string();
  TeacherServiceOptions so;
  so.model = model_cfg();
  so.params = checkpoint_params(9);
  so.data = testing::random_tokens(kVocab);
  so.vocab_end = kVocab;
  TeacherService service(std::move(so));
  auto server = TeacherServer::start(service, "127.0.0.1:0", *server_tls);
  ASSERT_TRUE(server.ok()) << server.status().to_string();

  auto tls = site_teacher_credentials(tls_dir, "node-1", "not-the-teacher");
  ASSERT_TRUE(tls.ok()) << tls.status().to_string();
  TeacherClientOptions o;
  o.addresses = {(*server)->address()};
  o.tls = *tls;
  o.rpc_timeout_s = 10;
  auto client = TeacherClient::connect(o, kVocab);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnauthenticated) << client.status().message();
  EXPECT_NE(client.status().message().find("not valid for the name 'not-the-teacher': use the "
                                           "name it was issued for (--teacher-name)"),
            std::string::npos)
      << client.status().message();

  // A student (`atoll node --role student`) names its teachers with --server-name.
  auto student_tls = transport::client_credentials(tls_dir, "node-1", "not-the-teacher");
  ASSERT_TRUE(student_tls.ok());
  o.tls = *student_tls;
  client = TeacherClient::connect(o, kVocab);
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("(--server-name)"), std::string::npos)
      << client.status().message();
}

}  // namespace
}  // namespace atl::node
