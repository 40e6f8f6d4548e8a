// Central differential privacy (algorithms/diloco/privacy.h): the clip bounds every site, the
// noise has the calibrated std and the same bits on every run, the accountant matches an
// independent computation, configs that make no sense or overrun the budget are refused, and
// the round engine commits clip + unweighted mean + noise + outer step, twice the same bits.
#include "algorithms/diloco/privacy.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>

#include "algorithms/diloco/outer.h"
#include "algorithms/diloco/robust.h"
#include "coordinator/experiment_config.h"
#include "coordinator/json_views.h"
#include "coordinator/round_engine.h"
#include "kernels/core/philox.h"
#include "test_util.h"
#include "transport/tensor_stream.h"

namespace atl::coordinator {
namespace {

namespace pb = atoll_pb::v1;
using testing_util::TempDir;

// n values of N(0, scale²) from a Philox stream unrelated to the privacy noise's.
std::vector<float> random_vector(size_t n, double scale, uint64_t stream) {
  const Philox rng(777, stream);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * rng.normal(i));
  return v;
}

TEST(Privacy, ClipBoundsEverySiteAndLeavesSmallUpdatesBitForBit) {
  constexpr double kClip = 0.75;
  for (uint64_t site = 0; site < 40; ++site) {
    // Norms from ~0.03 to ~3e4: some under the clip, most far over it.
    const double scale = std::pow(10.0, static_cast<double>(site % 8) - 3.0);
    std::vector<float> v = random_vector(1000 + 37 * site, scale, site);
    const std::vector<float> before = v;
    const double norm = algorithms::l2_norm(v);
    const bool clipped = algorithms::clip_to_norm(v, norm, kClip);
    EXPECT_EQ(clipped, norm > kClip) << "site " << site;
    const double after = algorithms::l2_norm(v);
    EXPECT_LE(after, kClip) << "site " << site << ": norm " << norm << " clipped to " << after;
    if (clipped) {
      EXPECT_GT(after, kClip * (1 - 1e-5)) << "clipped to the bound, not below it";
      // Direction kept: every element scaled by the same factor.
      const double factor = after / norm;
      for (size_t i = 0; i < v.size(); i += 97)
        EXPECT_NEAR(v[i], before[i] * factor, 1e-6 * std::abs(before[i] * factor) + 1e-30);
    } else {
      EXPECT_EQ(std::memcmp(v.data(), before.data(), v.size() * sizeof(float)), 0);
    }
  }
}

TEST(Privacy, NoiseHasStdZTimesClipOverSites) {
  algorithms::PrivacyOptions o;
  o.clip_norm = 0.5;
  o.noise_multiplier = 1.3;
  EXPECT_DOUBLE_EQ(algorithms::privacy_noise_stddev(o, 4), 1.3 * 0.5 / 4);
  EXPECT_EQ(algorithms::privacy_noise_stddev(o, 0), 0.0);
  const double sd = algorithms::privacy_noise_stddev(o, 4);  // 0.1625
  constexpr size_t kN = 400000;
  std::vector<float> noise(kN, 0.0f);
  algorithms::add_privacy_noise(noise, sd, /*seed=*/1234, /*round=*/3, /*first_index=*/0);
  double sum = 0, sum_sq = 0;
  for (float x : noise) sum += x, sum_sq += static_cast<double>(x) * x;
  const double mean = sum / kN;
  const double stddev = std::sqrt(sum_sq / kN - mean * mean);
  // The sample std's relative error is ~1/sqrt(2N) = 0.11%: 1% tolerance, while a factor of 2
  // (z·C/n vs z·C/(2n) or 2z·C/n) or of sqrt(n) would be far outside it.
  EXPECT_NEAR(stddev / sd, 1.0, 0.01);
  EXPECT_NEAR(mean, 0.0, 5 * sd / std::sqrt(static_cast<double>(kN)));
  // Gaussian, not merely the right variance: P(|x| > 2σ) ≈ 4.55%.
  size_t tails = 0;
  for (float x : noise) tails += std::abs(x) > 2 * sd;
  EXPECT_NEAR(static_cast<double>(tails) / kN, 0.0455, 0.002);
}

TEST(Privacy, NoiseIsAPureFunctionOfSeedRoundAndElement) {
  constexpr size_t kN = 5000;
  std::vector<float> a(kN, 0.25f), b(kN, 0.25f);
  algorithms::add_privacy_noise(a, 0.1, 42, 7, 0);
  algorithms::add_privacy_noise(b, 0.1, 42, 7, 0);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), kN * sizeof(float)), 0);
  // A fragment at offset 1000 draws exactly the elements [1000, 2000) of the whole.
  std::vector<float> frag(1000, 0.25f);
  algorithms::add_privacy_noise(frag, 0.1, 42, 7, 1000);
  EXPECT_EQ(std::memcmp(frag.data(), a.data() + 1000, 1000 * sizeof(float)), 0);
  // Another round or another seed: other noise.
  std::vector<float> other_round(kN, 0.25f), other_seed(kN, 0.25f);
  algorithms::add_privacy_noise(other_round, 0.1, 42, 8, 0);
  algorithms::add_privacy_noise(other_seed, 0.1, 43, 7, 0);
  size_t same_round = 0, same_seed = 0;
  for (size_t i = 0; i < kN; ++i)
    same_round += a[i] == other_round[i], same_seed += a[i] == other_seed[i];
  EXPECT_LT(same_round, 5u);
  EXPECT_LT(same_seed, 5u);
  // Zero std: untouched.
  std::vector<float> quiet(10, 0.25f);
  algorithms::add_privacy_noise(quiet, 0.0, 42, 7, 0);
  EXPECT_EQ(quiet, std::vector<float>(10, 0.25f));
}

