// The coordinator's metrics (coordinator/coordinator_metrics.h) fed by a real service: a real
// gRPC server and RocksDB store, one in-process node pushing refused and accepted updates, and
// the `GET /metrics` route of the dashboard's API with its tokens; and the names against
// docs/dashboard.md and the Grafana dashboard.
#include "coordinator/coordinator_metrics.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "coordinator/experiment_manager.h"
#include "coordinator/http/api.h"
#include "coordinator/http/auth.h"
#include "node/site_metrics.h"
#include "service_harness.h"
#include "transport/metrics/registry.h"

namespace atl::coordinator {
namespace {

using namespace std::chrono_literals;
using testing::Coordinator;
using testing_util::TempDir;
namespace tm = transport::metrics;

constexpr size_t kNumel = 1000;

// The value of `sample` ("name" or "name{labels}", as rendered) in the text; NaN when absent.
double sample_value(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(text.substr(at + sample.size() + 2));
}

// Waits (with a deadline) until `sample` reaches `want`: events arrive on the engine's event
// thread, after the calls that caused them have returned.
double wait_for_sample(const CoordinatorMetrics& m, const std::string& sample, double want) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  double v = sample_value(m.render(), sample);
  while (v != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    v = sample_value(m.render(), sample);
  }
  return v;
}

TEST(CoordinatorMetrics, CountsRejectionsByReasonBytesPushesAndTheCommittedRound) {
  TempDir dir;
  CoordinatorMetrics metrics(nullptr);
  ServiceOptions so;
  so.metrics = &metrics;
  so.on_event = [&metrics](const Event& e) { metrics.observe("metrics", e); };
  const auto cfg = testing::small_config("metrics", 1, 1);
  const algorithms::ParamSet init = testing_util::toy_params(kNumel);
  auto c = Coordinator::start(dir.path(), cfg, init, so);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->service->start().ok());
  node::CoordinatorClient a(testing::insecure_client(c->address(), "node-0"));
  ASSERT_TRUE(a.join().ok());
  auto task = a.next_task(0, 5000);
  ASSERT_TRUE(task.ok()) << task.status().to_string();
  ASSERT_EQ(task->kind(), atoll_pb::v1::Task::TRAIN);
  auto theta = a.pull_params(0);
  ASSERT_TRUE(theta.ok()) << theta.status().to_string();
  const std::vector<float> good = testing::fake_delta(theta->values, 0);
  const std::string layout_fp = algorithms::layout_fingerprint(init.layout());
  node::UpdateHeader h{0, 1000, 2.0, theta->fingerprint, layout_fp};

  // Refused at the header: wrong shape (one element short), wrong base, a future round, zero
  // tokens. Refused after the payload arrived: NaN. Then accepted, then a replay.
  std::vector<float> short_delta(good.begin(), good.end() - 1);
  EXPECT_FALSE(a.push_update(h, short_delta).ok());
  node::UpdateHeader wrong_base = h;
  wrong_base.base_fingerprint = std::string(64, 'b');
  EXPECT_FALSE(a.push_update(wrong_base, good).ok());
  node::UpdateHeader future = h;
  future.round = 7;
  EXPECT_FALSE(a.push_update(future, good).ok());
  node::UpdateHeader no_tokens = h;
  no_tokens.tokens = 0;
  EXPECT_FALSE(a.push_update(no_tokens, good).ok());
  std::vector<float> nan_delta = good;
  nan_delta[17] = std::nanf("");
  EXPECT_FALSE(a.push_update(h, nan_delta).ok());
  ASSERT_TRUE(a.push_update(h, good).ok());
  EXPECT_FALSE(a.push_update(h, good).ok());  // the round is committed: stale now

