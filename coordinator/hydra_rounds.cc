// CoordinatorService, Hydra parts (docs/hydra.md): importance reports, selection at the end of
// a round's scoring phase, masked aggregation at its close.
#include <algorithm>

#include "algorithms/hydra/aggregate.h"
#include "algorithms/hydra/cost.h"
#include "algorithms/hydra/select.h"
#include "algorithms/model/subnet.h"
#include "coordinator/service.h"
#include "transport/grpc_status.h"

namespace atl::coordinator {

namespace pb = atoll_pb::v1;
using transport::to_grpc;

bool CoordinatorService::hydra_needs_scores_locked() const {
  if (!config_.is_hydra() || !round_.open) return false;
  if (round_.round % config_.hydra.reselect_every == 0) return true;
  // A participant without a subnetwork (joined since the last selection) forces a re-selection.
  for (const auto& id : round_.participants)
    if (!hydra_masks_.count(id)) return true;
  return false;
}

grpc::Status CoordinatorService::ReportImportance(grpc::ServerContext* ctx,
                                                  const pb::ImportanceReport* req,
                                                  pb::ImportanceAck* resp) {
  std::lock_guard<std::mutex> lk(mu_);
  auto id_or = member_locked(*ctx, req->experiment_id());
  if (!id_or.ok()) return to_grpc(id_or.status());
  const std::string id = *id_or;
  Status st;
  if (!config_.is_hydra()) {
    st = FailedPrecondition("experiment '" + experiment_id_ +
                            "' does not run algorithm \"hydra\"; importance is not needed");
  } else if (!round_.scoring || req->round() != round_.round || !is_participant_locked(id)) {
    st = FailedPrecondition("stale round: importance for round " + std::to_string(req->round()) +
                            ", but no scoring phase of that round includes '" + id + "'");
  } else if (round_.scores.count(id)) {
    st = AlreadyExists("importance of '" + id + "' for round " + std::to_string(req->round()) +
                       " was already received");
  }
  algorithms::hydra::UnitScores sc;
  if (st.ok()) {
    sc.layers = static_cast<int>(config_.model.layers);
    sc.heads = static_cast<int>(config_.model.heads);
    sc.ffn_blocks = static_cast<int>(config_.hydra.ffn_blocks);
    sc.layer.assign(req->layer().begin(), req->layer().end());
    sc.head.assign(req->head().begin(), req->head().end());
    sc.ffn.assign(req->ffn().begin(), req->ffn().end());
    sc.batches = static_cast<int>(req->batches());
    st = algorithms::hydra::validate(sc, model_config(config_), sc.ffn_blocks);
  }
  if (!st.ok()) {
    audit("importance_rejected", id + ": " + st.to_string());
    resp->set_accepted(false);
    resp->set_message(st.message());
    return to_grpc(st);
  }
  round_.scores[id] = std::move(sc);
  audit("importance", id + " round " + std::to_string(round_.round));
  resp->set_accepted(true);
  maybe_close_round_locked(Clock::now());
  cv_.notify_all();
  return grpc::Status::OK;
}

void CoordinatorService::hydra_finish_scoring_locked() {
  // Participants that did not report by now leave the round; the rest need quorum.
  std::vector<std::string> kept;
  for (const auto& id : round_.participants)
    if (round_.scores.count(id)) kept.push_back(id);
  if (kept.size() < config_.diloco.min_nodes)
    return restart_round_locked("only " + std::to_string(kept.size()) +
                                " importance reports arrived, diloco.min_nodes = " +
                                std::to_string(config_.diloco.min_nodes));
  algorithms::hydra::CostModel cm;
  cm.model = model_config(config_);
  cm.ffn_blocks = static_cast<int>(config_.hydra.ffn_blocks);
  cm.seq = cm.model.seq_len;
  std::vector<algorithms::hydra::SiteInput> sites;
  for (const auto& id : kept)
    sites.push_back({id, nodes_.at(id).record.budget, round_.scores.at(id)});
  algorithms::hydra::SelectOptions opt;
  opt.min_coverage = static_cast<int>(config_.hydra.min_coverage);
  opt.min_train_share = config_.hydra.min_train_share;
  opt.removal_penalty = config_.hydra.removal_penalty;
  auto sel = algorithms::hydra::select_subnetworks(cm, sites, opt);
  if (!sel.ok()) {
    set_state_locked(ExperimentState::kFailed, "hydra selection failed: " + sel.status().message());
    return;
  }
  hydra_masks_.clear();
  std::string layers;
  for (uint8_t b : sel->layers) layers += b ? '1' : '0';
  for (const auto& s : sel->sites) {
    HydraMask m;
    m.subnet = algorithms::to_string(s.subnet);
    m.fingerprint = algorithms::subnet_fingerprint(s.subnet);
    m.indices = algorithms::trainable_indices(s.subnet, cm.model);
    audit("hydra_subnet", "round " + std::to_string(round_.round) + " " + s.id + " cost " +
                              std::to_string(s.cost_fraction) + " " + m.subnet);
    hydra_masks_[s.id] = std::move(m);
  }
  audit("hydra_selected", "round " + std::to_string(round_.round) + " S " + layers + " uncovered " +
                              std::to_string(sel->uncovered_units));
  round_.participants = kept;
  round_.scoring = false;
  cv_.notify_all();
}

Status CoordinatorService::hydra_aggregate_locked(std::vector<float>& theta,
                                                  std::vector<float>& momentum,
                                                  bool first_step) const {
  std::vector<algorithms::hydra::MaskedUpdate> ups;  // std::map order: sorted node ids
  for (const auto& [id, u] : round_.updates) ups.push_back({id, u.tokens, u.indices, u.delta});
  std::vector<float> delta(theta.size());
  std::vector<uint32_t> held(theta.size());
  ATOLL_RETURN_IF_ERROR(algorithms::hydra::aggregate_masked(ups, delta, held));
  return algorithms::hydra::masked_outer_step(outer_.options(), theta, momentum, delta, held,
                                              first_step);
}

std::vector<std::pair<std::string, std::string>> CoordinatorService::hydra_subnets() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [id, m] : hydra_masks_) out.emplace_back(id, m.subnet);
  return out;
}

}  // namespace atl::coordinator