// Balle & Wang 2018: the exact δ(ε) of a Gaussian mechanism with μ = sensitivity/std.
double exact_gaussian_delta(double eps, double mu) {
  auto phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  return phi(mu / 2 - eps / mu) - std::exp(eps) * phi(-mu / 2 - eps / mu);
}

TEST(Privacy, AccountantMatchesTheIndependentReference) {
  EXPECT_DOUBLE_EQ(algorithms::gaussian_rdp(8.0, 2.0), 8.0 / (2 * 4.0));
  EXPECT_EQ(algorithms::rdp_orders().size(), 99u + 52u);
  // (z, T, δ) → ε by bench/privacy/reference.py (50-digit mpmath, written from the formulas):
  // Balle et al. 2020's conversion, the classic one, and the exact ε of the composition.
  struct Case {
    double z;
    uint64_t rounds;
    double delta, rdp, classic, exact;
  };
  const Case cases[] = {
      {1.0, 1, 1e-5, 4.7285070672176231, 5.2985261385354642, 4.3771780956812246},
      {1.0, 10, 1e-5, 19.053597531631391, 20.175283643313486, 17.856586830107614},
      {0.5, 10, 1e-5, 48.801692824867751, 50.391156831212785, 46.211210191218099},
      {2.0, 100, 1e-6, 37.429216196844384, 38.809555052694795, 35.566343714136218},
      {5.0, 1000, 1e-5, 48.801692824867751, 50.391156831212785, 46.211210191218099},
      {0.8, 3, 1e-3, 9.3283945804399864, 10.391510458224786, 8.4183763941190302},
      {10.0, 50, 1e-5, 3.1889915626335876, 3.6430772742603277, 2.9432252398013643},
  };
  for (const Case& c : cases) {
    const double eps = algorithms::epsilon_after_rounds(c.rounds, c.z, c.delta);
    const double classic = algorithms::epsilon_after_rounds_classic(c.rounds, c.z, c.delta);
    EXPECT_NEAR(eps, c.rdp, 1e-9 * c.rdp) << "z " << c.z << " T " << c.rounds;
    EXPECT_NEAR(classic, c.classic, 1e-9 * c.classic) << "z " << c.z << " T " << c.rounds;
    // An upper bound on the exact ε: the exact mechanism's δ at the reported ε is ≤ δ.
    const double mu = std::sqrt(static_cast<double>(c.rounds)) / c.z;
    EXPECT_LE(exact_gaussian_delta(eps, mu), c.delta * (1 + 1e-9));
    EXPECT_GT(exact_gaussian_delta(c.exact * 0.999, mu), c.delta) << "reference exact ε";
    EXPECT_LE(c.exact, eps);
  }
  EXPECT_EQ(algorithms::epsilon_after_rounds(0, 1.0, 1e-5), 0.0);
  EXPECT_TRUE(std::isinf(algorithms::epsilon_after_rounds(3, 0.0, 1e-5)));
  // Monotone: more rounds spend more, more noise spends less.
  EXPECT_LT(algorithms::epsilon_after_rounds(10, 1.0, 1e-5),
            algorithms::epsilon_after_rounds(11, 1.0, 1e-5));
  EXPECT_GT(algorithms::epsilon_after_rounds(10, 1.0, 1e-5),
            algorithms::epsilon_after_rounds(10, 1.1, 1e-5));
}