  const std::string rejected = "atoll_updates_rejected_total{reason=\"";
  EXPECT_EQ(wait_for_sample(metrics, "atoll_rounds_committed_total", 1), 1);
  EXPECT_EQ(wait_for_sample(metrics, rejected + "stale_round\"}", 2), 2);
  const std::string text = metrics.render();
  EXPECT_EQ(sample_value(text, rejected + "wrong_shape\"}"), 1) << text;
  EXPECT_EQ(sample_value(text, rejected + "wrong_base\"}"), 1) << text;
  EXPECT_EQ(sample_value(text, rejected + "bad_header\"}"), 1) << text;
  EXPECT_EQ(sample_value(text, rejected + "not_finite\"}"), 1) << text;
  EXPECT_EQ(sample_value(text, rejected + "duplicate\"}"), 0) << text;
  EXPECT_EQ(sample_value(text, rejected + "transfer\"}"), 0) << text;
  EXPECT_EQ(sample_value(text, "atoll_updates_accepted_total"), 1) << text;
  // Bytes as they cross: θ once down; up, the NaN payload (refused after it arrived) and the
  // accepted one; payloads refused at the header never crossed.
  EXPECT_EQ(sample_value(text, "atoll_bytes_total{direction=\"down\"}"), kNumel * 4) << text;
  EXPECT_EQ(sample_value(text, "atoll_bytes_total{direction=\"up\"}"), 2 * kNumel * 4) << text;
  EXPECT_EQ(sample_value(text, "atoll_push_duration_seconds_count"), 1) << text;
  EXPECT_EQ(sample_value(text, "atoll_round_duration_seconds_count"), 1) << text;
  EXPECT_EQ(sample_value(text, "atoll_round_duration_seconds_bucket{le=\"+Inf\"}"), 1) << text;
  EXPECT_EQ(sample_value(text, "atoll_tokens_total"), 1000) << text;
  EXPECT_EQ(sample_value(text, "atoll_current_round"), 1) << text;  // no manager: from events
  EXPECT_DOUBLE_EQ(sample_value(text, "atoll_train_loss"), 2.0) << text;
  EXPECT_GT(sample_value(text, "process_resident_memory_bytes"), 1 << 20) << text;
  // Not evaluated: no bpb series at all (rather than a misleading 0).
  EXPECT_EQ(text.find("atoll_validation_bits_per_byte"), std::string::npos) << text;
  metrics.set_validation_bpb("metrics", 4.5);
  EXPECT_EQ(sample_value(metrics.render(), "atoll_validation_bits_per_byte"), 4.5);
}

// The live experiment's gauges, read through the manager at each scrape, and the dashboard
// route: a viewer or admin token reads, no token or an unknown one does not.
TEST(CoordinatorMetrics, LiveGaugesAndTheDashboardRouteWithTokens) {
  TempDir dir;
  auto store = Store::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ExperimentManager manager(**store);
  CoordinatorMetrics metrics(&manager);
  // Nothing live yet: no info series.
  EXPECT_EQ(metrics.render().find("atoll_experiment_info{"), std::string::npos);
  const auto cfg = testing::small_config("live-one", 2, 1);
  auto svc = CoordinatorService::open(**store, cfg, testing_util::toy_params(kNumel), {});
  ASSERT_TRUE(svc.ok()) << svc.status().to_string();
  std::shared_ptr<CoordinatorService> live = std::move(*svc);
  manager.attach(live);
  ASSERT_TRUE(live->engine().join("node-a", {}).ok());
  ASSERT_TRUE(live->engine().join("node-b", {}).ok());
  ASSERT_TRUE(live->engine().leave("node-b", {}).ok());
  const std::string text = metrics.render();
  EXPECT_EQ(
      sample_value(text, "atoll_experiment_info{experiment=\"live-one\",algorithm=\"diloco\"}"), 1)
      << text;
  EXPECT_EQ(sample_value(text, "atoll_nodes{state=\"active\"}"), 1) << text;
  EXPECT_EQ(sample_value(text, "atoll_nodes{state=\"left\"}"), 1) << text;
  EXPECT_EQ(sample_value(text, "atoll_nodes{state=\"lost\"}"), 0) << text;
  EXPECT_EQ(sample_value(text, "atoll_current_round"), 0) << text;

  http::Api api(manager, **store, {}, [&metrics] { return metrics.render(); });
  auto viewer = http::create_token(**store, http::Role::kViewer, "scraper");
  auto admin = http::create_token(**store, http::Role::kAdmin, "ops");
  ASSERT_TRUE(viewer.ok() && admin.ok());
  auto get = [&](const std::string& token, const std::string& method = "GET") {
    http::Request r;
    r.method = method;
    r.target = "/metrics";
    if (!token.empty()) r.authorization = "Bearer " + token;
    return api.handle(r);
  };
  const http::Response ok = get(*viewer);
  EXPECT_EQ(ok.status, 200u) << ok.body;
  EXPECT_EQ(ok.content_type, tm::kContentType);
  EXPECT_NE(ok.body.find("# TYPE atoll_rounds_committed_total counter\n"), std::string::npos);
  EXPECT_EQ(get(*admin).status, 200u);
  const http::Response anonymous = get("");
  EXPECT_EQ(anonymous.status, 401u);
  bool challenges = false;
  for (const auto& [k, v] : anonymous.headers) challenges |= k == "WWW-Authenticate";
  EXPECT_TRUE(challenges);
  EXPECT_EQ(get("atl_" + std::string(64, '0')).status, 401u);
  EXPECT_EQ(get(*viewer, "POST").status, 405u);
  // A server without metrics says so.
  http::Api bare(manager, **store, {});
  http::Request r;
  r.method = "GET";
  r.target = "/metrics";
  r.authorization = "Bearer " + *viewer;
  EXPECT_EQ(bare.handle(r).status, 404u);
  manager.attach(nullptr);
}

