// The node's metrics reports (node/metrics_reporter.h) against a round engine, through a link
// whose ReportMetrics answers only when the test says so: a coordinator behind a slow link.
#include "node/metrics_reporter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "coordinator/test_util.h"
#include "node/coordinator_client.h"
#include "node/forwarding_calls.h"
#include "node/heartbeater.h"
#include "simulate/engine_fixture.h"
#include "simulate/in_process_calls.h"

namespace atl::node {
namespace {

namespace pb = atoll_pb::v1;
using namespace std::chrono_literals;

// ReportMetrics waits at a gate the test opens (for at most 20 s); every call is recorded in the
// order it was made ("heartbeat", or the report's step).
class GatedReports final : public ForwardingCalls {
 public:
  using ForwardingCalls::ForwardingCalls;

  Status report_metrics(const pb::MetricsReport& req, pb::MetricsAck* ack) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      ++entered_;
      cv_.notify_all();
      cv_.wait_for(l, 20s, [this] { return open_; });
      calls_.push_back(std::to_string(req.step()));
    }
    if (delay_ > 0ms) std::this_thread::sleep_for(delay_);
    return ForwardingCalls::report_metrics(req, ack);
  }
  Status heartbeat(const pb::HeartbeatRequest& req, pb::HeartbeatResponse* resp) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      calls_.push_back("heartbeat");
    }
    return ForwardingCalls::heartbeat(req, resp);
  }

  void open(std::chrono::milliseconds delay_each = 0ms) {
    std::lock_guard<std::mutex> l(mu_);
    delay_ = delay_each;
    open_ = true;
    cv_.notify_all();
  }
  bool wait_entered(int n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, 20s, [&] { return entered_ >= n; });
  }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int entered_ = 0;
  std::chrono::milliseconds delay_{0};
  std::vector<std::string> calls_;
};

struct JoinedSite {
  testing_util::EngineOnDisk on_disk{testing_util::small_config("beats", 2, 1),
                                     testing_util::toy_params(64)};
  GatedReports* gate = nullptr;  // owned by link
  std::unique_ptr<CoordinatorClient> link;  // declared last: goes before the engine

  JoinedSite() {
    if (!on_disk.engine) return;
    auto calls = std::make_unique<GatedReports>(
        std::make_unique<simulate::InProcessCalls>(*on_disk.engine, "site-a"));
    gate = calls.get();
    link = std::make_unique<CoordinatorClient>(std::move(calls));
    auto joined = link->join();
    EXPECT_TRUE(joined.ok()) << joined.status().to_string();
  }
};

std::vector<std::pair<std::string, double>> loss(double v) { return {{"loss", v}}; }

// report() returns while the coordinator has not answered; flush() waits for every report, and
// they arrive in order.
TEST(MetricsReporter, ReportsDoNotWaitForTheCoordinatorAndArriveInOrder) {
  JoinedSite site;
  ASSERT_NE(site.link, nullptr);
  MetricsReporter reports(*site.link);
  reports.report(0, 1, loss(3.0));
  ASSERT_TRUE(site.gate->wait_entered(1));
  reports.report(0, 2, loss(2.5));
  reports.report(0, 3, loss(2.0));
  EXPECT_TRUE(site.gate->calls().empty());  // nothing answered yet, and this thread went on
  EXPECT_FALSE(reports.flush(50ms));         // step 1 is still at the gate
  site.gate->open();
  EXPECT_TRUE(reports.flush(20s));
  EXPECT_EQ(site.gate->calls(), (std::vector<std::string>{"1", "2", "3"}));

  auto stored = site.on_disk.store->list_metrics(site.on_disk.engine->experiment_id(), "site-a");
  ASSERT_TRUE(stored.ok()) << stored.status().to_string();
  ASSERT_EQ(stored->size(), 3u);
  std::vector<uint64_t> steps;
  for (const auto& json : *stored)
    steps.push_back(boost::json::parse(json).as_object().at("step").to_number<uint64_t>());
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(reports.dropped(), 0u);
}

// A coordinator out of reach for long: at most kMaxQueued reports wait, the oldest are dropped
// and counted.
TEST(MetricsReporter, AFullQueueDropsTheOldestReports) {
  JoinedSite site;
  ASSERT_NE(site.link, nullptr);
  MetricsReporter reports(*site.link);
  reports.report(0, 1, loss(1.0));
  ASSERT_TRUE(site.gate->wait_entered(1));  // step 1 is in flight, no longer queued
  const uint64_t extra = 5, last = 1 + MetricsReporter::kMaxQueued + extra;
  for (uint64_t step = 2; step <= last; ++step) reports.report(0, step, loss(1.0));
  EXPECT_EQ(reports.dropped(), extra);
  site.gate->open();
  EXPECT_TRUE(reports.flush(20s));
  std::vector<std::string> want = {"1"};
  for (uint64_t step = 2 + extra; step <= last; ++step) want.push_back(std::to_string(step));
  EXPECT_EQ(site.gate->calls(), want);
}

// A report the coordinator does not answer holds no heartbeat back: they leave from threads of
// their own.
TEST(MetricsReporter, HeartbeatsGoOnWhileAReportWaits) {
  JoinedSite site;
  ASSERT_NE(site.link, nullptr);
  Heartbeater beats(*site.link, 100ms);
  MetricsReporter reports(*site.link);
  reports.report(0, 1, loss(1.0));
  ASSERT_TRUE(site.gate->wait_entered(1));
  std::this_thread::sleep_for(600ms);
  const std::vector<std::string> during = site.gate->calls();  // all heartbeats: 1 is at the gate
  EXPECT_GE(std::count(during.begin(), during.end(), "heartbeat"), 2)
      << ::testing::PrintToString(during);
  site.gate->open();
  EXPECT_TRUE(reports.flush(20s));
}

}  // namespace
}  // namespace atl::node