TEST(Privacy, BudgetSearchesFindTheEdge) {
  const uint64_t fit = algorithms::max_rounds_within(20.0, 1.0, 1e-5, 1000);
  EXPECT_LE(algorithms::epsilon_after_rounds(fit, 1.0, 1e-5), 20.0);
  EXPECT_GT(algorithms::epsilon_after_rounds(fit + 1, 1.0, 1e-5), 20.0);
  EXPECT_EQ(algorithms::max_rounds_within(20.0, 1.0, 1e-5, 5), 5u);
  EXPECT_EQ(algorithms::max_rounds_within(0.1, 1.0, 1e-5, 5), 0u);
  const double z = algorithms::min_noise_multiplier_within(8.0, 100, 1e-5);
  EXPECT_LE(algorithms::epsilon_after_rounds(100, z, 1e-5), 8.0);
  EXPECT_GT(algorithms::epsilon_after_rounds(100, z * 0.99, 1e-5), 8.0);
}

std::string config_error(const std::string& toml) {
  auto c = parse_experiment_config(toml);
  if (c.ok()) return "OK";
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << "must be one line";
  return c.status().message();
}

TEST(Privacy, ConfigParsesRoundTripsAndRefusesWhatMakesNoSense) {
  const std::string ok =
      "[robust]\nscreen = \"off\"\n[privacy]\nclip_norm = 0.5\nnoise_multiplier = 1.1\n"
      "delta = 1e-6\n";
  auto c = parse_experiment_config(ok);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->privacy.clip_norm, 0.5);
  EXPECT_DOUBLE_EQ(privacy_options(*c).noise_multiplier, 1.1);
  EXPECT_DOUBLE_EQ(c->privacy.delta, 1e-6);
  auto again = parse_experiment_config(to_toml(*c));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(to_toml(*again), to_toml(*c));
  EXPECT_DOUBLE_EQ(again->privacy.noise_multiplier, 1.1);
  // Off by default.
  EXPECT_FALSE(privacy_options(*parse_experiment_config("")).enabled());

  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(config_error("[privacy]\nclip_norm = 0.5\n"), "robust.screen = \"off\""));
  EXPECT_TRUE(has(config_error("[robust]\nscreen = \"off\"\naggregator = \"median\"\n"
                               "[privacy]\nclip_norm = 0.5\n"),
                  "robust.aggregator = \"mean\""));
  EXPECT_TRUE(has(config_error("algorithm = \"hydra\"\n[robust]\nscreen = \"off\"\n"
                               "[privacy]\nclip_norm = 0.5\n"),
                  "hydra"));
  EXPECT_TRUE(has(config_error("[privacy]\nnoise_multiplier = 1.0\n"), "privacy.clip_norm"));
  EXPECT_TRUE(has(config_error("[privacy]\nclip_norm = -1\n"), "privacy.clip_norm"));
  EXPECT_TRUE(has(config_error("[privacy]\ndelta = 1\n"), "privacy.delta"));
  EXPECT_TRUE(has(config_error("[privacy]\nbogus = 1\n"), "bogus"));
}

