#include "node/heartbeater.h"

namespace atl::node {

Heartbeater::Heartbeater(CoordinatorClient& link, std::chrono::milliseconds interval)
    : link_(link), interval_(interval), thread_([this] { loop(); }) {}

Heartbeater::~Heartbeater() {
  {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeater::progress(uint64_t round, uint32_t step, double loss, double tokens_per_s) {
  std::lock_guard<std::mutex> l(mu_);
  round_ = round;
  step_ = step;
  loss_ = loss;
  tokens_per_s_ = tokens_per_s;
}

void Heartbeater::report(uint64_t round, uint64_t step,
                         std::vector<std::pair<std::string, double>> metrics) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (reports_.size() >= kMaxQueuedReports) {
      reports_.pop_front();
      ++dropped_;
    }
    reports_.push_back(Report{round, step, std::move(metrics)});
  }
  cv_.notify_all();
}

void Heartbeater::flush() {
  std::unique_lock<std::mutex> l(mu_);
  sent_cv_.wait(l, [this] { return done_ || (reports_.empty() && !sending_); });
}

void Heartbeater::loop() {
  std::unique_lock<std::mutex> l(mu_);
  auto next_beat = std::chrono::steady_clock::now() + interval_;
  for (;;) {
    cv_.wait_until(l, next_beat, [this] { return done_ || !reports_.empty(); });
    if (done_) break;
    // A heartbeat that is due goes first: reports queued faster than they can be sent must not
    // make the coordinator count this node as lost.
    if (std::chrono::steady_clock::now() >= next_beat) {
      const uint64_t round = round_;
      const uint32_t step = step_;
      const double loss = loss_, tps = tokens_per_s_;
      l.unlock();
      auto known = link_.heartbeat(round, step, loss, tps);
      if (known.ok() && !*known) unknown_ = true;
      l.lock();
      next_beat = std::chrono::steady_clock::now() + interval_;
      continue;
    }
    if (reports_.empty()) continue;
    Report r = std::move(reports_.front());
    reports_.pop_front();
    sending_ = true;
    l.unlock();
    (void)link_.report_metrics(r.round, r.step, r.metrics);
    l.lock();
    sending_ = false;
    if (reports_.empty()) sent_cv_.notify_all();
  }
  sent_cv_.notify_all();
}

}  // namespace atl::node
