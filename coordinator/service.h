// The Coordinator gRPC service (transport/proto/atoll.proto): membership, synchronous DiLoCo
// rounds, θ distribution and update collection for ONE experiment.
//
// Rounds. θ_r is the parameters at the start of round r. A round starts when at least
// diloco.min_nodes live nodes are ready (waiting in NextTask): immediately once every live node
// is ready, otherwise after diloco.start_wait_s. Each participant gets a TRAIN task, pulls θ_r,
// trains and pushes Δᵢ = θ_r − θᵢ. The round closes when every live participant has pushed, or
// at the deadline once min_nodes updates are in; then Δ = Σ wᵢΔᵢ / Σ wᵢ (sorted node order,
// wᵢ = tokens), the outer Nesterov step, and ONE atomic store commit of θ_{r+1}, momentum,
// round record and round pointer. A round that cannot reach quorum (deadline passed, or every
// live participant done) is restarted with θ_r unchanged.
//
// Pulls. A node names the θ it holds (have_fingerprint); when the store still has that version
// and an encoded delta against it is smaller than θ, PullParams streams the delta
// (sparse-delta-exact by default, or the lossy bf16 sparse-delta with diloco.pull_codec =
// "sparse-delta"); otherwise the full θ (codec "none"). With diloco.pull_codec = "bf16" every
// pull is the whole θ as a dense bf16 codec message (codec "bf16"), half the bytes of fp32.
//
// Streaming DiLoCo (diloco.streaming_fragments = P > 1 or overlap_steps > 0): round r
// synchronizes fragment r mod P (algorithms/diloco/streaming.h): its TRAIN task carries the
// fragment's element range and inner_steps / P steps, updates cover only that range, and the
// outer step changes only that slice of θ and of the momentum.
//
// Threads. gRPC handler threads, one ticker thread (deadlines, lost nodes, delayed starts) and
// one event thread (delivers Events to the callback in order, never under the service lock).
// All state is guarded by one mutex; long-polls wait on a condition variable with a deadline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms/diloco/outer.h"
#include "algorithms/diloco/streaming.h"
#include "algorithms/hydra/importance.h"
#include "algorithms/model/param_set.h"
#include "coordinator/experiment_config.h"
#include "coordinator/store.h"
#include "kernels/core/status.h"
#include "transport/proto/atoll.grpc.pb.h"

namespace atl::coordinator {

using Clock = std::chrono::steady_clock;

// Progress and lifecycle, delivered in order on the service's event thread.
struct Event {
  enum class Kind {
    kStateChanged,  // message: "running", "paused", ...
    kNodeJoined,
    kNodeLost,  // silent for lost_after_heartbeats × heartbeat_interval_s
    kNodeLeft,
    kRoundStarted,  // participants in `participants`
    kUpdateAccepted,
    kUpdateRejected,  // message: why (the status returned to the node)
    kRoundCommitted,  // `record` holds the committed RoundRecord
    kRoundRestarted,  // quorum not reached; message: why
    kMetrics,         // `metrics` from ReportMetrics
    kFinished,
    kFailed,  // message: why
  };
  explicit Event(Kind k) : kind(k) {}
  Kind kind;
  uint64_t round = 0;
  std::string node_id;
  std::string message;
  std::vector<std::string> participants;
  std::optional<RoundRecord> record;
  std::vector<std::pair<std::string, double>> metrics;
};
const char* event_kind_name(Event::Kind kind);

// How the service learns who is calling.
enum class IdentitySource {
  // The CN of the verified mTLS client certificate (role must be "node"). Production.
  kTlsCertificate,
  // --insecure: Join takes JoinRequest.node_name; every later call carries the same name in
  // the "atoll-node" metadata entry. No authentication at all; local development only.
  kInsecureNodeName,
};

// Decodes a pseudo-gradient payload into numel fp32 values. The default knows codec "none"
// (raw little-endian fp32); compressed codecs plug in here.
// A node as the coordinator sees it (for progress displays and the dashboard).
struct NodeSnapshot {
  std::string node_id;
  std::string status;  // "active", "lost", "left"
  bool ready = false;  // waiting for a task
  // Latest heartbeat progress.
  uint64_t round = 0;
  uint32_t inner_step = 0;
  double loss = 0.0;
  double tokens_per_s = 0.0;
  uint64_t last_seen_unix_ms = 0;  // last call of any kind (heartbeat, poll, push)
  std::string device;              // as reported at Join
};

using PayloadDecoder = std::function<StatusOr<std::vector<float>>(
    const std::string& codec, const std::string& payload, uint64_t numel)>;

struct ServiceOptions {
  IdentitySource identity = IdentitySource::kInsecureNodeName;
  // NextTask holds a call at most this long, whatever the node asks for (ms).
  uint32_t max_wait_ms = 30000;
  // Called for every Event, in order, on the service's event thread. May be empty.
  std::function<void(const Event&)> on_event;
  // Empty: codec "none" only.
  PayloadDecoder decode;
  // Slack over numel·4 bytes accepted for encoded payloads (headers of compressed codecs).
  uint64_t payload_slack_bytes = 1 << 16;
};

class CoordinatorService final : public atoll_pb::v1::Coordinator::Service {
 public:
  // Opens experiment `config.name`: resumes its last committed round when the store has it
  // (the layout fingerprint and numel must match `initial`), otherwise creates it with θ_0 =
  // initial (state "created"). The store must outlive the service.
  static StatusOr<std::unique_ptr<CoordinatorService>> open(Store& store,
                                                            const ExperimentConfig& config,
                                                            const algorithms::ParamSet& initial,
                                                            ServiceOptions options = {});
  ~CoordinatorService() override;

