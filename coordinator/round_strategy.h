// What differs between algorithms inside a round (coordinator/round_engine.h): the Join spec,
// the task a participant gets, the shape an update must have, the scoring phase, and the
// aggregation + outer step at the commit. The engine keeps everything else (membership,
// quorum, deadlines, screening, the commit itself) and picks one strategy when it opens:
//   DiLoCo           every node trains θ; an update is all of θ (numel elements).
//   Streaming DiLoCo round r syncs fragment r mod P (algorithms/diloco/streaming.h): the task
//                    names the fragment, an update covers it, the outer step changes only that
//                    slice of θ and of the momentum.
//   Hydra            a round first collects importance scores (SCORE tasks), then selects one
//                    subnetwork per site; an update covers the site's trained elements, and the
//                    outer step is the masked one (docs/hydra.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/compress/outer_update.h"
#include "algorithms/hydra/importance.h"
#include "algorithms/model/param_set.h"
#include "coordinator/experiment_config.h"
#include "kernels/core/status.h"
#include "transport/proto/atoll.pb.h"

namespace atl::coordinator {

// An update accepted in the open round, waiting for the commit.
struct PendingUpdate {
  std::vector<uint32_t> indices;  // Hydra: the θ elements `delta` covers (ascending); else empty
  std::vector<float> delta;       // all of θ, the round's fragment, or the mask's elements
  uint64_t tokens = 0;            // aggregation weight
  double loss = 0.0;              // mean inner loss over the round
  uint64_t bytes = 0;             // payload bytes received
};
// By node id: the commit aggregates in sorted node order, so the sum is bitwise reproducible.
using PendingUpdates = std::map<std::string, PendingUpdate>;

// A participant that reported importance in a round's scoring phase.
struct ScoredNode {
  std::string node_id;
  double budget = 1.0;  // its share of the full model's cost, from Join
  algorithms::hydra::UnitScores scores;
};

// Best-effort audit lines (event name, detail).
using AuditSink = std::function<void(const std::string& event, const std::string& detail)>;

// Every member is called under the engine's lock except apply(), which runs during the commit
// without it: apply() reads its arguments and state fixed at construction only.
class RoundStrategy {
 public:
  virtual ~RoundStrategy() = default;

  // Join: the TrainSpec fields this algorithm sets.
  virtual void describe(atoll_pb::v1::TrainSpec& train) const = 0;
  // Join: OK when a site with this budget (share of the full model's training cost, (0, 1]) can
  // take part; otherwise FAILED_PRECONDITION saying what budget it needs.
  virtual Status check_budget(const std::string& /*node*/, double /*budget*/) const {
    return Status::Ok();
  }

  // Scoring phase. Whether round `round` with `participants` (sorted) first collects scores.
  virtual bool needs_scores(uint64_t round, const std::vector<std::string>& participants) const = 0;
  // OK when this algorithm takes importance reports; otherwise why not (FAILED_PRECONDITION).
  virtual Status check_importance_wanted(const std::string& experiment_id) const = 0;
  // The SCORE task's algorithm fields.
  virtual void fill_score_task(atoll_pb::v1::Task& task) const = 0;
  // A report as validated scores.
  virtual StatusOr<algorithms::hydra::UnitScores> parse_scores(
      const atoll_pb::v1::ImportanceReport& report) const = 0;
  // Ends the scoring phase of `round` with the sites that reported (quorum already checked):
  // the selection every later TRAIN task and update follows. An error fails the experiment.
  virtual Status select(uint64_t round, const std::vector<ScoredNode>& sites,
                        const AuditSink& audit) = 0;

  // The TRAIN task's algorithm fields for `node` in `round`.
  virtual void fill_train_task(const std::string& node, uint64_t round,
                               atoll_pb::v1::Task& task) const = 0;
  // The shape of an update header from `node` for `round`: numel, fragment offset, mask.
  virtual Status check_update_shape(const std::string& node, uint64_t round,
                                    const atoll_pb::v1::TensorHeader& header) const = 0;
  // When the whole update has arrived: the θ elements it covers (PendingUpdate::indices), or
  // why it no longer fits (the selection changed while it streamed in).
  virtual StatusOr<std::vector<uint32_t>> update_indices(
      const std::string& node, const atoll_pb::v1::TensorHeader& header) const = 0;

  // The commit of `round`: aggregates `updates` and applies the outer step to theta and
  // momentum (numel each) in place. has_momentum: a previous commit wrote the momentum.
  virtual Status apply(uint64_t round, const PendingUpdates& updates, bool has_momentum,
                       std::vector<float>& theta, std::vector<float>& momentum) const = 0;

  // The elements round `round`'s outer step may change, for the compressed broadcast
  // (algorithms/compress/outer_update.h): all of θ; Streaming DiLoCo: the round's fragment.
  // Fixed at construction: may be called without the lock.
  virtual algorithms::compress::UpdateRange synced_range(uint64_t round) const = 0;

  // Hydra: each node's subnetwork (text form) from the latest selection, sorted by node id.
  virtual std::vector<std::pair<std::string, std::string>> subnets() const { return {}; }

  // What later rounds depend on besides θ and the momentum, as bytes committed with every round
  // (Store::commit_round), so that a restarted coordinator goes on as the uninterrupted one:
  // Hydra's latest selection. Empty: nothing (DiLoCo, and Hydra before its first selection).
  virtual std::string committed_state() const { return {}; }
  // At open: the committed_state() stored with the current round. DataLoss when it does not
  // fit this experiment.
  virtual Status restore(const std::string& state) {
    return state.empty() ? Status::Ok()
                         : DataLoss(
                               "the store holds round strategy state this algorithm does not "
                               "keep (the store is corrupt)");
  }
};

// The strategy of `config.algorithm` for parameters laid out as `layout`: one of
//   DiLoCo, plain or streaming (coordinator/round_strategy.cc); InvalidArgument when the layout
//     cannot be cut into diloco.streaming_fragments fragments;
//   Hydra (coordinator/hydra_strategy.cc).
// `noise_key` keys the differential privacy noise ([privacy]; the experiment's secret key, or its
// seed with privacy.noise_key = "seed").
StatusOr<std::unique_ptr<RoundStrategy>> make_round_strategy(const ExperimentConfig& config,
                                                             const algorithms::ParamLayout& layout,
                                                             uint64_t noise_key);
StatusOr<std::unique_ptr<RoundStrategy>> make_diloco_strategy(const ExperimentConfig& config,
                                                              const algorithms::ParamLayout& layout,
                                                              uint64_t noise_key);
std::unique_ptr<RoundStrategy> make_hydra_strategy(const ExperimentConfig& config,
                                                   const algorithms::ParamLayout& layout);

// The first 12 hex digits of a fingerprint, for messages.
inline std::string short_fp(const std::string& fp) {
  return fp.substr(0, 12);
}

}  // namespace atl::coordinator
