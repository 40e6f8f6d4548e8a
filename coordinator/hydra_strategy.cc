// Hydra rounds (docs/hydra.md): importance reports in a scoring phase, one subnetwork per site
// from the selection at its end, masked updates, and the masked aggregation + outer step.
#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstdio>

#include "algorithms/diloco/outer.h"
#include "algorithms/hydra/aggregate.h"
#include "algorithms/hydra/cost.h"
#include "algorithms/hydra/select.h"
#include "algorithms/model/subnet.h"
#include "coordinator/round_strategy.h"
#include "kernels/core/number_text.h"

namespace atl::coordinator {
namespace {

namespace pb = atoll_pb::v1;

class HydraStrategy final : public RoundStrategy {
 public:
  HydraStrategy(const ExperimentConfig& config, uint64_t numel)
      : config_(config),
        numel_(numel),
        aggregator_(aggregator_options(config)),
        outer_({static_cast<float>(config.diloco.outer_lr),
                static_cast<float>(config.diloco.outer_momentum)}) {}

  void describe(pb::TrainSpec& train) const override {
    train.set_algorithm("hydra");
    train.set_ffn_blocks(config_.hydra.ffn_blocks);
  }

  bool needs_scores(uint64_t round, const std::vector<std::string>& participants) const override {
    if (round % config_.hydra.reselect_every == 0) return true;
    // A participant without a subnetwork (joined since the last selection) forces a
    // re-selection.
    for (const auto& id : participants)
      if (!masks_.count(id)) return true;
    return false;
  }

  Status check_importance_wanted(const std::string&) const override { return Status::Ok(); }

  void fill_score_task(pb::Task& task) const override {
    task.set_importance_batches(config_.hydra.importance_batches);
  }

  StatusOr<algorithms::hydra::UnitScores> parse_scores(
      const pb::ImportanceReport& req) const override {
    algorithms::hydra::UnitScores sc;
    sc.layers = static_cast<int>(config_.model.layers);
    sc.heads = algorithms::head_units(model_config(config_));  // one per KV head
    sc.ffn_blocks = static_cast<int>(config_.hydra.ffn_blocks);
    sc.layer.assign(req.layer().begin(), req.layer().end());
    sc.head.assign(req.head().begin(), req.head().end());
    sc.ffn.assign(req.ffn().begin(), req.ffn().end());
    sc.batches = static_cast<int>(req.batches());
    ATOLL_RETURN_IF_ERROR(algorithms::hydra::validate(sc, model_config(config_), sc.ffn_blocks));
    return sc;
  }

  // A budget below the cheapest subnetwork that trains anything would run rounds that train
  // nothing (the selection then gives the site the output head alone and it pushes 0 bytes).
  Status check_budget(const std::string& node, double budget) const override {
    const algorithms::hydra::CostModel cm = cost_model();
    const algorithms::Subnet cheapest = algorithms::hydra::cheapest_training_subnet(cm);
    if (algorithms::hydra::subnet_flops_per_token(cm, cheapest) <=
        algorithms::hydra::budget_flops_per_token(cm, budget))
      return Status::Ok();
    const double least = algorithms::hydra::cost_fraction(cm, cheapest);
    // The minimum to 4 decimals, and the value to give rounded up, so that it is accepted.
    char minimum[32], at_least[32];
    std::snprintf(minimum, sizeof(minimum), "%.4f", least);
    std::snprintf(at_least, sizeof(at_least), "%.4f", std::ceil(least * 1e4) / 1e4);
    return FailedPrecondition(
        "site '" + node + "' has Hydra budget " + shortest_decimal(budget) +
        ", below the cheapest subnetwork that trains anything in this model (the output head "
        "and one unit of one layer: " +
        minimum + " of the full model's training FLOPs): start the node with --budget at least " +
        at_least);
  }