  // Lifecycle: created|paused → running; running → paused (open rounds continue to collect
  // updates, no new round starts); finished and failed are final.
  Status start();
  Status pause();
  // created|running|paused → finished, for good: no new round starts, an open round is
  // abandoned (its updates are discarded, θ stays at the last commit) and nodes get STOP.
  Status stop(const std::string& why);
  // Wakes every long-poll and refuses new calls (UNAVAILABLE); the server calls it before
  // grpc::Server::Shutdown so that no handler holds the shutdown up.
  void shutdown();

  const std::string& experiment_id() const { return experiment_id_; }
  ExperimentState state() const;
  uint64_t current_round() const;
  std::string params_fingerprint() const;
  std::vector<float> params() const;        // copy of θ_current
  std::vector<NodeSnapshot> nodes() const;  // sorted by node id
  // Waits until the experiment is finished or failed; DEADLINE_EXCEEDED otherwise.
  StatusOr<ExperimentState> wait_until_finished(Clock::time_point deadline) const;
  // Waits until current_round() ≥ round (or a final state); false at the deadline.
  bool wait_for_round(uint64_t round, Clock::time_point deadline) const;

  // ---- gRPC (see atoll.proto) ----
  grpc::Status Join(grpc::ServerContext* ctx, const atoll_pb::v1::JoinRequest* req,
                    atoll_pb::v1::JoinResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const atoll_pb::v1::HeartbeatRequest* req,
                         atoll_pb::v1::HeartbeatResponse* resp) override;
  grpc::Status NextTask(grpc::ServerContext* ctx, const atoll_pb::v1::NextTaskRequest* req,
                        atoll_pb::v1::Task* task) override;
  grpc::Status PullParams(grpc::ServerContext* ctx, const atoll_pb::v1::PullParamsRequest* req,
                          grpc::ServerWriter<atoll_pb::v1::TensorChunk>* writer) override;
  grpc::Status PushUpdate(grpc::ServerContext* ctx,
                          grpc::ServerReader<atoll_pb::v1::TensorChunk>* reader,
                          atoll_pb::v1::PushUpdateResponse* resp) override;
  grpc::Status ReportMetrics(grpc::ServerContext* ctx, const atoll_pb::v1::MetricsReport* req,
                             atoll_pb::v1::MetricsAck* resp) override;
  grpc::Status Leave(grpc::ServerContext* ctx, const atoll_pb::v1::LeaveRequest* req,
                     atoll_pb::v1::LeaveResponse* resp) override;
  grpc::Status ReportImportance(grpc::ServerContext* ctx,
                                const atoll_pb::v1::ImportanceReport* req,
                                atoll_pb::v1::ImportanceAck* resp) override;

  // Hydra: the subnetwork (text form, algorithms/model/subnet.h) each node was assigned by the
  // latest selection, sorted by node id; empty before the first selection or without Hydra.
  std::vector<std::pair<std::string, std::string>> hydra_subnets() const;

 private:
  enum class NodeStatus { kActive, kLost, kLeft };
  struct NodeState {
    NodeStatus status = NodeStatus::kActive;
    Clock::time_point last_seen;
    int polling = 0;     // NextTask calls in flight: a polling node is alive
    bool ready = false;  // polled since it was last assigned a round
    NodeRecord record;
    atoll_pb::v1::HeartbeatRequest progress;  // latest heartbeat
  };
  struct PendingUpdate {
    std::vector<uint32_t> indices;  // Hydra: the held elements delta covers (ascending)
    std::vector<float> delta;  // numel
    uint64_t tokens = 0;
    double loss = 0.0;
    uint64_t bytes = 0;  // payload bytes received
  };
  // An encoded θ delta for a pull, shared by every node that holds the same base.
  struct PullPayload {
    std::string codec;  // "sparse-delta-exact", "sparse-delta" or "bf16" (dense, any base)
    std::string bytes;
  };
  struct Round {
    bool open = false;
    uint64_t round = 0;
    std::vector<std::string> participants;  // sorted
    std::map<std::string, PendingUpdate> updates;
    std::set<std::string> receiving;  // header accepted, payload in flight
    std::map<std::string, uint64_t> bytes_down;
    Clock::time_point started;
    Clock::time_point deadline;
    uint64_t deadline_unix_ms = 0;
    // Hydra: the round first collects importance scores (SCORE tasks), then selects and trains.
    bool scoring = false;
    std::set<std::string> score_sent;  // SCORE task handed out
    std::map<std::string, algorithms::hydra::UnitScores> scores;
  };
  // Hydra: one node's assignment from the latest selection.
  struct HydraMask {
    std::string subnet;       // text form
    std::string fingerprint;  // SHA-256 of subnet
    std::vector<uint32_t> indices;  // trained elements, ascending
  };