// The gauges that describe one experiment are the live experiment's: after the dashboard
// switches the live experiment, none of the previous one's values is paired with the new one
// (atoll_experiment_info); each is absent until the new experiment sets it.
TEST(CoordinatorMetrics, ExperimentGaugesFollowTheLiveExperiment) {
  TempDir dir;
  auto store = Store::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ExperimentManager manager(**store);
  CoordinatorMetrics metrics(&manager);
  auto open = [&](const std::string& id) {
    auto svc = CoordinatorService::open(**store, testing::small_config(id, 1, 1),
                                        testing_util::toy_params(kNumel), {});
    EXPECT_TRUE(svc.ok()) << svc.status().to_string();
    return std::shared_ptr<CoordinatorService>(std::move(*svc));
  };
  auto committed = [](double loss, double epsilon) {
    Event e{Event::Kind::kRoundCommitted};
    e.record = RoundRecord{};
    e.record->mean_loss = loss;
    e.record->privacy_epsilon = epsilon;
    return e;
  };
  const char* kGauges[] = {"atoll_train_loss", "atoll_validation_bits_per_byte",
                           "atoll_privacy_epsilon"};
  manager.attach(open("first"));
  std::string text = metrics.render();
  for (const char* g : kGauges) EXPECT_EQ(text.find(g), std::string::npos) << g << "\n" << text;
  metrics.observe("first", committed(3.25, 1.5));
  metrics.set_validation_bpb("first", 4.5);
  text = metrics.render();
  EXPECT_EQ(sample_value(text, "atoll_train_loss"), 3.25) << text;
  EXPECT_EQ(sample_value(text, "atoll_validation_bits_per_byte"), 4.5) << text;
  EXPECT_EQ(sample_value(text, "atoll_privacy_epsilon"), 1.5) << text;

  // The live experiment changes: the first one's values are gone.
  manager.attach(open("second"));
  text = metrics.render();
  EXPECT_EQ(sample_value(text, "atoll_experiment_info{experiment=\"second\",algorithm=\"diloco\"}"),
            1)
      << text;
  for (const char* g : kGauges) EXPECT_EQ(text.find(g), std::string::npos) << g << "\n" << text;
  // The second one commits a round without [privacy] (ε = -1: none) and is evaluated.
  metrics.observe("second", committed(2.0, -1.0));
  metrics.set_validation_bpb("second", 3.0);
  text = metrics.render();
  EXPECT_EQ(sample_value(text, "atoll_train_loss"), 2.0) << text;
  EXPECT_EQ(sample_value(text, "atoll_validation_bits_per_byte"), 3.0) << text;
  EXPECT_EQ(text.find("atoll_privacy_epsilon"), std::string::npos) << text;
  // A late value of an experiment that is not live is not shown either.
  metrics.observe("first", committed(9.0, 9.0));
  EXPECT_EQ(sample_value(metrics.render(), "atoll_train_loss"), 2.0);
  manager.attach(nullptr);
  text = metrics.render();
  for (const char* g : kGauges) EXPECT_EQ(text.find(g), std::string::npos) << g << "\n" << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The families of a rendered text, from its TYPE lines: name → type.
std::map<std::string, std::string> families_of(const std::string& text) {
  std::map<std::string, std::string> out;
  const std::regex re("# TYPE (\\S+) (\\S+)\n");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    out[(*it)[1].str()] = (*it)[2].str();
  return out;
}

// Updates screened at the commit are counted by action and check, a replay under its own reason.
TEST(CoordinatorMetrics, CountsScreenedUpdatesByReason) {
  CoordinatorMetrics metrics(nullptr);
  const std::string replay = "atoll_updates_screened_total{action=\"dropped\",reason=\"replay\"}";
  const std::string norm = "atoll_updates_screened_total{action=\"dropped\",reason=\"norm\"}";
  const std::string stale = "atoll_updates_screened_total{action=\"dropped\",reason=\"stale\"}";
  EXPECT_EQ(sample_value(metrics.render(), replay), 0.0);  // at 0 from the start
  EXPECT_EQ(sample_value(metrics.render(), stale), 0.0);
  Event e{Event::Kind::kRoundCommitted};
  e.record = RoundRecord{};
  for (const auto& [id, screen, reason] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"node-1", "kept", ""}, {"node-2", "dropped", "replay"}, {"node-3", "dropped", "norm"},
           {"node-4", "dropped", "stale"}})
    e.record->participants.push_back(
        {.node_id = id, .pushed = true, .screen = screen, .screen_reason = reason});
  metrics.observe("screened", e);
  metrics.observe("screened", e);
  EXPECT_EQ(sample_value(metrics.render(), replay), 2.0);
  EXPECT_EQ(sample_value(metrics.render(), norm), 2.0);
  EXPECT_EQ(sample_value(metrics.render(), stale), 2.0);
}

