// Reconnecting to a coordinator that does not answer (node/reconnect.h): the backoff's delays,
// the give-up deadline on one clock per outage, a stop request, and a link that comes up early.
#include "node/reconnect.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/node/node_test_util.h"

namespace atl::node {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace pb = atoll_pb::v1;
using testing::UnreachableCalls;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(Backoff, GrowsWithJitterUpToTheCapAndResets) {
  Backoff b(BackoffOptions{}, 7);
  // 100, 200, 400, 800 ms ± 20%, then the 1 s cap (jitter below it only).
  const std::vector<std::pair<int, int>> bounds = {{80, 120},   {160, 240},  {320, 480}, {640, 960},
                                                   {800, 1000}, {800, 1000}, {800, 1000}};
  std::vector<int64_t> seen;
  for (const auto& [lo, hi] : bounds) {
    const int64_t d = b.next().count();
    seen.push_back(d);
    EXPECT_GE(d, lo);
    EXPECT_LE(d, hi);
  }
  // Jittered: the capped delays are not all equal.
  EXPECT_FALSE(seen[4] == seen[5] && seen[5] == seen[6]);
  b.reset();
  const int64_t first = b.next().count();
  EXPECT_GE(first, 80);
  EXPECT_LE(first, 120);
  // Two nodes cut off together do not retry in lockstep.
  Backoff other(BackoffOptions{}, 8);
  Backoff same(BackoffOptions{}, 7);
  EXPECT_NE(other.next(), same.next());
}

ReconnectOptions options(double give_up_s, std::vector<std::string>* lines,
                         const std::atomic<bool>* stop = nullptr) {
  ReconnectOptions o;
  o.coordinator = "test:1";
  o.give_up_after_s = give_up_s;
  o.stop = stop;
  o.log = [lines](const std::string& l) { lines->push_back(l); };
  return o;
}

// Gives up at the configured time, counted from the outage's first failure, and says how long it
// has actually been unreachable.
TEST(Reconnect, GivesUpAtTheConfiguredTimeNamingTheActualOutage) {
  CoordinatorClient link(std::make_unique<UnreachableCalls>());
  std::vector<std::string> lines;
  Reconnect r(link, options(0.8, &lines));
  const auto t0 = Clock::now();
  Status st;
  int attempts = 0;
  while ((st = r.pause(Unavailable("coordinator at test:1 not reachable (test)"))).ok()) ++attempts;
  const double took = seconds_since(t0);
  EXPECT_GE(took, 0.8);
  EXPECT_LT(took, 1.5);  // not a whole further delay, nor a second deadline
  EXPECT_GE(attempts, 3);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(std::regex_search(st.message(), std::regex("^coordinator unreachable for [0-9.]+ s")))
      << st.message();
  EXPECT_NE(st.message().find("(--give-up-after 0.8 s), giving up; last failure: coordinator at "
                              "test:1 not reachable (test)"),
            std::string::npos)
      << st.message();
  // One line for the outage (the failure did not change), saying when the next attempt is.
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("coordinator at test:1 not reachable (test); retrying in 0.1 s", 0), 0u)
      << lines[0];
}

// A coordinator that answers with a refusal (its max_nodes are there) is not called unreachable.
TEST(Reconnect, ARefusalIsNamedAsOneNotAsAnOutage) {
  CoordinatorClient link(std::make_unique<UnreachableCalls>());
  std::vector<std::string> lines;
  Reconnect r(link, options(0.8, &lines));
  const Status refused =
      OutOfRange("refused Join: experiment 'e' already has diloco.max_nodes = 2 nodes");
  Status st;
  while ((st = r.pause(refused)).ok()) {
  }
  EXPECT_TRUE(std::regex_search(st.message(), std::regex("^coordinator refused for [0-9.]+ s")))
      << st.message();
  for (const std::string& line : lines)
    EXPECT_EQ(line.find("unreachable"), std::string::npos) << line;
}

TEST(Reconnect, ReachedEndsTheOutageAndResetsTheBackoff) {
  CoordinatorClient link(std::make_unique<UnreachableCalls>());
  std::vector<std::string> lines;
  Reconnect r(link, options(60, &lines));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(r.pause(Unavailable("down")).ok());
  EXPECT_TRUE(r.unreachable());
  EXPECT_GT(r.unreachable_s(), 0.3);
  r.reached();
  EXPECT_FALSE(r.unreachable());
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(std::regex_search(lines.back(),
                                std::regex("^coordinator at test:1 reachable after [0-9.]+ s$")))
      << lines.back();
  // The next outage starts again from the first delay (about 0.1 s).
  const auto t0 = Clock::now();
  ASSERT_TRUE(r.pause(Unavailable("down")).ok());
  EXPECT_LT(seconds_since(t0), 0.3);
}

// A stop request ends a pause within about 0.1 s, returning the failure.
TEST(Reconnect, StopRequestEndsThePausePromptly) {
  CoordinatorClient link(std::make_unique<UnreachableCalls>());
  std::vector<std::string> lines;
  std::atomic<bool> stop{false};
  ReconnectOptions o = options(60, &lines, &stop);
  o.backoff.initial = milliseconds(5000);
  o.backoff.max = milliseconds(5000);
  Reconnect r(link, o);
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(200));
    stop = true;
  });
  const auto t0 = Clock::now();
  const Status st = r.pause(Unavailable("down"));
  stopper.join();
  EXPECT_EQ(st.message(), "down");
  EXPECT_LT(seconds_since(t0), 1.0);
}

// The pause ends as soon as the link comes up, not at the end of the delay.
TEST(Reconnect, LinkComingUpEndsThePause) {
  CoordinatorClient link(std::make_unique<UnreachableCalls>(milliseconds(300)));
  std::vector<std::string> lines;
  ReconnectOptions o = options(60, &lines);
  o.backoff.initial = milliseconds(5000);
  o.backoff.max = milliseconds(5000);
  Reconnect r(link, o);
  const auto t0 = Clock::now();
  ASSERT_TRUE(r.pause(Unavailable("down")).ok());
  const double took = seconds_since(t0);
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 1.5);
}

}  // namespace
}  // namespace atl::node
