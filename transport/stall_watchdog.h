// Cancels a gRPC client call whose stream stopped moving: a peer that vanished mid-transfer (its
// address changed, the link went down for good) otherwise holds the call until its deadline,
// which for a whole θ must be hours on a slow link.
#pragma once

#include <grpcpp/client_context.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace atl::transport {

class StallWatchdog {
 public:
  // Watches `ctx` from now on: TryCancel() once `stall` passes without progress().
  StallWatchdog(grpc::ClientContext& ctx, std::chrono::milliseconds stall);
  ~StallWatchdog();  // stops watching (joins its thread)
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  void progress();      // a chunk moved
  bool fired() const {  // the call was cancelled for want of progress
    return fired_.load();
  }

 private:
  void run();

  grpc::ClientContext& ctx_;
  const std::chrono::milliseconds stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::chrono::steady_clock::time_point last_progress_;
  bool stopping_ = false;
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

}  // namespace atl::transport