TEST(Privacy, ConfigOverTheBudgetIsRefusedWithWhatWouldFit) {
  // 10 rounds at z = 1 reach ε ≈ 19.05 at δ = 1e-5.
  const std::string base =
      "[diloco]\nrounds = 10\n[robust]\nscreen = \"off\"\n[privacy]\nclip_norm = 1\n"
      "noise_multiplier = 1\n";
  EXPECT_EQ(config_error(base + "target_epsilon = 20\n"), "OK");
  const std::string msg = config_error(base + "target_epsilon = 10\n");
  EXPECT_NE(msg.find("epsilon = 19.05"), std::string::npos) << msg;
  EXPECT_NE(msg.find("> privacy.target_epsilon = 10"), std::string::npos) << msg;
  const uint64_t fit = algorithms::max_rounds_within(10, 1, 1e-5, 10);
  const double z = algorithms::min_noise_multiplier_within(10, 10, 1e-5);
  EXPECT_NE(msg.find("diloco.rounds <= " + std::to_string(fit)), std::string::npos) << msg;
  // Both suggestions are accepted.
  const std::string with_rounds = "[diloco]\nrounds = " + std::to_string(fit) +
                                  "\n[robust]\nscreen = \"off\"\n[privacy]\nclip_norm = 1\n"
                                  "noise_multiplier = 1\ntarget_epsilon = 10\n";
  EXPECT_EQ(config_error(with_rounds), "OK");
  char z_text[32];
  std::snprintf(z_text, sizeof(z_text), "%.17g", z);
  EXPECT_EQ(config_error("[diloco]\nrounds = 10\n[robust]\nscreen = \"off\"\n[privacy]\n"
                         "clip_norm = 1\ntarget_epsilon = 10\nnoise_multiplier = " +
                         std::string(z_text) + "\n"),
            "OK");
  // Clipping only (z = 0) can never meet a budget, nor can a single round at z = 1 meet ε = 1:
  // the message names only the noise multiplier then (it said "use diloco.rounds <= 0").
  for (const std::string& too_little_noise :
       {std::string("[robust]\nscreen = \"off\"\n[privacy]\nclip_norm = 1\ntarget_epsilon = 10\n"),
        base + "target_epsilon = 1\n"}) {
    const std::string refusal = config_error(too_little_noise);
    EXPECT_NE(refusal.find("; use privacy.noise_multiplier >= "), std::string::npos) << refusal;
    EXPECT_EQ(refusal.find("diloco.rounds <="), std::string::npos) << refusal;
  }
  EXPECT_NE(config_error("[robust]\nscreen = \"off\"\n[privacy]\nclip_norm = 1\n"
                         "target_epsilon = 10\n")
                .find("epsilon = inf"),
            std::string::npos);
}

// A target below the conversion's floor (0.1029 at δ = 1e-5: no noise goes below it) made the
// search for a noise multiplier loop for ever, and the config check with it.
TEST(Privacy, ATargetNoNoiseCanMeetIsRefusedAtOnce) {
  EXPECT_NEAR(algorithms::epsilon_floor(1e-5), 0.1029, 5e-5);
  EXPECT_TRUE(std::isinf(algorithms::min_noise_multiplier_within(0.1, 10, 1e-5)));
  EXPECT_TRUE(std::isfinite(algorithms::min_noise_multiplier_within(0.2, 10, 1e-5)));
  const std::string msg = config_error(
      "[diloco]\nrounds = 10\n[robust]\nscreen = \"off\"\n[privacy]\nclip_norm = 1\n"
      "noise_multiplier = 1\ntarget_epsilon = 0.01\n");
  EXPECT_NE(msg.find("; no noise multiplier reaches it (any noise leaves epsilon >= 0.1029 at "
                     "this delta): raise privacy.target_epsilon or privacy.delta"),
            std::string::npos)
      << msg;
}

// A noise multiplier of 1e39 was taken, and every round's outer step was not finite (each honest
// update dropped in turn); the config has --dp-noise's bound.
TEST(Privacy, NoiseMultiplierAboveTheBoundIsRefused) {
  const std::string msg = config_error(
      "[robust]\nscreen = \"off\"\n[privacy]\nclip_norm = 1\nnoise_multiplier = 1e39\n");
  EXPECT_NE(msg.find("privacy.noise_multiplier = 1e+39 must be in [0, 1e+06]"), std::string::npos)
      << msg;
  EXPECT_EQ(config_error(
                "[robust]\nscreen = \"off\"\n[privacy]\nclip_norm = 1\nnoise_multiplier = 1e6\n"),
            "OK");
}

// ---- The round engine with [privacy] on ----

std::string raw_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

struct PrivateRun {
  std::string theta_fp;
  std::vector<float> theta;
  RoundRecord record;
  ExperimentRecord experiment;  // as stored after the round
};