  CoordinatorService(Store& store, ExperimentConfig config, ServiceOptions options);

  // Identity of the caller (see IdentitySource); `join_name` only for Join.
  StatusOr<std::string> caller(const grpc::ServerContext& ctx, const std::string* join_name) const;
  // The caller's node, which must be an active member; error for the RPC otherwise.
  StatusOr<std::string> member_locked(const grpc::ServerContext& ctx,
                                      const std::string& experiment_id);
  Status check_experiment(const std::string& experiment_id) const;

  // Round state machine (service_rounds.cc); all *_locked run under mu_.
  void maybe_start_round_locked(Clock::time_point now);
  void maybe_close_round_locked(Clock::time_point now);
  void close_round_locked(Clock::time_point now);
  void restart_round_locked(const std::string& why);
  void check_lost_locked(Clock::time_point now);
  void set_state_locked(ExperimentState s, const std::string& why);
  bool is_participant_locked(const std::string& node) const;
  void ticker_loop();
  // Hydra (coordinator/hydra_rounds.cc).
  bool hydra_needs_scores_locked() const;
  // Closes the scoring phase: selection over the reported nodes, masks, TRAIN phase. Returns
  // false (and restarts the round) when fewer than min_nodes reported.
  void hydra_finish_scoring_locked();
  // Masked aggregation + outer step on held elements into theta/momentum.
  Status hydra_aggregate_locked(std::vector<float>& theta, std::vector<float>& momentum,
                                bool first_step) const;
  void emit_locked(Event e);
  void event_loop();
  void audit(const std::string& event, const std::string& detail);
  // The fragment round r synchronizes; the whole θ in plain DiLoCo.
  algorithms::FragmentRange fragment_of_locked(uint64_t round) const;
  // Records θ of `round` (fingerprint fp) as pullable as a delta base; forgets versions the
  // store no longer keeps.
  void remember_version_locked(uint64_t round, const std::string& fp);
  // The smallest allowed delta of θ_round (= theta) against θ_base, or nullptr when none is
  // smaller than the full θ. Cached per (base, round).
  StatusOr<std::shared_ptr<const PullPayload>> delta_payload(
      uint64_t base_round, uint64_t round, const std::shared_ptr<const std::vector<float>>& theta);
  // diloco.pull_codec = "bf16": θ_round as one dense bf16 codec message (2 bytes a value plus
  // a 36-byte header), whatever the node holds. Cached under (round, round).
  StatusOr<std::shared_ptr<const PullPayload>> bf16_payload(
      uint64_t round, const std::shared_ptr<const std::vector<float>>& theta);

  Store& store_;
  const ExperimentConfig config_;
  const ServiceOptions options_;
  const std::string experiment_id_;
  const algorithms::OuterNesterov outer_;
  const Clock::duration heartbeat_interval_;
  const Clock::duration lost_timeout_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // any state change: rounds, nodes, lifecycle, shutdown
  bool stopping_ = false;
  ExperimentRecord experiment_;                      // as committed (+ lifecycle changes)
  std::shared_ptr<const std::vector<float>> theta_;  // θ_current, immutable once published
  std::vector<float> momentum_;                      // numel; meaningful when has_momentum_
  bool has_momentum_ = false;
  std::map<std::string, NodeState> nodes_;  // sorted by node id
  Round round_;
  std::optional<Clock::time_point> quorum_since_;  // min_nodes ready, waiting for the rest
  // Streaming DiLoCo: the P fragments of θ (empty in plain DiLoCo).
  std::vector<algorithms::FragmentRange> fragments_;
  // θ versions a pull may name as its base: fingerprint → round (the newest keep_params).
  std::map<std::string, uint64_t> versions_;
  std::map<std::string, HydraMask> hydra_masks_;  // by node id (Hydra only)

  std::mutex pull_mu_;  // guards pull_cache_ (never held with mu_)
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const PullPayload>> pull_cache_;

  std::mutex event_mu_;
  std::condition_variable event_cv_;
  std::deque<Event> events_;
  bool events_stop_ = false;

  std::thread ticker_;
  std::thread event_thread_;
};

}  // namespace atl::coordinator
