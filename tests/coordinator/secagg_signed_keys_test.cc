// Signed secure-aggregation key advertisements (node/secure_push.h): each site signs its keys
// with its mTLS key, the coordinator forwards the signature with the site's certificate, and a
// site derives nothing from keys whose signature, certificate or name does not check out
// against the experiment CA — so a coordinator that substitutes a key (a man in the middle) is
// caught by the receiving site. Honest signed rounds commit the θ of unsigned ones, bit for bit.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/secagg/protocol.h"
#include "coordinator/experiment_config.h"
#include "coordinator/round_engine.h"
#include "kernels/core/file_io.h"
#include "node/coordinator_client.h"
#include "node/secure_push.h"
#include "simulate/in_process_calls.h"
#include "test_util.h"
#include "transport/tls/ca.h"
#include "transport/tls/openssl_util.h"
#include "transport/tls/signed_statement.h"

namespace atl::coordinator {
namespace {

namespace pb = atoll_pb::v1;
namespace sa = algorithms::secagg;
using testing_util::TempDir;

constexpr size_t kNumel = 1000;
const std::vector<std::string> kSites = {"site-a", "site-b", "site-c"};

// A CA directory with a node certificate for every site (and for `extra` names).
struct Pki {
  TempDir dir;
  explicit Pki(const std::vector<std::string>& extra = {}) {
    EXPECT_TRUE(transport::ca_init(dir.path()).ok());
    for (const auto& names : {kSites, extra})
      for (const std::string& n : names)
        EXPECT_TRUE(transport::ca_issue(dir.path(), n, transport::Role::kNode).ok()) << n;
  }
  transport::ClientIdentity identity(const std::string& name) const {
    transport::ClientIdentity id;
    id.ca_pem = *atl::read_file(transport::ca_cert_path(dir.path()));
    id.cert_pem = *atl::read_file(transport::cert_path(dir.path(), name));
    id.key_pem = *atl::read_file(transport::key_path(dir.path(), name));
    return id;
  }
};

// A site's calls with an mTLS identity: the advertisement reaches the engine with the site's
// certificate, as the gRPC service passes the one of the handshake. `tamper` (may be empty)
// changes the roster on its way back: what a malicious coordinator could do.
class SignedCalls final : public node::CoordinatorCalls {
 public:
  SignedCalls(RoundEngine& engine, const std::string& site, transport::ClientIdentity identity,
              std::function<void(pb::SecAggRoster&)> tamper)
      : inner_(engine, site),
        engine_(engine),
        site_(site),
        identity_(std::move(identity)),
        tamper_(std::move(tamper)) {}
  const std::string& target() const override { return inner_.target(); }
  const transport::ClientIdentity* identity() const override { return &identity_; }
  Status join(const pb::JoinRequest& req, pb::JoinResponse* resp) override {
    return inner_.join(req, resp);
  }
  Status heartbeat(const pb::HeartbeatRequest& req, pb::HeartbeatResponse* resp) override {
    return inner_.heartbeat(req, resp);
  }
  Status next_task(const pb::NextTaskRequest& req, pb::Task* task) override {
    return inner_.next_task(req, task);
  }
  Status pull_params(const pb::PullParamsRequest& req, pb::TensorHeader* header,
                     std::string* payload) override {
    return inner_.pull_params(req, header, payload);
  }
  Status push_update(const pb::TensorHeader& header, std::string_view payload,
                     pb::PushUpdateResponse* resp) override {
    return inner_.push_update(header, payload, resp);
  }
  Status report_metrics(const pb::MetricsReport& req, pb::MetricsAck* ack) override {
    return inner_.report_metrics(req, ack);
  }
  Status leave(const pb::LeaveRequest& req, pb::LeaveResponse* resp) override {
    return inner_.leave(req, resp);
  }
  Status report_importance(const pb::ImportanceReport& req, pb::ImportanceAck* resp) override {
    return inner_.report_importance(req, resp);
  }
  Status advertise_keys(const pb::SecAggKeys& req, pb::SecAggRoster* resp) override {
    ATOLL_ASSIGN_OR_RETURN(*resp, engine_.advertise_keys(site_, req, identity_.cert_pem));
    if (tamper_ && resp->complete()) tamper_(*resp);
    return Status::Ok();
  }
  Status share_keys(const pb::SecAggShares& req, pb::SecAggShares* resp) override {
    return inner_.share_keys(req, resp);
  }
  Status await_unmask(const pb::SecAggUnmaskPoll& req, pb::SecAggUnmaskTask* resp) override {
    return inner_.await_unmask(req, resp);
  }
  Status reveal_shares(const pb::SecAggReveal& req, pb::SecAggRevealAck* resp) override {
    return inner_.reveal_shares(req, resp);
  }