// Every metric the coordinator and a node export is listed in docs/dashboard.md ("Metrics and
// logs"), and nothing else is; every metric the Grafana dashboard queries is exported.
// Listening ports and the bulk lane keep their own counts; each scrape reads them: the gauge
// takes the value of the moment, the counters follow the counts without counting any twice.
TEST(CoordinatorMetrics, PortsAndTheBulkLaneAreReadAtEachScrape) {
  CoordinatorMetrics metrics(nullptr);
  size_t open = 3;
  uint64_t refused = 0, evicted = 0, pulls = 0, pushes = 0;
  metrics.watch_port("grpc", [&] { return open; }, [&] { return refused; });
  metrics.watch_port("dashboard", [&] { return open + 1; }, [&] { return refused * 2; },
                     [&] { return evicted; });
  metrics.watch_bulk_lane([&] { return pulls; }, [&] { return pushes; });
  std::string text = metrics.render();
  EXPECT_EQ(sample_value(text, "atoll_connections{port=\"grpc\"}"), 3.0);
  EXPECT_EQ(sample_value(text, "atoll_connections{port=\"dashboard\"}"), 4.0);
  EXPECT_EQ(sample_value(text, "atoll_connections_refused_total{port=\"grpc\"}"), 0.0);
  EXPECT_EQ(sample_value(text, "atoll_connections_evicted_total{port=\"dashboard\"}"), 0.0);
  // Only a port that evicts has the series.
  EXPECT_TRUE(std::isnan(sample_value(text, "atoll_connections_evicted_total{port=\"grpc\"}")));
  EXPECT_EQ(sample_value(text, "atoll_bulk_lane_transfers_total{direction=\"down\"}"), 0.0);
  open = 1;
  refused = 5;
  evicted = 2;
  pulls = 7;
  pushes = 4;
  for (int scrape = 0; scrape < 3; ++scrape) {
    text = metrics.render();
    EXPECT_EQ(sample_value(text, "atoll_connections{port=\"grpc\"}"), 1.0);
    EXPECT_EQ(sample_value(text, "atoll_connections_refused_total{port=\"grpc\"}"), 5.0);
    EXPECT_EQ(sample_value(text, "atoll_connections_refused_total{port=\"dashboard\"}"), 10.0);
    EXPECT_EQ(sample_value(text, "atoll_connections_evicted_total{port=\"dashboard\"}"), 2.0);
    EXPECT_EQ(sample_value(text, "atoll_bulk_lane_transfers_total{direction=\"down\"}"), 7.0);
    EXPECT_EQ(sample_value(text, "atoll_bulk_lane_transfers_total{direction=\"up\"}"), 4.0);
  }
}

// A coordinator started again on a store with committed rounds shows the last one's train loss
// and ε from its first scrape (they were absent until the next commit).
TEST(CoordinatorMetrics, ARestartedCoordinatorShowsTheLastCommittedRoundsFigures) {
  TempDir dir;
  auto store = Store::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  const ExperimentConfig cfg = testing::small_config("again", 3, 1);
  {
    auto first = CoordinatorService::open(**store, cfg, testing_util::toy_params(kNumel), {});
    ASSERT_TRUE(first.ok()) << first.status().to_string();
  }
  auto e = (*store)->load_experiment("again");
  ASSERT_TRUE(e.ok());
  RoundRecord round;
  round.mean_loss = 2.75;
  round.privacy_epsilon = 3.25;
  e->current_round = 1;
  std::vector<float> theta(kNumel, 0.5f), momentum(kNumel, 0.0f);
  e->params_fingerprint = round.params_fingerprint = algorithms::params_fingerprint(theta);
  round.momentum_fingerprint = algorithms::params_fingerprint(momentum);
  ASSERT_TRUE((*store)->commit_round(*e, round, theta, momentum).ok());

  ExperimentManager manager(**store);
  CoordinatorMetrics metrics(&manager);
  auto svc = CoordinatorService::open(**store, cfg, testing_util::toy_params(kNumel), {});
  ASSERT_TRUE(svc.ok()) << svc.status().to_string();
  manager.attach(std::shared_ptr<CoordinatorService>(std::move(*svc)));
  const std::string text = metrics.render();
  EXPECT_EQ(sample_value(text, "atoll_privacy_epsilon"), 3.25) << text;
  EXPECT_EQ(sample_value(text, "atoll_train_loss"), 2.75) << text;
  EXPECT_EQ(sample_value(text, "atoll_current_round"), 1.0) << text;
  manager.attach(nullptr);
}