// One round of `cfg` with three nodes pushing `deltas` (tokens 1000, 2000, 3000) on a fresh
// store; θ and the round record after the commit.
PrivateRun run_private_round(const ExperimentConfig& cfg, const algorithms::ParamSet& init,
                             const std::vector<std::vector<float>>& deltas) {
  PrivateRun out;
  TempDir dir;
  auto store = Store::open(dir.path(), {.keep_params = cfg.diloco.keep_params});
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  if (!store.ok()) return out;
  auto engine = RoundEngine::open(**store, cfg, init, {});
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return out;
  RoundEngine& e = **engine;
  EXPECT_TRUE(e.start().ok());
  const std::vector<std::string> ids = {"site-a", "site-b", "site-c"};
  for (const auto& id : ids) EXPECT_TRUE(e.join(id, pb::JoinRequest{}).ok());
  std::vector<std::future<StatusOr<pb::Task>>> polls;
  for (const auto& id : ids)
    polls.push_back(std::async(std::launch::async, [&e, id] {
      pb::NextTaskRequest req;
      req.set_wait_ms(10000);
      return e.next_task(id, req);
    }));
  for (auto& p : polls) EXPECT_TRUE(p.get().ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    pb::TensorHeader h;
    h.set_wire_version(transport::kWireVersion);
    h.set_experiment_id(e.experiment_id());
    h.set_round(0);
    h.set_codec("none");
    h.set_numel(init.numel());
    h.set_payload_bytes(init.numel() * sizeof(float));
    h.set_layout_fingerprint(algorithms::layout_fingerprint(init.layout()));
    h.set_params_fingerprint(e.params_fingerprint());
    h.set_tokens(1000 * (i + 1));
    h.set_train_loss(2.0);
    EXPECT_TRUE(e.begin_update(ids[i], h).ok());
    auto r = e.finish_update(ids[i], h, raw_bytes(deltas[i]));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
  }
  EXPECT_EQ(e.current_round(), 1u);
  out.theta_fp = e.params_fingerprint();
  out.theta = e.params();
  auto rec = (*store)->load_round(cfg.name, 0);
  EXPECT_TRUE(rec.ok()) << rec.status().to_string();
  if (rec.ok()) out.record = *rec;
  engine->reset();
  auto stored = (*store)->load_experiment(cfg.name);
  EXPECT_TRUE(stored.ok()) << stored.status().to_string();
  if (stored.ok()) out.experiment = *stored;
  // A restarted coordinator reads the same key back: the next rounds' noise goes on as before.
  auto reopened = RoundEngine::open(**store, cfg, init, {});
  EXPECT_TRUE(reopened.ok()) << reopened.status().to_string();
  if (reopened.ok()) {
    EXPECT_EQ((*reopened)->params_fingerprint(), out.theta_fp);
  }
  return out;
}

// Three sites' updates of `numel` values: a's norm (~0.001·√numel) under the clip of
// private_config, b's (~√numel) far over it, c's (~0.03·√numel) over it.
std::vector<std::vector<float>> three_sites_deltas(size_t numel) {
  return {random_vector(numel, 0.001, 1), random_vector(numel, 1.0, 2),
          random_vector(numel, 0.03, 3)};
}

// Two rounds of three sites with [privacy] clip 0.5 and z = 0.8 (the default noise key).
ExperimentConfig private_config(const std::string& name) {
  ExperimentConfig cfg = testing_util::small_config(name, 2, 3);
  cfg.diloco.round_deadline_s = 60;
  cfg.diloco.lost_after_heartbeats = 10;
  cfg.robust.screen = "off";
  cfg.privacy.clip_norm = 0.5;
  cfg.privacy.noise_multiplier = 0.8;
  cfg.privacy.delta = 1e-5;
  return cfg;
}

