// DiLoCo rounds, plain and streaming (see round_strategy.h), and the choice of a strategy.
#include "coordinator/round_strategy.h"

#include <span>

#include "algorithms/diloco/outer.h"
#include "algorithms/diloco/privacy.h"
#include "algorithms/diloco/robust.h"
#include "algorithms/diloco/streaming.h"

namespace atl::coordinator {
namespace {

namespace pb = atoll_pb::v1;

class DilocoStrategy final : public RoundStrategy {
 public:
  // fragments: Streaming DiLoCo's P fragments of θ; empty in plain DiLoCo.
  DilocoStrategy(const ExperimentConfig& config, size_t numel,
                 std::vector<algorithms::FragmentRange> fragments, uint64_t noise_key)
      : diloco_(config.diloco),
        numel_(numel),
        fragments_(std::move(fragments)),
        aggregator_(aggregator_options(config)),
        privacy_(privacy_options(config)),
        noise_key_(noise_key),
        outer_({static_cast<float>(config.diloco.outer_lr),
                static_cast<float>(config.diloco.outer_momentum)}) {}

  void describe(pb::TrainSpec& train) const override {
    if (!diloco_.streaming()) return;
    train.set_streaming_fragments(diloco_.streaming_fragments);
    train.set_overlap_steps(diloco_.overlap_steps);
    train.set_merge_alpha(diloco_.merge_alpha);
  }

  bool needs_scores(uint64_t, const std::vector<std::string>&) const override { return false; }
  Status check_importance_wanted(const std::string& experiment_id) const override {
    return FailedPrecondition("experiment '" + experiment_id +
                              "' does not run algorithm \"hydra\"; importance is not needed");
  }
  void fill_score_task(pb::Task&) const override {}
  StatusOr<algorithms::hydra::UnitScores> parse_scores(const pb::ImportanceReport&) const override {
    return FailedPrecondition("DiLoCo rounds have no scoring phase");
  }
  Status select(uint64_t, const std::vector<ScoredNode>&, const AuditSink&) override {
    return FailedPrecondition("DiLoCo rounds have no scoring phase");
  }

  void fill_train_task(const std::string&, uint64_t round, pb::Task& task) const override {
    if (fragments_.empty()) return;
    const algorithms::FragmentRange f = fragment_of(round);
    task.set_fragment(algorithms::fragment_of_round(round, diloco_.streaming_fragments));
    task.set_fragment_offset(f.offset);
    task.set_fragment_numel(f.numel);
  }

  Status check_update_shape(const std::string&, uint64_t round,
                            const pb::TensorHeader& h) const override {
    if (!fragments_.empty()) {
      // Streaming DiLoCo: the update covers the round's fragment only.
      const algorithms::FragmentRange frag = fragment_of(round);
      if (h.fragment_offset() != frag.offset || h.numel() != frag.numel)
        return InvalidArgument(
            "wrong shape: update covers elements [" + std::to_string(h.fragment_offset()) + ", +" +
            std::to_string(h.numel()) + "), round " + std::to_string(round) + " syncs fragment [" +
            std::to_string(frag.offset) + ", +" + std::to_string(frag.numel) + ")");
      return Status::Ok();
    }
    if (h.numel() != numel_ || h.fragment_offset() != 0)
      return InvalidArgument("wrong shape: update has " + std::to_string(h.numel()) +
                             " elements, θ has " + std::to_string(numel_));
    return Status::Ok();
  }

  StatusOr<std::vector<uint32_t>> update_indices(const std::string&,
                                                 const pb::TensorHeader&) const override {
    return std::vector<uint32_t>{};
  }

  Status apply(uint64_t round, const PendingUpdates& updates, bool has_momentum,
               std::vector<float>& theta, std::vector<float>& momentum) const override {
    // Plain DiLoCo: the whole θ. Streaming: the round's fragment, a slice of θ and momentum
    // (both per element), so the other fragments are untouched bit for bit.
    const algorithms::FragmentRange frag = fragment_of(round);
    std::vector<algorithms::Update> ups;  // std::map order: sorted node ids
    // Differential privacy: equal weights (the updates arrive clipped to privacy.clip_norm),
    // then noise of std z·C/n on the mean, keyed by (noise key, round, θ element).
    const bool private_mean = privacy_.enabled();
    for (const auto& [id, u] : updates) ups.push_back({id, private_mean ? 1 : u.tokens, u.delta});
    std::vector<float> delta(frag.numel);
    ATOLL_RETURN_IF_ERROR(algorithms::aggregate_robust(ups, aggregator_, delta));
    if (private_mean)
      algorithms::add_privacy_noise(delta, algorithms::privacy_noise_stddev(privacy_, ups.size()),
                                    noise_key_, round, frag.offset);
    // A fragment's momentum buffer starts at its first sync (round < P), as PyTorch's does.
    const bool first_step =
        fragments_.empty() ? !has_momentum : round < diloco_.streaming_fragments;
    return outer_.step(std::span<float>(theta).subspan(frag.offset, frag.numel),
                       std::span<float>(momentum).subspan(frag.offset, frag.numel), delta,
                       first_step, diloco_.look_ahead_at(round));
  }

  algorithms::compress::UpdateRange synced_range(uint64_t round) const override {
    const algorithms::FragmentRange f = fragment_of(round);
    return {f.offset, f.numel};
  }

 private:
  // The fragment round r synchronizes; the whole θ in plain DiLoCo.
  algorithms::FragmentRange fragment_of(uint64_t round) const {
    if (fragments_.empty()) return {0, numel_};
    return fragments_[algorithms::fragment_of_round(round, diloco_.streaming_fragments)];
  }

  const DilocoSection diloco_;
  const size_t numel_;
  const std::vector<algorithms::FragmentRange> fragments_;
  const algorithms::AggregatorOptions aggregator_;  // robust.aggregator and its parameters
  const algorithms::PrivacyOptions privacy_;        // [privacy]: clip_norm > 0 = DP mean
  const uint64_t noise_key_;  // the privacy noise's key (secret, or the experiment seed)
  const algorithms::OuterNesterov outer_;
};

}  // namespace

StatusOr<std::unique_ptr<RoundStrategy>> make_diloco_strategy(const ExperimentConfig& config,
                                                              const algorithms::ParamLayout& layout,
                                                              uint64_t noise_key) {
  std::vector<algorithms::FragmentRange> fragments;
  if (config.diloco.streaming()) {
    auto frags = algorithms::fragment_ranges(layout, config.diloco.streaming_fragments);
    if (!frags.ok())
      return InvalidArgument(
          "diloco.streaming_fragments = " + std::to_string(config.diloco.streaming_fragments) +
          ": " + frags.status().message());
    fragments = std::move(*frags);
  }
  return std::unique_ptr<RoundStrategy>(
      new DilocoStrategy(config, layout.numel(), std::move(fragments), noise_key));
}

StatusOr<std::unique_ptr<RoundStrategy>> make_round_strategy(const ExperimentConfig& config,
                                                             const algorithms::ParamLayout& layout,
                                                             uint64_t noise_key) {
  if (config.is_hydra()) return make_hydra_strategy(config, layout);  // no [privacy] with Hydra
  return make_diloco_strategy(config, layout, noise_key);
}

}  // namespace atl::coordinator