  Status select(uint64_t round, const std::vector<ScoredNode>& scored,
                const AuditSink& audit) override {
    const algorithms::hydra::CostModel cm = cost_model();
    std::vector<algorithms::hydra::SiteInput> sites;
    for (const auto& s : scored) sites.push_back({s.node_id, s.budget, s.scores});
    algorithms::hydra::SelectOptions opt;
    opt.min_coverage = static_cast<int>(config_.hydra.min_coverage);
    opt.min_train_share = config_.hydra.min_train_share;
    opt.removal_penalty = config_.hydra.removal_penalty;
    auto trained_layers = algorithms::hydra::parse_trained_layers(config_.hydra.trained_layers);
    if (!trained_layers.ok()) return trained_layers.status();
    opt.trained_layers = *trained_layers;
    auto sel = algorithms::hydra::select_subnetworks(cm, sites, opt);
    if (!sel.ok()) return Internal("hydra selection failed: " + sel.status().message());
    masks_.clear();
    selected_round_ = round;
    std::string layers;
    for (uint8_t b : sel->layers) layers += b ? '1' : '0';
    for (const auto& s : sel->sites) {
      Mask m = mask_of(cm, s.subnet);
      audit("hydra_subnet", "round " + std::to_string(round) + " " + s.id + " cost " +
                                std::to_string(s.cost_fraction) + " " + m.subnet);
      masks_[s.id] = std::move(m);
    }
    audit("hydra_selected", "round " + std::to_string(round) + " S " + layers + " uncovered " +
                                std::to_string(sel->uncovered_units));
    return Status::Ok();
  }

  void fill_train_task(const std::string& node, uint64_t, pb::Task& task) const override {
    const Mask& m = masks_.at(node);  // every TRAIN participant has one
    task.set_subnet(m.subnet);
    task.set_mask_fingerprint(m.fingerprint);
  }

  Status check_update_shape(const std::string& node, uint64_t round,
                            const pb::TensorHeader& h) const override {
    const auto m = masks_.find(node);
    if (m != masks_.end() && h.fragment_offset() == 0 &&
        h.mask_fingerprint() == m->second.fingerprint && h.numel() == m->second.indices.size())
      return Status::Ok();
    return InvalidArgument("wrong mask: update has " + std::to_string(h.numel()) +
                           " elements and mask " + short_fp(h.mask_fingerprint()) + ", round " +
                           std::to_string(round) + " assigned '" + node + "' " +
                           (m == masks_.end()
                                ? std::string("no subnetwork")
                                : std::to_string(m->second.indices.size()) + " elements and mask " +
                                      short_fp(m->second.fingerprint)) +
                           "; train the Task's subnetwork");
  }

  StatusOr<std::vector<uint32_t>> update_indices(const std::string& node,
                                                 const pb::TensorHeader& h) const override {
    const auto m = masks_.find(node);
    if (m == masks_.end() || m->second.fingerprint != h.mask_fingerprint())
      return FailedPrecondition("stale mask: the subnetwork of '" + node +
                                "' changed while the update was being received");
    return m->second.indices;
  }

  Status apply(uint64_t round, const PendingUpdates& updates, bool has_momentum,
               std::vector<float>& theta, std::vector<float>& momentum) const override {
    std::vector<algorithms::hydra::MaskedUpdate> ups;  // std::map order: sorted node ids
    for (const auto& [id, u] : updates) {
      // An update is only accepted under the node's current mask (check_update_shape,
      // update_indices), so its forward share is that mask's.
      const auto m = masks_.find(id);
      if (m == masks_.end() && config_.hydra.forward_share_power != 0)
        return FailedPrecondition("no subnetwork for '" + id +
                                  "': its update cannot be weighed by its forward share");
      ups.push_back(
          {id, u.tokens, u.indices, u.delta, m != masks_.end() ? m->second.forward_share : 1.0});
    }
    std::vector<float> delta(theta.size());
    std::vector<uint32_t> held(theta.size());
    ATOLL_RETURN_IF_ERROR(algorithms::hydra::aggregate_masked_robust(
        ups, aggregator_, delta, held, config_.hydra.forward_share_power));
    return algorithms::hydra::masked_outer_step(outer_.options(), theta, momentum, delta, held,
                                                !has_momentum, config_.diloco.look_ahead_at(round));
  }

