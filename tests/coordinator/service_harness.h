// In-process coordinator on a real RocksDB (temp dir) and a real gRPC server on 127.0.0.1,
// plus fake trainer nodes that produce a deterministic Δ from θ and their index.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/diloco/outer.h"
#include "coordinator/server.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "node/coordinator_client.h"
#include "test_util.h"
#include "transport/tls/credentials.h"

namespace atl::coordinator::testing {

using namespace std::chrono_literals;

using testing_util::small_config;
using testing_util::small_hydra_config;

// The fake trainer: Δ for node `index` from θ (numel), deterministic.
inline std::vector<float> fake_delta(const std::vector<float>& theta, uint32_t index) {
  std::vector<float> d(theta.size());
  for (size_t j = 0; j < theta.size(); ++j)
    d[j] = 0.05f * theta[j] + 0.001f * static_cast<float>(index + 1) *
                                  static_cast<float>(static_cast<int>(j % 13) - 6);
  return d;
}
inline uint64_t fake_tokens(uint32_t index) {
  return 1000 * (index + 1);
}
inline double fake_loss(uint32_t index, uint64_t round) {
  return 5.0 / (1.0 + static_cast<double>(round)) + 0.1 * index;
}

// Collects events from the service's event thread.
class EventLog {
 public:
  std::function<void(const Event&)> callback() {
    return [this](const Event& e) {
      std::lock_guard<std::mutex> lk(mu_);
      events_.push_back(e);
    };
  }
  std::vector<Event> of(Event::Kind k) const {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<Event> out;
    for (const auto& e : events_)
      if (e.kind == k) out.push_back(e);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

struct Coordinator {
  std::unique_ptr<Store> store;
  std::unique_ptr<CoordinatorService> service;
  std::unique_ptr<CoordinatorServer> server;

  // Opens (or resumes) the experiment in `dir` and serves it on `listen`; with `bulk_tls`, also
  // the bulk lane on 127.0.0.1 (a free port).
  static std::unique_ptr<Coordinator> start(
      const std::string& dir, const ExperimentConfig& cfg, const algorithms::ParamSet& initial,
      ServiceOptions options = {}, std::shared_ptr<grpc::ServerCredentials> creds = nullptr,
      const std::string& listen = "127.0.0.1:0", transport::ServerLimits limits = {},
      const transport::TlsIdentity* bulk_tls = nullptr) {
    auto c = std::make_unique<Coordinator>();
    auto s = Store::open(dir, {.keep_params = cfg.diloco.keep_params});
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (!s.ok()) return nullptr;
    c->store = std::move(*s);
    auto svc = CoordinatorService::open(*c->store, cfg, initial, std::move(options));
    EXPECT_TRUE(svc.ok()) << svc.status().to_string();
    if (!svc.ok()) return nullptr;
    c->service = std::move(*svc);
    auto srv = CoordinatorServer::start(
        *c->service, {.listen = listen,
                      .credentials = creds ? creds : transport::insecure_server_credentials(),
                      .limits = limits,
                      .bulk_listen = bulk_tls ? "127.0.0.1:0" : "",
                      .bulk_tls = bulk_tls ? *bulk_tls : transport::TlsIdentity{},
                      .refusal_log = {}});
    EXPECT_TRUE(srv.ok()) << srv.status().to_string();
    if (!srv.ok()) return nullptr;
    c->server = std::move(*srv);
    return c;
  }
  // Server first (it wakes the long-polls), then the service, then the store.
  ~Coordinator() {
    server.reset();
    service.reset();
    store.reset();
  }
  std::string address() const { return server->address(); }
};

inline node::ClientOptions insecure_client(const std::string& target, const std::string& name) {
  node::ClientOptions o;
  o.target = target;
  o.tls = transport::insecure_client_credentials();
  o.node_name = name;
  o.rpc_timeout = 5s;
  o.stream_timeout = 20s;
  return o;
}

// A node's client over mTLS with certificate `cert_name` from the CA in `tls_dir`, dialing the
// coordinator by its certificate name "coordinator".
inline node::ClientOptions tls_client(const std::string& target, const std::string& tls_dir,
                                      const std::string& cert_name) {
  node::ClientOptions o;
  o.target = target;
  auto tls = transport::client_credentials(tls_dir, cert_name, "coordinator");
  EXPECT_TRUE(tls.ok()) << tls.status().to_string();
  if (tls.ok()) o.tls = *tls;
  o.rpc_timeout = 5s;
  o.stream_timeout = 20s;
  return o;
}

// A fake trainer node: join, then TRAIN tasks until STOP or `until`. Reconnects (joins again)
// when the coordinator goes away, so it survives a coordinator restart on the same address.
struct FakeNode {
  node::ClientOptions options;
  uint32_t index = 0;
  std::string layout_fp;
  std::vector<uint64_t> rounds_done;
  std::vector<std::string> errors;
  bool stopped = false;

  void run(std::chrono::steady_clock::time_point until) {
    node::CoordinatorClient client(options);
    bool joined = false;
    uint64_t last_done = 0;
    auto backoff = 20ms;
    while (std::chrono::steady_clock::now() < until) {
      if (!joined) {
        auto j = client.join();
        if (!j.ok()) {
          // Retry backoff while the coordinator restarts (not synchronisation between threads).
          std::this_thread::sleep_for(backoff);
          backoff = std::min<std::chrono::milliseconds>(backoff * 2, 200ms);
          continue;
        }
        joined = true;
        backoff = 20ms;
      }
      auto task = client.next_task(last_done, 2000);
      if (!task.ok()) {
        joined = false;
        continue;
      }
      if (task->kind() == atoll_pb::v1::Task::STOP) {
        stopped = true;
        (void)client.leave("stop: " + task->reason());
        return;
      }
      if (task->kind() != atoll_pb::v1::Task::TRAIN) continue;
      const uint64_t r = task->round();
      auto theta = client.pull_params(r, task->params_fingerprint());
      if (!theta.ok()) {
        errors.push_back(theta.status().to_string());
        joined = false;
        continue;
      }
      const std::vector<float> delta = fake_delta(theta->values, index);
      node::UpdateHeader h{r, fake_tokens(index), fake_loss(index, r), theta->fingerprint,
                           layout_fp};
      auto pushed = client.push_update(h, delta);
      if (!pushed.ok()) {
        errors.push_back(pushed.status().to_string());
        joined = false;
        continue;
      }
      (void)client.report_metrics(r, (r + 1) * 10,
                                  {{"loss", fake_loss(index, r)}, {"tokens", 1.0}});
      rounds_done.push_back(r);
      last_done = r;
    }
  }
};

// θ after `rounds` rounds in which nodes 0..n-1 all took part, computed directly (no service).
inline std::string expected_fingerprint(const algorithms::ParamSet& initial, uint32_t n,
                                        uint32_t rounds, const ExperimentConfig& cfg) {
  std::vector<float> theta = initial.vec(), m(theta.size()), agg(theta.size());
  algorithms::OuterNesterov opt(
      {static_cast<float>(cfg.diloco.outer_lr), static_cast<float>(cfg.diloco.outer_momentum)});
  for (uint32_t r = 0; r < rounds; ++r) {
    std::vector<std::vector<float>> deltas;
    std::vector<algorithms::Update> ups;
    for (uint32_t i = 0; i < n; ++i) deltas.push_back(fake_delta(theta, i));
    // Node names "node-<i>" sort in index order for i < 10.
    for (uint32_t i = 0; i < n; ++i)
      ups.push_back({"node-" + std::to_string(i), fake_tokens(i), deltas[i]});
    EXPECT_TRUE(algorithms::aggregate_pseudo_gradients(ups, agg).ok());
    EXPECT_TRUE(opt.step(theta, m, agg, r == 0).ok());
  }
  return algorithms::params_fingerprint(theta);
}

}  // namespace atl::coordinator::testing
