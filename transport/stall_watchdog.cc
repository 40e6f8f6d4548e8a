#include "transport/stall_watchdog.h"

namespace atl::transport {

StallWatchdog::StallWatchdog(grpc::ClientContext& ctx, std::chrono::milliseconds stall)
    : ctx_(ctx), stall_(stall), last_progress_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this] { run(); });
}

StallWatchdog::~StallWatchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallWatchdog::progress() {
  std::lock_guard<std::mutex> lk(mu_);
  last_progress_ = std::chrono::steady_clock::now();
}

void StallWatchdog::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    const auto due = last_progress_ + stall_;
    if (std::chrono::steady_clock::now() >= due) {
      fired_.store(true);
      ctx_.TryCancel();
      return;
    }
    cv_.wait_until(lk, due, [this] { return stopping_; });
  }
}

}  // namespace atl::transport
