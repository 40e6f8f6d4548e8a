#include "node/metrics_reporter.h"

namespace atl::node {

MetricsReporter::MetricsReporter(CoordinatorClient& link)
    : link_(link), thread_([this] { loop(); }) {}

MetricsReporter::~MetricsReporter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MetricsReporter::report(uint64_t round, uint64_t step,
                             std::vector<std::pair<std::string, double>> metrics) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (queue_.size() >= kMaxQueued) {
      queue_.pop_front();
      ++dropped_;
    }
    queue_.push_back(Report{round, step, std::move(metrics)});
  }
  cv_.notify_all();
}

bool MetricsReporter::flush(std::chrono::milliseconds max_wait) {
  std::unique_lock<std::mutex> l(mu_);
  return sent_cv_.wait_for(l, max_wait, [this] { return queue_.empty() && !sending_; });
}

void MetricsReporter::loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return done_ || !queue_.empty(); });
    if (done_) break;
    Report r = std::move(queue_.front());
    queue_.pop_front();
    sending_ = true;
    l.unlock();
    (void)link_.report_metrics(r.round, r.step, r.metrics);
    l.lock();
    sending_ = false;
    if (queue_.empty()) sent_cv_.notify_all();
  }
}

}  // namespace atl::node
