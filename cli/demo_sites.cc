#include "cli/demo_sites.h"

#include <charconv>
#include <csignal>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "kernels/core/number_text.h"
#include "node/subprocess.h"
#include "node/teacher_client.h"
#include "simulate/virtual_sites.h"
#include "transport/tls/credentials.h"

namespace atl::cli {
namespace {

class NodeProcesses final : public DemoSites {
 public:
  NodeProcesses(std::vector<std::string> names, std::string log_dir, std::string log_prefix = "")
      : names_(std::move(names)),
        log_dir_(std::move(log_dir)),
        log_prefix_(std::move(log_prefix)) {}

  Status spawn(const std::vector<std::string>& argv, const std::string& name) {
    ATOLL_ASSIGN_OR_RETURN(node::Subprocess p, node::Subprocess::spawn(argv, log_path(name)));
    procs_.push_back(std::move(p));
    return Status::Ok();
  }

  std::optional<std::string> failure() override {
    for (size_t i = 0; i < procs_.size(); ++i) {
      if (auto code = procs_[i].wait_for(std::chrono::milliseconds(0)); code && *code != 0)
        return names_[i] + " exited with code " + std::to_string(*code) + " (see " +
               log_path(names_[i]) + ")";
    }
    return std::nullopt;
  }

  void finish() override {
    for (auto& p : procs_)
      if (!p.wait_for(std::chrono::seconds(20))) p.signal(SIGTERM);
  }

 private:
  std::string log_path(const std::string& name) const {
    return log_dir_ + "/" + log_prefix_ + name + ".log";
  }

  std::vector<std::string> names_;
  std::string log_dir_, log_prefix_;
  std::vector<node::Subprocess> procs_;
};

// Runs simulate::run_virtual_sites on a thread; its own stop flag ends the sites when the demo
// returns early (the destructor joins the thread before the engine goes away).
class VirtualSitesThread final : public DemoSites {
 public:
  VirtualSitesThread(coordinator::RoundEngine& engine, std::vector<simulate::VirtualSite> sites,
                     const VirtualSitesOptions& o) {
    for (const auto& s : sites) {
      std::FILE* f = std::fopen((o.log_dir + "/" + o.log_prefix + s.name + ".log").c_str(), "a");
      if (f) logs_[s.name] = f;
    }
    options_.brown_dir = o.brown_dir;
    options_.base = o.base;
    options_.keep_best = o.keep_best;
    options_.state_root = o.state_root;
    options_.metrics = o.metrics;
    options_.stop = &stop_;
    options_.log = [this](const std::string& site, const std::string& line) {
      auto it = logs_.find(site);
      if (it == logs_.end()) return;
      std::fprintf(it->second, "%s\n", line.c_str());
      std::fflush(it->second);
    };
    thread_ = std::thread([this, &engine, sites = std::move(sites)] {
      Status st = simulate::run_virtual_sites(engine, sites, options_);
      std::lock_guard<std::mutex> lk(mu_);
      result_ = st;
    });
  }
  ~VirtualSitesThread() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (auto& [name, f] : logs_) std::fclose(f);
  }

  std::optional<std::string> failure() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (result_ && !result_->ok()) return result_->message();
    return std::nullopt;
  }

  void finish() override {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  simulate::VirtualSiteOptions options_;
  std::map<std::string, std::FILE*> logs_;  // opened before the thread starts, then read-only
  std::mutex mu_;
  std::optional<Status> result_;  // set when every site has returned
  std::thread thread_;
};

}  // namespace

StatusOr<std::unique_ptr<DemoSites>> start_node_processes(const std::vector<SiteSpec>& sites,
                                                         const NodeProcessOptions& o) {
  std::vector<std::string> names;
  for (const auto& s : sites) {
    if (s.attack != simulate::Attack::kNone)
      return InvalidArgument("site " + s.name + ": Byzantine sites run only in-process " +
                             "(atoll simulate --byzantine K --attack NAME)");
    names.push_back(s.name);
  }
  auto procs = std::make_unique<NodeProcesses>(names, o.log_dir, o.log_prefix);
  for (const auto& s : sites) {
    std::vector<std::string> argv = {
        node::self_executable(), "node", "--coordinator", o.coordinator, "--name", s.name, "--data",
        s.data_spec, "--budget", shortest_decimal(s.budget), "--threads", std::to_string(o.threads),
        "--brown-dir", o.brown_dir, "--give-up-after", "60",
        // The coordinator evaluates on Brown's held-out documents:
        // the sites keep them out of training, as virtual sites do.
        "--val-split", "held-out"};
    if (o.insecure) {
      argv.push_back("--insecure");
    } else {
      argv.push_back("--tls");
      argv.push_back(o.tls_dir);
    }
    argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
    if (!o.state_root.empty()) {
      argv.push_back("--state-dir");
      argv.push_back(o.state_root + "/" + s.name);
    }
    ATOLL_RETURN_IF_ERROR(procs->spawn(argv, s.name));
  }
  return std::unique_ptr<DemoSites>(std::move(procs));
}

StatusOr<std::unique_ptr<DemoSites>> start_virtual_sites(coordinator::RoundEngine& engine,
                                                         const std::vector<SiteSpec>& sites,
                                                         const VirtualSitesOptions& options) {
  std::vector<simulate::VirtualSite> virtual_sites;
  for (const auto& s : sites) {
    simulate::VirtualSite v{s.name, s.data_spec, s.budget};
    v.attack = s.attack;
    v.attack_seed = s.attack_seed;
    if (!options.distill.teachers.empty()) {
      v.distill = options.distill;
      // The site's own certificate, as `atoll node --tls DIR --name NAME` presents it.
      ATOLL_ASSIGN_OR_RETURN(v.teacher_tls,
                             node::site_teacher_credentials(options.teacher_tls_dir, s.name,
                                                            options.distill.server_name));
    }
    virtual_sites.push_back(std::move(v));
  }
  return std::unique_ptr<DemoSites>(
      std::make_unique<VirtualSitesThread>(engine, std::move(virtual_sites), options));
}

StatusOr<std::unique_ptr<DemoSites>> launch_sites(coordinator::RoundEngine& engine,
                                                 const std::vector<SiteSpec>& sites,
                                                 const SiteLaunch& launch) {
  if (launch.mode == SiteMode::kInProcess) {
    VirtualSitesOptions o;
    o.brown_dir = launch.brown_dir;
    o.log_dir = launch.run_dir;
    o.base = launch.base;
    o.keep_best = launch.keep_best;
    o.state_root = launch.state_root;
    o.metrics = launch.metrics;
    return start_virtual_sites(engine, sites, o);
  }
  NodeProcessOptions o;
  o.coordinator = launch.coordinator;
  o.tls_dir = launch.tls_dir;
  o.insecure = launch.insecure;
  o.threads = launch.threads;
  o.brown_dir = launch.brown_dir;
  o.log_dir = launch.run_dir;
  o.state_root = launch.state_root;
  if (launch.base) o.extra_args = {"--base", launch.base->path};
  if (launch.keep_best != node::KeepBest::kAuto) {
    o.extra_args.push_back("--keep-best");
    o.extra_args.push_back(node::keep_best_name(launch.keep_best));
  }
  return start_node_processes(sites, o);
}

}  // namespace atl::cli
