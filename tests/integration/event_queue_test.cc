// cli/event_queue.h: commit events keep their θ for the newest kHeldSnapshots of them only.
#include "cli/event_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace atl::cli {
namespace {

coordinator::Event commit_event(uint64_t round, std::shared_ptr<const std::vector<float>> theta) {
  coordinator::Event e{coordinator::Event::Kind::kRoundCommitted};
  e.round = round;
  e.params = std::move(theta);
  return e;
}

TEST(EventQueue, AListenerThatFallsBehindKeepsTheNewestSnapshotsOnly) {
  EventQueue q;
  std::vector<std::weak_ptr<const std::vector<float>>> thetas;
  const int pushed = EventQueue::kHeldSnapshots + 3;
  for (int r = 0; r < pushed; ++r) {
    auto theta = std::make_shared<const std::vector<float>>(std::vector<float>(1000, float(r)));
    thetas.push_back(theta);
    q.push(commit_event(uint64_t(r), theta));
    q.push(coordinator::Event{coordinator::Event::Kind::kRoundStarted});  // no θ: not counted
  }
  // The queue is the only owner now: the oldest snapshots are already freed.
  for (int r = 0; r < pushed; ++r)
    EXPECT_EQ(thetas[size_t(r)].expired(), r < pushed - EventQueue::kHeldSnapshots) << r;
  for (int r = 0; r < pushed; ++r) {
    auto e = q.pop(std::chrono::milliseconds(0));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->round, uint64_t(r));
    if (r < pushed - EventQueue::kHeldSnapshots) {
      EXPECT_EQ(e->params, nullptr) << r;
    } else {
      ASSERT_NE(e->params, nullptr) << r;
      EXPECT_EQ(e->params->front(), float(r));
    }
    ASSERT_TRUE(q.pop(std::chrono::milliseconds(0)).has_value());  // its kRoundStarted
  }
  EXPECT_FALSE(q.pop(std::chrono::milliseconds(0)).has_value());
}

TEST(EventQueue, AListenerThatKeepsUpKeepsEverySnapshot) {
  EventQueue q;
  for (int r = 0; r < 3 * EventQueue::kHeldSnapshots; ++r) {
    q.push(commit_event(uint64_t(r), std::make_shared<const std::vector<float>>(4, 1.0f)));
    auto e = q.pop(std::chrono::milliseconds(0));
    ASSERT_TRUE(e.has_value());
    EXPECT_NE(e->params, nullptr) << r;
  }
}

}  // namespace
}  // namespace atl::cli
