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

void Heartbeater::loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!done_) {
    if (cv_.wait_for(l, interval_, [this] { return done_; })) break;
    const uint64_t round = round_;
    const uint32_t step = step_;
    const double loss = loss_, tps = tokens_per_s_;
    l.unlock();
    auto known = link_.heartbeat(round, step, loss, tps);
    if (known.ok() && !*known) unknown_ = true;
    l.lock();
  }
}

}  // namespace atl::node
