// Secure aggregation through the round engine ([secagg], coordinator/secagg_round.h) with
// sites speaking the protocol in process (node/secure_push.h over simulate/in_process_calls.h):
// the committed θ is bit for bit the one of the same quantized updates aggregated in the
// clear, a site that drops after its masked push does not stop the round, a site that drops
// after sharing keys is unmasked out, and the configs it cannot work with are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "algorithms/diloco/outer.h"
#include "algorithms/secagg/quantize.h"
#include "coordinator/experiment_config.h"
#include "coordinator/round_engine.h"
#include "kernels/core/philox.h"
#include "node/coordinator_client.h"
#include "node/secure_push.h"
#include "simulate/in_process_calls.h"
#include "test_util.h"

namespace atl::coordinator {
namespace {

namespace pb = atoll_pb::v1;
using testing_util::TempDir;

constexpr size_t kNumel = 2000;
const std::vector<std::string> kSites = {"site-a", "site-b", "site-c"};

std::vector<float> random_vector(size_t n, double scale, uint64_t stream) {
  const Philox rng(4242, stream);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * rng.normal(i));
  return v;
}

ExperimentConfig secagg_config(bool masking) {
  return testing_util::secagg_test_config("sa", 2, 2, masking);
}

uint64_t site_rounding_seed(size_t i) { return 1000 + i; }

// What a site does: everything (kFull), stops after its masked push (kDropAfterPush), shares
// keys and then leaves before pushing (kLeaveAfterSharing), takes its task and then says nothing
// while staying a member (kSilent: a stopped process), or restarts after the roster is fixed,
// its new process known by its new keys (kRestartAfterRoster: in-process calls carry no process
// id) or at its Join (kRejoinAfterRoster: what the service tells the engine over gRPC).
enum class Behaviour {
  kFull,
  kDropAfterPush,
  kLeaveAfterSharing,
  kSilent,
  kRestartAfterRoster,
  kRejoinAfterRoster
};

struct RoundResult {
  std::string theta_fp;
  std::vector<float> theta;
  RoundRecord record;
  std::vector<Status> site_status;
};

// The advertisement of a site's session keys for `round`.
pb::SecAggKeys keys_of(const algorithms::secagg::SiteSession& session, uint64_t round,
                       uint32_t wait_ms) {
  pb::SecAggKeys keys;
  keys.set_round(round);
  keys.set_cipher_public(algorithms::secagg::key_bytes(session.keys().cipher_public));
  keys.set_mask_public(algorithms::secagg::key_bytes(session.keys().mask_public));
  keys.set_wait_ms(wait_ms);
  return keys;
}

// Stages 1 and 2 of a site that then leaves the experiment without pushing.
Status share_then_leave(node::CoordinatorClient& link, uint64_t round) {
  namespace sa = algorithms::secagg;
  ATOLL_ASSIGN_OR_RETURN(sa::SiteSession session, sa::SiteSession::start(round));
  const pb::SecAggKeys keys = keys_of(session, round, 5000);
  pb::SecAggRoster roster;
  do {
    ATOLL_ASSIGN_OR_RETURN(roster, link.advertise_keys(keys));
  } while (!roster.complete());
  sa::Roster members;
  for (const pb::SecAggSite& s : roster.sites())
    members[s.index()] = {*sa::key_from_bytes(s.cipher_public(), "c"),
                          *sa::key_from_bytes(s.mask_public(), "m")};
  ATOLL_ASSIGN_OR_RETURN(auto sealed,
                         session.share_keys(roster.self_index(), members, roster.threshold()));
  pb::SecAggShares out;
  out.set_round(round);
  for (auto& [to, message] : sealed) {
    pb::SecAggShare* s = out.add_shares();
    s->set_index(to);
    s->set_sealed(message);
  }
  // No wait: the shares are in once the call returns; the site leaves at once.
  ATOLL_RETURN_IF_ERROR(link.share_keys(out).status());
  return link.leave("dropping after sharing keys");
}

// Advertises a fresh session's keys once (no wait): what a site's process does first.
StatusOr<pb::SecAggRoster> advertise_fresh_keys(node::CoordinatorClient& link, uint64_t round,
                                                uint32_t wait_ms) {
  ATOLL_ASSIGN_OR_RETURN(algorithms::secagg::SiteSession session,
                         algorithms::secagg::SiteSession::start(round));
  return link.advertise_keys(keys_of(session, round, wait_ms));
}

// A site that restarts once the roster is fixed: known as a new process at its join
// (`rejoined`: the engine is told, as the service does) or else by its new keys, refused with
// the line that says so. Either way it gets no task for this round, and is ready for the next.
Status restart_after_roster(RoundEngine& engine, node::CoordinatorClient& link,
                            const std::string& id, uint64_t round, bool rejoined) {
  for (;;) {  // the first process: until the roster is fixed with its keys
    ATOLL_ASSIGN_OR_RETURN(pb::SecAggRoster roster, advertise_fresh_keys(link, round, 5000));
    if (roster.complete()) break;
  }
  if (rejoined) {
    engine.node_process_restarted(id);
  } else {
    auto again = advertise_fresh_keys(link, round, 0);  // the restarted process
    if (again.ok() ||
        again.status().message().find("takes part again from the next round") == std::string::npos)
      return Internal("a restarted site's new keys: " + again.status().to_string());
  }
  ATOLL_ASSIGN_OR_RETURN(pb::Task task, link.next_task(0, 300));
  if (task.kind() != pb::Task::WAIT)
    return Internal("a restarted site was given task kind " + std::to_string(task.kind()));
  for (const NodeSnapshot& n : engine.nodes())
    if (n.node_id == id)
      return n.ready ? Status::Ok() : Internal("a departed site is not ready for a round");
  return Internal("the restarted site is not among the engine's nodes");
}

// One round of `cfg` with the three sites pushing `deltas` through the secagg stages.
RoundResult run_round(const ExperimentConfig& cfg, const algorithms::ParamSet& init,
                      const std::vector<std::vector<float>>& deltas,
                      const std::vector<Behaviour>& behaviour,
                      std::vector<std::string>* audit_events = nullptr) {
  RoundResult out;
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
  for (const auto& id : kSites) {
    links.push_back(std::make_unique<node::CoordinatorClient>(
        std::make_unique<simulate::InProcessCalls>(e, id)));
    auto joined = links.back()->join();
    EXPECT_TRUE(joined.ok()) << joined.status().to_string();
    if (joined.ok()) {
      EXPECT_TRUE(joined->train().secagg().enabled());
    }
  }
  std::vector<std::future<Status>> sites;
  for (size_t i = 0; i < kSites.size(); ++i)
    sites.push_back(std::async(std::launch::async, [&, i]() -> Status {
      node::CoordinatorClient& link = *links[i];
      ATOLL_ASSIGN_OR_RETURN(pb::Task task, link.next_task(0, 10000));
      if (task.kind() != pb::Task::TRAIN) return Internal("expected a TRAIN task");
      if (behaviour[i] == Behaviour::kSilent) return Status::Ok();
      if (behaviour[i] == Behaviour::kRestartAfterRoster ||
          behaviour[i] == Behaviour::kRejoinAfterRoster)
        return restart_after_roster(e, link, kSites[i], task.round(),
                                    behaviour[i] == Behaviour::kRejoinAfterRoster);
      pb::SecAggSpec spec;
      spec.set_enabled(true);
      spec.set_clip_range(cfg.secagg.clip_range);
      spec.set_quantization_range(cfg.secagg.quantization_range);
      spec.set_masking(cfg.secagg.masking);
      node::SecurePush secure(spec, site_rounding_seed(i), nullptr);
      node::UpdateHeader h{.round = task.round(),
                           .tokens = 100 * (i + 1),
                           .train_loss = 2.0,
                           .base_fingerprint = task.params_fingerprint(),
                           .layout_fingerprint = algorithms::layout_fingerprint(init.layout())};
      if (behaviour[i] == Behaviour::kLeaveAfterSharing) return share_then_leave(link, h.round);
      ATOLL_ASSIGN_OR_RETURN(uint64_t sent, secure.push(link, h, deltas[i]));
      if (sent != kNumel * 4) return Internal("pushed " + std::to_string(sent) + " bytes");
      if (behaviour[i] == Behaviour::kDropAfterPush) return Status::Ok();
      return secure.unmask(link);
    }));
  for (auto& s : sites) out.site_status.push_back(s.get());
  EXPECT_TRUE(e.wait_for_round(1, Clock::now() + std::chrono::seconds(20)));
  if (audit_events) {
    auto audit = (*store)->list_audit(cfg.name);
    EXPECT_TRUE(audit.ok());
    if (audit.ok()) *audit_events = *audit;
  }
  out.theta_fp = e.params_fingerprint();
  out.theta = e.params();
  auto rec = (*store)->load_round(cfg.name, 0);
  EXPECT_TRUE(rec.ok()) << rec.status().to_string();
  if (rec.ok()) out.record = *rec;
  e.shutdown();
  engine->reset();
  return out;
}

// θ after one outer step on the equal-weight mean of the quantized deltas of `sites`.
std::vector<float> expected_theta(const ExperimentConfig& cfg, const algorithms::ParamSet& init,
                                  const std::vector<std::vector<float>>& deltas,
                                  const std::set<size_t>& sites) {
  const algorithms::secagg::QuantizeOptions q{cfg.secagg.clip_range,
                                              cfg.secagg.quantization_range};
  std::vector<uint32_t> sum(kNumel, 0), words(kNumel);
  for (size_t i : sites) {
    algorithms::secagg::quantize(deltas[i], q, site_rounding_seed(i), words);
    for (size_t k = 0; k < kNumel; ++k) sum[k] += words[k];
  }
  std::vector<float> mean(kNumel);
  algorithms::secagg::dequantize_mean(sum, sites.size(), q, mean);
  std::vector<float> theta = init.vec(), momentum(kNumel);
  const algorithms::OuterNesterov outer(
      {static_cast<float>(cfg.diloco.outer_lr), static_cast<float>(cfg.diloco.outer_momentum)});
  EXPECT_TRUE(outer.step(theta, momentum, mean, /*first_step=*/true).ok());
  return theta;
}

std::vector<std::vector<float>> three_deltas() {
  // Site b's elements often exceed the clip range (0.5): clipping is part of what is compared.
  return {random_vector(kNumel, 0.01, 1), random_vector(kNumel, 0.4, 2),
          random_vector(kNumel, 0.05, 3)};
}

TEST(SecAggEngine, MaskedRoundCommitsTheBitsOfTheClearQuantizedSum) {
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  const auto deltas = three_deltas();
  const std::vector<Behaviour> all(3, Behaviour::kFull);
  const RoundResult masked = run_round(secagg_config(true), init, deltas, all);
  for (const Status& st : masked.site_status) EXPECT_TRUE(st.ok()) << st.to_string();
  const RoundResult clear = run_round(secagg_config(false), init, deltas, all);
  for (const Status& st : clear.site_status) EXPECT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(masked.theta.size(), kNumel);
  EXPECT_EQ(masked.theta_fp, clear.theta_fp);
  EXPECT_EQ(masked.theta, clear.theta);
  EXPECT_EQ(masked.theta, expected_theta(secagg_config(true), init, deltas, {0, 1, 2}));
  EXPECT_NE(masked.theta, init.vec());
  ASSERT_EQ(masked.record.participants.size(), 3u);
  for (const ParticipantRecord& p : masked.record.participants) EXPECT_TRUE(p.pushed);
  EXPECT_EQ(masked.record.tokens, 600u);
}

TEST(SecAggEngine, SiteDroppingAfterItsMaskedPushDoesNotStopTheRound) {
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  const auto deltas = three_deltas();
  const RoundResult r =
      run_round(secagg_config(true), init, deltas,
                {Behaviour::kFull, Behaviour::kFull, Behaviour::kDropAfterPush});
  for (const Status& st : r.site_status) EXPECT_TRUE(st.ok()) << st.to_string();
  // Its input is in the sum: the others' shares of its self-mask seed unmasked it.
  EXPECT_EQ(r.theta, expected_theta(secagg_config(true), init, deltas, {0, 1, 2}));
}

TEST(SecAggEngine, SiteLeavingAfterSharingKeysIsUnmaskedOut) {
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  const auto deltas = three_deltas();
  const RoundResult r =
      run_round(secagg_config(true), init, deltas,
                {Behaviour::kFull, Behaviour::kLeaveAfterSharing, Behaviour::kFull});
  EXPECT_TRUE(r.site_status[0].ok()) << r.site_status[0].to_string();
  EXPECT_TRUE(r.site_status[2].ok()) << r.site_status[2].to_string();
  // Its mask key was reconstructed and its pairwise masks removed: the sum of a and c.
  EXPECT_EQ(r.theta, expected_theta(secagg_config(true), init, deltas, {0, 2}));
  ASSERT_EQ(r.record.participants.size(), 3u);
  EXPECT_FALSE(r.record.participants[1].pushed);
}

// A stage that closes at the deadline without a silent site (a stopped process that is not yet
// lost) gives the rest of the round a deadline of its own: the round commits with the other
// two instead of restarting at once (every stage after the first had 0 arrivals before).
TEST(SecAggEngine, ASilentSiteIsLeftOutAtTheDeadlineAndTheRoundCommits) {
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  const auto deltas = three_deltas();
  ExperimentConfig cfg = secagg_config(true);
  cfg.diloco.round_deadline_s = 1.0;  // the silent site is lost only after 20 heartbeats
  std::vector<std::string> audit;
  const RoundResult r = run_round(cfg, init, deltas,
                                  {Behaviour::kFull, Behaviour::kFull, Behaviour::kSilent}, &audit);
  for (const Status& st : r.site_status) EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(r.theta, expected_theta(cfg, init, deltas, {0, 1}));
  ASSERT_EQ(r.record.participants.size(), 3u);
  EXPECT_FALSE(r.record.participants[2].pushed);
  const auto note = std::find_if(audit.begin(), audit.end(), [](const std::string& line) {
    return line.find("secagg_deadline") != std::string::npos;
  });
  ASSERT_NE(note, audit.end());
  EXPECT_NE(note->find("round 0: secagg key advertising closed at the deadline without site-c; "
                       "the rest of the round has a new deadline"),
            std::string::npos)
      << *note;
  EXPECT_TRUE(std::none_of(audit.begin(), audit.end(), [](const std::string& line) {
    return line.find("round_restarted") != std::string::npos;
  }));
}

// New keys from a restarted site replace its old ones while the roster is open (no one has used
// them); once it is fixed the site has departed the round.
TEST(SecAggEngine, ARestartedSitesNewKeysReplaceItsOldOnesUntilTheRosterIsFixed) {
  namespace sa = algorithms::secagg;
  const ExperimentConfig cfg = secagg_config(true);
  SecAggRound round(0, kSites, cfg.secagg, cfg.diloco.min_nodes, kNumel);
  auto fresh_keys = [] {
    auto session = sa::SiteSession::start(0);
    EXPECT_TRUE(session.ok());
    return keys_of(*session, 0, 0);
  };
  const pb::SecAggKeys first = fresh_keys(), restarted = fresh_keys();
  ASSERT_TRUE(round.advertise("site-c", first).ok());
  ASSERT_TRUE(round.advertise("site-c", first).ok());  // a repeated call
  ASSERT_TRUE(round.advertise("site-c", restarted).ok());
  ASSERT_TRUE(round.advertise("site-a", fresh_keys()).ok());
  ASSERT_TRUE(round.advertise("site-b", fresh_keys()).ok());
  EXPECT_FALSE(round.advance([](const std::string&) { return true; }, false, false));
  ASSERT_EQ(round.stage(), SecAggRound::Stage::kShare);
  pb::SecAggRoster roster;
  round.fill_roster("site-c", roster);
  ASSERT_EQ(roster.sites_size(), 3);
  EXPECT_EQ(roster.sites(2).mask_public(), restarted.mask_public());
  EXPECT_FALSE(round.departed("site-c"));
  const Status late = round.advertise("site-c", fresh_keys());
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(late.message(),
            "round 0: secure aggregation goes on with the keys 'site-c' advertised before it "
            "restarted; it takes part again from the next round");
  EXPECT_TRUE(round.departed("site-c"));
}

// A site whose process restarts after the roster was fixed is told it takes part from the next
// round, gets no task, and the round does not wait for it (the 30 s deadline is never reached:
// the test waits 20 s at most).
TEST(SecAggEngine, ASiteRestartedAfterTheRosterDoesNotStallTheRound) {
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  const auto deltas = three_deltas();
  const ExperimentConfig cfg = secagg_config(true);
  for (const Behaviour restarted :
       {Behaviour::kRestartAfterRoster, Behaviour::kRejoinAfterRoster}) {
    const RoundResult after =
        run_round(cfg, init, deltas, {Behaviour::kFull, Behaviour::kFull, restarted});
    for (const Status& st : after.site_status) EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(after.theta, expected_theta(cfg, init, deltas, {0, 1}));
    ASSERT_EQ(after.record.participants.size(), 3u);
    EXPECT_FALSE(after.record.participants[2].pushed);
  }
}

TEST(SecAggEngine, ConfigRefusesWhatSecureAggregationCannotDo) {
  auto error = [](ExperimentConfig c) { return validate_experiment_config(c, "t").to_string(); };
  ExperimentConfig ok = secagg_config(true);
  EXPECT_TRUE(validate_experiment_config(ok, "t").ok());
  ExperimentConfig c = ok;
  c.robust.screen = "clip";
  EXPECT_NE(error(c).find("robust.screen = \"off\""), std::string::npos) << error(c);
  c = ok;
  c.robust.aggregator = "median";
  EXPECT_NE(error(c).find("robust.aggregator"), std::string::npos) << error(c);
  c = ok;
  c.privacy.clip_norm = 1.0;
  EXPECT_NE(error(c).find("privacy.clip_norm"), std::string::npos) << error(c);
  c = ok;
  c.algorithm = "hydra";
  EXPECT_NE(error(c).find("hydra"), std::string::npos) << error(c);
  c = ok;
  c.diloco.streaming_fragments = 2;
  EXPECT_NE(error(c).find("Streaming"), std::string::npos) << error(c);
  c = ok;
  c.train.codec = "topk:0.1";
  EXPECT_NE(error(c).find("train.codec"), std::string::npos) << error(c);
  c = ok;
  c.secagg.threshold = 3;  // > min_nodes 2
  EXPECT_NE(error(c).find("secagg.threshold"), std::string::npos) << error(c);
  c = ok;
  c.secagg.quantization_range = 1u << 30;  // × max_nodes 8 > 2^32
  EXPECT_NE(error(c).find("32 bits"), std::string::npos) << error(c);
  // The TOML section round-trips.
  auto parsed = parse_experiment_config(to_toml(ok));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_TRUE(parsed->secagg.enabled);
  EXPECT_EQ(parsed->secagg.quantization_range, 1u << 20);
  EXPECT_EQ(parsed->secagg.clip_range, 0.5);
}

}  // namespace
}  // namespace atl::coordinator