TEST(CoordinatorMetrics, NamesMatchTheDocsAndTheGrafanaDashboard) {
  TempDir dir;
  auto store = Store::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ExperimentManager manager(**store);
  CoordinatorMetrics metrics(&manager);
  auto svc = CoordinatorService::open(**store, testing::small_config("names", 1, 1),
                                      testing_util::toy_params(kNumel), {});
  ASSERT_TRUE(svc.ok()) << svc.status().to_string();
  manager.attach(std::shared_ptr<CoordinatorService>(std::move(*svc)));
  metrics.set_validation_bpb("names", 1.0);  // registered at the first evaluation
  // Registered by the listeners the coordinator starts (the dashboard's port evicts).
  metrics.watch_port("dashboard", [] { return size_t{0}; }, [] { return uint64_t{0}; },
                     [] { return uint64_t{0}; });
  metrics.watch_bulk_lane([] { return uint64_t{0}; }, [] { return uint64_t{0}; });
  Event private_round{Event::Kind::kRoundCommitted};
  private_round.record = RoundRecord{};
  private_round.record->privacy_epsilon = 2.5;  // registered by a round with [privacy] on
  metrics.observe("names", private_round);
  EXPECT_EQ(sample_value(metrics.render(), "atoll_privacy_epsilon"), 2.5);
  node::SiteMetrics site;
  site.joined("names", "node-a");
  site.round_done(1.0, 2.0);  // the site bpb: registered with its first value
  std::map<std::string, std::string> exported = families_of(metrics.render());
  for (const auto& [name, type] : families_of(site.render())) exported[name] = type;
  manager.attach(nullptr);

  const std::string docs = read_file(std::string(ATOLL_SOURCE_DIR) + "/docs/dashboard.md");
  const size_t from = docs.find("## Metrics and logs");
  const size_t to = docs.find("### JSON logs", from);
  ASSERT_TRUE(from != std::string::npos && to != std::string::npos);
  const std::string section = docs.substr(from, to - from);
  std::map<std::string, std::string> documented;
  const std::regex row("\n\\| `([a-z_:]+)(\\{[a-z_,]*\\})?` \\| (counter|gauge|histogram)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row);
       it != std::sregex_iterator(); ++it)
    documented[(*it)[1].str()] = (*it)[3].str();
  EXPECT_EQ(documented, exported);

  const std::string dashboard =
      read_file(std::string(ATOLL_SOURCE_DIR) + "/deploy/grafana/atoll.json");
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(dashboard, ec);
  ASSERT_FALSE(ec) << "deploy/grafana/atoll.json is not JSON: " << ec.message();
  std::set<std::string> queried;
  const std::regex name("\\b(atoll_[a-z_]+|process_[a-z_]+)");
  for (const auto& panel : v.as_object().at("panels").as_array()) {
    if (!panel.as_object().contains("targets")) continue;
    for (const auto& target : panel.as_object().at("targets").as_array()) {
      const std::string expr(target.as_object().at("expr").as_string());
      // Every Atoll series is filtered by the dashboard's Job variable (deployments sharing one
      // Prometheus); it filtered the memory panel only.
      EXPECT_FALSE(
          std::regex_search(expr, std::regex("\\batoll_[a-z_]+(?![a-z_]|\\{job=~\"\\$job\")")))
          << expr;
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), name);
           it != std::sregex_iterator(); ++it) {
        std::string n = (*it)[1].str();
        for (const char* suffix : {"_bucket", "_sum", "_count"}) {
          const std::string s(suffix);
          const std::string base = n.size() > s.size() ? n.substr(0, n.size() - s.size()) : "";
          if (n.ends_with(s) && exported.count(base) && exported.at(base) == "histogram") n = base;
        }
        queried.insert(n);
      }
    }
  }
  EXPECT_GE(queried.size(), 10u);
  for (const auto& n : queried) EXPECT_TRUE(exported.count(n)) << n << " is queried, not exported";
}

}  // namespace
}  // namespace atl::coordinator
