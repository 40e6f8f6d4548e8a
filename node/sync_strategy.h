// How a site synchronizes with the coordinator, per algorithm (docs/coordinator.md,
// docs/hydra.md). Each TRAIN task goes through
//   plan(task)          which elements of θ this round's update covers
//   make_update(θ, θ')  Δ = θ_global − θ_local over them, through the experiment's codec, with
//                       the error feedback that belongs to them
//   exchange(...)       push Δ; Streaming DiLoCo also polls for the next task and pulls its θ
//   merge(θ', θ)        Streaming DiLoCo: fold the new global fragment into θ_local
// and Hydra also answers SCORE tasks with score(). Implementations:
//   DiLoCo             the whole θ every round; θ_local restarts from the pulled θ
//   Streaming DiLoCo   one fragment per round (the task's element range); the exchange runs on a
//                      background thread while the worker trains overlap_steps() inner steps of
//                      the next round, then θ_local[frag] ← α·θ_local[frag] + (1 − α)·θ[frag]
//   Hydra              the trained elements of the task's subnetwork (ascending), set on the
//                      InnerStep; importance for SCORE tasks
// A strategy owns its codec and its error-feedback state: one residual for DiLoCo, one per
// fragment (keyed by its element range) for Streaming DiLoCo, and for Hydra one that restarts
// whenever the trained set changes (InnerStep's TrainedSet::generation).
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/error_feedback.h"
#include "algorithms/data/dataset.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "node/coordinator_client.h"
#include "node/held_theta.h"
#include "node/inner_step.h"
#include "node/site_config.h"
#include "transport/proto/atoll.pb.h"

namespace atl::node {

// A round's update, ready to push.
struct EncodedUpdate {
  // fragment_offset and mask_fingerprint set by the strategy; the worker fills in the rest.
  UpdateHeader header;
  std::string codec = "none";  // the experiment's codec spec
  uint64_t numel = 0;          // elements Δ covers
  // Codec "none": Δ itself (the strategy's buffer, valid until its next make_update).
  std::span<const float> delta;
  std::optional<std::string> payload;  // other codecs: the encoded message
};

// push_encoded or push_update, as the update's codec says. The payload bytes sent.
StatusOr<uint64_t> push(CoordinatorClient& link, const EncodedUpdate& update);

// What a round's exchange with the coordinator brought back.
struct ExchangeResult {
  StatusOr<uint64_t> sent = uint64_t{0};  // payload bytes pushed, or why the push failed
  // Streaming DiLoCo, after a successful push: the next task (past WAITs), and its θ when the
  // worker does not hold that version yet.
  std::optional<StatusOr<atoll_pb::v1::Task>> next_task;
  std::optional<StatusOr<PulledParams>> pulled;
};

// A copy of what a round changes in a SyncStrategy: the error feedback, and for Streaming
// DiLoCo the planned fragment (the next round's merge folds in that fragment). Opaque: only the
// strategy that made it reads it.
class SyncState {
 public:
  virtual ~SyncState() = default;
};

class SyncStrategy {
 public:
  virtual ~SyncStrategy();
  SyncStrategy(const SyncStrategy&) = delete;
  SyncStrategy& operator=(const SyncStrategy&) = delete;

  // The elements TRAIN task `task` synchronizes. One line when the task does not fit this site
  // (a fragment outside θ, an invalid subnetwork); not retryable.
  virtual Status plan(const atoll_pb::v1::Task& task) = 0;
  size_t planned_numel() const { return planned_numel_; }

  // Δ = θ_global − θ_local over the planned elements (+ the residual the codec left there last
  // time, with error feedback). Both ParamSets have the experiment's layout.
  StatusOr<EncodedUpdate> make_update(const algorithms::ParamSet& theta,
                                      const algorithms::ParamSet& local);

  // Pushes `update`. DiLoCo and Hydra push on the calling thread and return a ready future;
  // Streaming DiLoCo also polls for the task after `round` and pulls its θ, on a background
  // thread. `update` and `held` must stay alive and unchanged until the future is ready.
  virtual std::future<ExchangeResult> exchange(CoordinatorClient& link, const EncodedUpdate& update,
                                               const HeldTheta& held, uint64_t round,
                                               const std::atomic<bool>* stop);
  // Inner steps of the next round to train while the exchange is in flight (τ).
  virtual uint32_t overlap_steps() const { return 0; }
  // Streaming DiLoCo: merges the planned elements of θ_global into θ_local after the exchange.
  // The others do nothing (the next round starts from θ_global).
  virtual void merge(algorithms::ParamSet& local, const algorithms::ParamSet& theta) const {}

  // A copy of the state the next make_update and plan change (at most numel residual floats),
  // and putting it back: a round interrupted by a crash is redone from where it started
  // (node/round_snapshot.h).
  virtual std::unique_ptr<SyncState> save_state() const = 0;
  virtual Status restore_state(const SyncState& state) = 0;
  // The bytes of a state save_state() made, and that state from its bytes (a node's
  // --state-dir: node/round_state_file.h). FAILED_PRECONDITION where not written (Hydra).
  virtual StatusOr<std::string> encode_state(const SyncState& state) const;
  virtual StatusOr<std::unique_ptr<SyncState>> decode_state(std::string_view bytes) const;

  // Hydra: whether SCORE tasks are answered, and the importance of θ on the site's data.
  virtual bool scores() const { return false; }
  virtual StatusOr<atoll_pb::v1::ImportanceReport> score(
      const atoll_pb::v1::Task& task, const algorithms::ParamSet& theta,
      const algorithms::data::TokenDataset& train, uint64_t seed) const;

 protected:
  // codec: nullopt for "none". numel: θ's element count (Δ never covers more).
  SyncStrategy(std::optional<algorithms::compress::Codec> codec, std::string codec_spec,
               bool error_feedback, size_t numel);

  // out (planned_numel()) ← θ_global − θ_local at the planned elements.
  virtual void fill_delta(const algorithms::ParamSet& theta, const algorithms::ParamSet& local,
                          std::span<float> out) const = 0;
  // The residual of the planned elements (planned_numel() values).
  virtual algorithms::compress::ErrorFeedback& feedback() = 0;
  // Sets the header fields that name the planned elements.
  virtual void label(UpdateHeader& header) const = 0;

  size_t planned_numel_ = 0;

 private:
  std::optional<algorithms::compress::Codec> codec_;
  std::string codec_spec_;
  bool error_feedback_ = false;
  std::vector<float> delta_;  // (numel); Δ in the first planned_numel_ values
};

// Whether the coordinator's TrainSpec names a synchronization this node can do: one line when
// not (an unknown codec, Hydra with Streaming DiLoCo, merge_alpha outside [0, 1)).
Status check_sync_strategy(const SiteConfig& site);

// check_sync_strategy, then DiLoCo, Streaming DiLoCo (site.streaming()) or Hydra
// (site.hydra(); plan() sets each task's subnetwork on `inner`, which must outlive the strategy).
StatusOr<std::unique_ptr<SyncStrategy>> make_sync_strategy(const SiteConfig& site,
                                                           InnerStep& inner);

}  // namespace atl::node
