#include "simulate/virtual_sites.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "node/coordinator_client.h"
#include "node/site_worker.h"
#include "simulate/in_process_calls.h"

namespace atl::simulate {

Status run_virtual_sites(coordinator::RoundEngine& engine, const std::vector<VirtualSite>& sites,
                         const VirtualSiteOptions& options) {
  // Every worker watches `stop_all`: set by the caller's stop flag, or by the first failure (the
  // other sites would otherwise wait for a quorum that can no longer form).
  std::atomic<bool> stop_all{false};
  std::mutex mu;
  std::condition_variable cv;
  size_t running = sites.size();
  std::optional<Status> first_failure;

  std::vector<std::thread> threads;
  threads.reserve(sites.size());
  for (const VirtualSite& site : sites) {
    threads.emplace_back([&, site] {
      node::SiteWorkerOptions o;
      o.name = site.name;
      o.data_spec = site.data_spec;
      o.brown_dir = options.brown_dir;
      o.holdout = options.holdout;
      o.budget = site.budget;
      o.distill = site.distill;
      o.teacher_tls = site.teacher_tls;
      o.give_up_after_s = options.give_up_after_s;
      o.base = options.base;
      o.keep_best = options.keep_best;
      if (!options.state_root.empty()) o.state_dir = options.state_root + "/" + site.name;
      if (options.on_kept)
        o.on_kept = [&options, name = site.name](const node::KeptTheta& kept) {
          options.on_kept(name, kept);
        };
      o.stop = &stop_all;
      if (options.log) o.log = [&options, name = site.name](const std::string& line) {
        options.log(name, line);
      };
      std::unique_ptr<node::CoordinatorCalls> calls =
          std::make_unique<InProcessCalls>(engine, site.name, options.metrics);
      if (site.attack != Attack::kNone)
        calls = std::make_unique<ByzantineCalls>(std::move(calls), site.attack, site.attack_seed);
      node::CoordinatorClient client(std::move(calls));
      Status st = node::run_site_worker(client, o);
      std::lock_guard<std::mutex> lk(mu);
      if (!st.ok() && !first_failure) {
        first_failure = Status(st.code(), "site " + site.name + ": " + st.message());
        stop_all = true;
      }
      --running;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    while (running > 0) {
      cv.wait_for(lk, std::chrono::milliseconds(100));
      if (options.stop && options.stop->load()) stop_all = true;
    }
  }
  for (auto& t : threads) t.join();
  return first_failure ? *first_failure : Status::Ok();
}

}  // namespace atl::simulate