TEST(Privacy, EngineCommitsClippedUnweightedNoisyMeanTheSameBitsTwice) {
  constexpr size_t kNumel = 3000;
  ExperimentConfig cfg = private_config("dp");
  cfg.privacy.noise_key = "seed";  // the same noise on every run (a simulation's choice)
  ASSERT_TRUE(validate_experiment_config(cfg, "test").ok());
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  // Site b's norm (~55) is far over the clip; a's (~0.055) under it; c's (~1.6) over it.
  const std::vector<std::vector<float>> deltas = three_sites_deltas(kNumel);

  const PrivateRun first = run_private_round(cfg, init, deltas);
  const PrivateRun second = run_private_round(cfg, init, deltas);
  ASSERT_FALSE(first.theta.empty());
  EXPECT_EQ(first.theta_fp, second.theta_fp) << "same config and seed => same bits";
  EXPECT_EQ(first.record.params_fingerprint, second.record.params_fingerprint);

  // The same round computed directly: clip, equal weights, noise of z·C/3, outer step.
  std::vector<std::vector<float>> clipped = deltas;
  for (auto& d : clipped)
    algorithms::clip_to_norm(d, algorithms::l2_norm(d), cfg.privacy.clip_norm);
  std::vector<float> mean(kNumel);
  ASSERT_TRUE(
      algorithms::aggregate_pseudo_gradients(
          {{"site-a", 1, clipped[0]}, {"site-b", 1, clipped[1]}, {"site-c", 1, clipped[2]}}, mean)
          .ok());
  algorithms::add_privacy_noise(mean, 0.8 * 0.5 / 3, cfg.seed, 0, 0);
  std::vector<float> theta = init.vec(), momentum(kNumel);
  const algorithms::OuterNesterov outer(
      {static_cast<float>(cfg.diloco.outer_lr), static_cast<float>(cfg.diloco.outer_momentum)});
  ASSERT_TRUE(outer.step(theta, momentum, mean, /*first_step=*/true).ok());
  EXPECT_EQ(first.theta, theta);

  // Another seed: other noise, other θ.
  ExperimentConfig reseeded = cfg;
  reseeded.seed = cfg.seed + 1;
  EXPECT_NE(run_private_round(reseeded, init, deltas).theta_fp, first.theta_fp);

  // The record: ε after one round, and no site's norm (private data).
  EXPECT_NEAR(first.record.privacy_epsilon, algorithms::epsilon_after_rounds(1, 0.8, 1e-5), 1e-12);
  EXPECT_EQ(first.record.median_norm, 0.0);
  ASSERT_EQ(first.record.participants.size(), 3u);
  for (const ParticipantRecord& p : first.record.participants) {
    EXPECT_TRUE(p.pushed);
    EXPECT_EQ(p.norm, 0.0) << p.node_id;
    EXPECT_EQ(p.screen, "") << p.node_id;
  }
  EXPECT_EQ(first.experiment.privacy_noise_key, 0u);  // "seed": none kept
}

// The noise was keyed by the experiment seed only, which viewers read in the config and every
// checkpoint carries: anyone could compute it and take it off θ (to 1.2e-7). By default the key
// is drawn at random when the experiment is created and kept in the store alone.
TEST(Privacy, TheDefaultNoiseKeyIsSecretKeptInTheStoreAndNotTheSeed) {
  constexpr size_t kNumel = 3000;
  const ExperimentConfig cfg = private_config("dp-secret");
  ASSERT_EQ(cfg.privacy.noise_key, "secret");
  ASSERT_TRUE(validate_experiment_config(cfg, "test").ok());
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  const std::vector<std::vector<float>> deltas = three_sites_deltas(kNumel);
  const PrivateRun a = run_private_round(cfg, init, deltas);
  const PrivateRun b = run_private_round(cfg, init, deltas);
  ASSERT_FALSE(a.theta.empty());
  EXPECT_NE(a.experiment.privacy_noise_key, 0u);
  EXPECT_NE(a.experiment.privacy_noise_key, b.experiment.privacy_noise_key);
  EXPECT_NE(a.theta_fp, b.theta_fp) << "two experiments with the same seed drew the same noise";
  ExperimentConfig seeded = cfg;
  seeded.privacy.noise_key = "seed";
  EXPECT_NE(run_private_round(seeded, init, deltas).theta_fp, a.theta_fp);
  // The key is nowhere a viewer or a checkpoint's holder sees it: not in the config text nor in
  // the API's view of the experiment.
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(a.experiment.privacy_noise_key));
  EXPECT_EQ(a.experiment.config_toml.find(hex), std::string::npos);
  EXPECT_NE(a.experiment.config_toml.find("noise_key = \"secret\""), std::string::npos);
  ExperimentSummary summary;
  summary.record = a.experiment;
  EXPECT_EQ(boost::json::serialize(to_json(summary)).find(hex), std::string::npos);
  // A bad value is refused with what it may be.
  ExperimentConfig bad = cfg;
  bad.privacy.noise_key = "public";
  const Status refused = validate_experiment_config(bad, "test");
  EXPECT_NE(refused.message().find("privacy.noise_key"), std::string::npos) << refused.to_string();
}

}  // namespace
}  // namespace atl::coordinator