  // Compressed broadcast is refused with Hydra at config validation; the whole θ otherwise.
  algorithms::compress::UpdateRange synced_range(uint64_t) const override { return {0, numel_}; }

  std::vector<std::pair<std::string, std::string>> subnets() const override {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [id, m] : masks_) out.emplace_back(id, m.subnet);
    return out;
  }

  // The latest selection: {"selected_round": r, "subnets": {node id: subnet text}} (node ids
  // sorted), or nothing before the first. Later rounds follow it until the next selection
  // (needs_scores), so a restarted coordinator must too: a fresh selection would score on
  // another θ than the uninterrupted run did.
  std::string committed_state() const override {
    if (masks_.empty()) return {};
    boost::json::object subnets;
    for (const auto& [id, m] : masks_) subnets[id] = m.subnet;
    boost::json::object o;
    o["selected_round"] = selected_round_;
    o["subnets"] = std::move(subnets);
    return boost::json::serialize(o);
  }

  Status restore(const std::string& state) override {
    const std::string what = "the stored Hydra selection";
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(state, ec);
    const boost::json::object* o = ec ? nullptr : v.if_object();
    const boost::json::value* round = o ? o->if_contains("selected_round") : nullptr;
    const boost::json::value* subnets = o ? o->if_contains("subnets") : nullptr;
    boost::system::error_code round_ec;  // an integer >= 0, whichever JSON number kind holds it
    const uint64_t selected = round ? round->to_number<uint64_t>(round_ec) : 0;
    if (!round || round_ec || !subnets || !subnets->is_object())
      return DataLoss(what + " is not {\"selected_round\", \"subnets\"} (the store is corrupt)");
    const algorithms::hydra::CostModel cm = cost_model();
    std::map<std::string, Mask> masks;
    for (const auto& kv : subnets->as_object()) {
      const std::string_view id = kv.key();
      const boost::json::value& text = kv.value();
      if (!text.is_string())
        return DataLoss(what + " has no subnetwork text for '" + std::string(id) + "'");
      auto sub =
          algorithms::subnet_from_string(std::string(text.as_string()), cm.model, cm.ffn_blocks);
      if (!sub.ok())
        return DataLoss(what + " of '" + std::string(id) +
                        "' does not fit the model: " + sub.status().message());
      masks[std::string(id)] = mask_of(cm, *sub);
    }
    masks_ = std::move(masks);
    selected_round_ = selected;
    return Status::Ok();
  }

 private:
  // One node's assignment from the latest selection.
  struct Mask {
    std::string subnet;             // text form (algorithms/model/subnet.h)
    std::string fingerprint;        // SHA-256 of subnet
    std::vector<uint32_t> indices;  // trained elements, ascending
    double forward_share = 1.0;     // φ (algorithms/hydra/cost.h), weighs its update when p > 0
  };

  algorithms::hydra::CostModel cost_model() const {
    algorithms::hydra::CostModel cm;
    cm.model = model_config(config_);
    cm.ffn_blocks = static_cast<int>(config_.hydra.ffn_blocks);
    cm.seq = cm.model.seq_len;
    return cm;
  }

  static Mask mask_of(const algorithms::hydra::CostModel& cm, const algorithms::Subnet& s) {
    Mask m;
    m.subnet = algorithms::to_string(s);
    m.fingerprint = algorithms::subnet_fingerprint(s);
    m.indices = algorithms::trainable_indices(s, cm.model);
    m.forward_share = algorithms::hydra::forward_share(cm, s);
    return m;
  }

  const ExperimentConfig config_;
  const uint64_t numel_;  // θ
  const algorithms::AggregatorOptions aggregator_;  // robust.aggregator (not krum: validated)
  const algorithms::OuterNesterov outer_;
  std::map<std::string, Mask> masks_;  // by node id
  uint64_t selected_round_ = 0;        // the round whose scoring phase chose masks_
};

}  // namespace

std::unique_ptr<RoundStrategy> make_hydra_strategy(const ExperimentConfig& config,
                                                   const algorithms::ParamLayout& layout) {
  return std::make_unique<HydraStrategy>(config, layout.numel());
}

}  // namespace atl::coordinator