 private:
  simulate::InProcessCalls inner_;
  RoundEngine& engine_;
  const std::string site_;
  const transport::ClientIdentity identity_;
  const std::function<void(pb::SecAggRoster&)> tamper_;
};

ExperimentConfig secagg_config() {
  return testing_util::secagg_test_config("sk", 1, 3, true);
}

struct RoundOutcome {
  std::vector<Status> sites;
  std::string theta_fp;
  std::vector<float> theta;
};

// One secure round of the three sites; `pki` null: no identities (nothing signed). `tamper`
// applies to site-a's roster only. Sites still waiting once site-a has failed are stopped.
RoundOutcome run_round(const Pki* pki, std::function<void(pb::SecAggRoster&)> tamper = {}) {
  RoundOutcome out;
  const ExperimentConfig cfg = secagg_config();
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  TempDir dir;
  auto store = Store::open(dir.path(), {.keep_params = cfg.diloco.keep_params});
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  if (!store.ok()) return out;
  auto engine = RoundEngine::open(**store, cfg, init, {});
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return out;
  RoundEngine& e = **engine;
  EXPECT_TRUE(e.start().ok());
  std::vector<std::unique_ptr<node::CoordinatorClient>> links;
  for (const std::string& id : kSites) {
    std::unique_ptr<node::CoordinatorCalls> calls;
    if (pki)
      calls = std::make_unique<SignedCalls>(e, id, pki->identity(id),
                                            id == kSites[0] ? tamper : nullptr);
    else
      calls = std::make_unique<simulate::InProcessCalls>(e, id);
    links.push_back(std::make_unique<node::CoordinatorClient>(std::move(calls)));
    EXPECT_TRUE(links.back()->join().ok());
  }
  std::atomic<bool> stop{false};
  std::vector<std::future<Status>> sites;
  for (size_t i = 0; i < kSites.size(); ++i)
    sites.push_back(std::async(std::launch::async, [&, i]() -> Status {
      node::CoordinatorClient& link = *links[i];
      ATOLL_ASSIGN_OR_RETURN(pb::Task task, link.next_task(0, 10000));
      pb::SecAggSpec spec;
      spec.set_enabled(true);
      spec.set_clip_range(cfg.secagg.clip_range);
      spec.set_quantization_range(cfg.secagg.quantization_range);
      spec.set_masking(true);
      node::SecurePush secure(spec, 1000 + i, &stop);
      node::UpdateHeader h{.round = task.round(),
                           .tokens = 100,
                           .train_loss = 2.0,
                           .base_fingerprint = task.params_fingerprint(),
                           .layout_fingerprint = algorithms::layout_fingerprint(init.layout())};
      const std::vector<float> delta = testing_util::normal_vector(kNumel, 10 + i);
      std::vector<float> scaled(delta);
      for (float& v : scaled) v *= 0.01f;
      ATOLL_RETURN_IF_ERROR(secure.push(link, h, scaled).status());
      return secure.unmask(link);
    }));
  out.sites.resize(kSites.size());
  out.sites[0] = sites[0].get();
  if (!out.sites[0].ok()) stop = true;  // the others would wait for site-a until the deadline
  for (size_t i = 1; i < kSites.size(); ++i) out.sites[i] = sites[i].get();
  if (out.sites[0].ok()) {
    EXPECT_TRUE(e.wait_for_round(1, Clock::now() + std::chrono::seconds(20)));
    out.theta_fp = e.params_fingerprint();
    out.theta = e.params();
  }
  e.shutdown();
  engine->reset();
  return out;
}

TEST(SecAggSignedKeys, HonestSignedRoundCommitsTheThetaOfAnUnsignedOne) {
  const Pki pki;
  const RoundOutcome signed_round = run_round(&pki);
  for (const Status& st : signed_round.sites) EXPECT_TRUE(st.ok()) << st.to_string();
  const RoundOutcome unsigned_round = run_round(nullptr);
  for (const Status& st : unsigned_round.sites) EXPECT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(signed_round.theta.size(), kNumel);
  EXPECT_EQ(signed_round.theta_fp, unsigned_round.theta_fp);
  EXPECT_EQ(signed_round.theta, unsigned_round.theta);
  EXPECT_NE(signed_round.theta, testing_util::toy_params(kNumel).vec());
}

TEST(SecAggSignedKeys, ASubstitutedKeyIsDetectedByTheReceivingSite) {
  const Pki pki;
  // The coordinator hands site-a its own mask key in place of site-b's (it would then know
  // s_ab, and with site-b's self-mask seed from the unmask stage, site-a's update).
  auto fake = sa::SiteSession::start(0);
  ASSERT_TRUE(fake.ok());
  const std::string substitute = sa::key_bytes(fake->keys().mask_public);
  const RoundOutcome r = run_round(&pki, [&](pb::SecAggRoster& roster) {
    for (pb::SecAggSite& s : *roster.mutable_sites())
      if (s.node_id() == "site-b") s.set_mask_public(substitute);
  });
  ASSERT_EQ(r.sites[0].code(), StatusCode::kPermissionDenied) << r.sites[0].to_string();
  const std::string& m = r.sites[0].message();
  EXPECT_NE(m.find("secure aggregation of round 0: the keys the coordinator forwarded for site 2 "
                   "('site-b') fail their signature check"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("leaves the round's secure exchange"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;  // one line
}

// A roster of the three sites' signed advertisements for round 5, as the coordinator forwards
// it to site-a (index 1).
struct SignedRoster {
  pb::SecAggRoster roster;
  pb::SecAggKeys own;  // site-a's advertisement
};
SignedRoster signed_roster(const Pki& pki, const std::string& experiment = "exp") {
  SignedRoster out;
  out.roster.set_complete(true);
  out.roster.set_round(5);
  out.roster.set_self_index(1);
  out.roster.set_threshold(2);
  for (uint32_t i = 0; i < kSites.size(); ++i) {
    auto session = sa::SiteSession::start(5);
    EXPECT_TRUE(session.ok());
    const transport::ClientIdentity id = pki.identity(kSites[i]);
    pb::SecAggSite* s = out.roster.add_sites();
    s->set_index(i + 1);
    s->set_cipher_public(sa::key_bytes(session->keys().cipher_public));
    s->set_mask_public(sa::key_bytes(session->keys().mask_public));
    s->set_node_id(kSites[i]);
    s->set_certificate_pem(id.cert_pem);
    auto sig = transport::sign_statement(
        id.key_pem, node::advertisement_statement(experiment, 5, kSites[i], s->cipher_public(),
                                                  s->mask_public()));
    EXPECT_TRUE(sig.ok()) << sig.status().to_string();
    s->set_signature(*sig);
    if (i == 0) {
      out.own.set_cipher_public(s->cipher_public());
      out.own.set_mask_public(s->mask_public());
    }
  }
  return out;
}

TEST(SecAggSignedKeys, EveryForgeryOfTheRosterIsRefusedWithOneLine) {
  const Pki pki({"mallory"});
  const Pki other_ca;  // an unrelated CA with certificates of the same names
  const transport::ClientIdentity a = pki.identity("site-a");
  const SignedRoster good = signed_roster(pki);
  EXPECT_TRUE(node::check_roster_signatures(a, "exp", good.roster, good.own).ok());

  auto refused = [&](const std::function<void(SignedRoster&)>& forge, const std::string& what) {
    SignedRoster r = good;
    forge(r);
    const Status st = node::check_roster_signatures(a, "exp", r.roster, r.own);
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.to_string();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  };
  // Another cipher key for site-c: the signature no longer matches.
  refused(
      [](SignedRoster& r) { r.roster.mutable_sites(2)->set_cipher_public(std::string(32, 'x')); },
      "site 3 ('site-c') fail their signature check: the statement of 'site-c' does not "
      "carry its signature");
  // Keys signed by a node the CA vouches for, but presented as site-b's.
  refused(
      [&](SignedRoster& r) {
        const transport::ClientIdentity m = pki.identity("mallory");
        pb::SecAggSite* s = r.roster.mutable_sites(1);
        s->set_certificate_pem(m.cert_pem);
        s->set_signature(*transport::sign_statement(
            m.key_pem, node::advertisement_statement("exp", 5, "site-b", s->cipher_public(),
                                                     s->mask_public())));
      },
      "comes with the certificate of 'mallory'");
  // A certificate (and key) of the right name from another CA.
  refused(
      [&](SignedRoster& r) {
        const transport::ClientIdentity o = other_ca.identity("site-b");
        pb::SecAggSite* s = r.roster.mutable_sites(1);
        s->set_certificate_pem(o.cert_pem);
        s->set_signature(*transport::sign_statement(
            o.key_pem, node::advertisement_statement("exp", 5, "site-b", s->cipher_public(),
                                                     s->mask_public())));
      },
      "a certificate the experiment CA does not vouch for");
  // Site-a's own entry with keys it did not advertise.
  refused([](SignedRoster& r) { r.own.set_mask_public(std::string(32, 'y')); },
          "site 1 ('site-a') are not the keys this site advertised");
  // An advertisement of another round or experiment (a replayed one) does not verify.
  refused([](SignedRoster& r) { r.roster.set_round(6); }, "fail their signature check");
  {
    const SignedRoster elsewhere = signed_roster(pki, "other-exp");
    const Status st = node::check_roster_signatures(a, "exp", elsewhere.roster, elsewhere.own);
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.to_string();
  }
  // No signature or no certificate at all (a coordinator forwarding unsigned keys).
  refused([](SignedRoster& r) { r.roster.mutable_sites(1)->clear_signature(); },
          "does not carry its signature");
  refused([](SignedRoster& r) { r.roster.mutable_sites(1)->clear_certificate_pem(); },
          "comes with no readable certificate");
  // One node twice on the roster.
  refused([](SignedRoster& r) { *r.roster.add_sites() = r.roster.sites(1); },
          "name a node that is on the roster twice");
}

}  // namespace
}  // namespace atl::coordinator
