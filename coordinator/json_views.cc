#include "coordinator/json_views.h"

#include <cmath>

#include "algorithms/hydra/cost.h"
#include "algorithms/model/subnet.h"

namespace atl::coordinator {
namespace json = boost::json;

json::value json_number(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

json::object to_json(const RoundRecord& r) {
  json::object o;
  o["round"] = r.round;
  json::array ps;
  for (const auto& p : r.participants) {
    json::object j;
    j["node_id"] = p.node_id;
    j["pushed"] = p.pushed;
    j["tokens"] = p.tokens;
    j["loss"] = json_number(p.loss);
    j["bytes_up"] = p.bytes_up;
    j["bytes_down"] = p.bytes_down;
    j["norm"] = json_number(p.norm);
    j["screen"] = p.screen;
    j["screen_reason"] = p.screen_reason;
    ps.push_back(std::move(j));
  }
  o["participants"] = std::move(ps);
  o["tokens"] = r.tokens;
  o["mean_loss"] = json_number(r.mean_loss);
  o["bytes_up"] = r.bytes_up;
  o["bytes_down"] = r.bytes_down;
  o["duration_s"] = json_number(r.duration_s);
  o["base_fingerprint"] = r.base_fingerprint;
  o["params_fingerprint"] = r.params_fingerprint;
  o["momentum_fingerprint"] = r.momentum_fingerprint;
  o["committed_unix_ms"] = r.committed_unix_ms;
  o["aggregator"] = r.aggregator;
  o["median_norm"] = json_number(r.median_norm);
  o["norm_limit"] = json_number(r.norm_limit);
  o["skipped"] = r.skipped;
  // Only with [privacy] on, so the records of other experiments keep their bytes.
  if (r.privacy_epsilon != -1.0) o["privacy_epsilon"] = json_number(r.privacy_epsilon);
  return o;
}

json::object to_json(const ExperimentConfig& c) {
  json::object o;
  o["name"] = c.name;
  o["seed"] = c.seed;
  o["algorithm"] = c.algorithm;
  o["model"] = {{"vocab", c.model.vocab},           {"dim", c.model.dim},
                {"layers", c.model.layers},         {"heads", c.model.heads},
                {"ffn_hidden", c.model.ffn_hidden}, {"seq_len", c.model.seq_len}};
  o["train"] = {{"batch_size", c.train.batch_size},
                {"lr", c.train.lr},
                {"codec", c.train.codec},
                {"error_feedback", c.train.error_feedback}};
  o["diloco"] = {{"rounds", c.diloco.rounds},
                 {"inner_steps", c.diloco.inner_steps},
                 {"outer_lr", c.diloco.outer_lr},
                 {"outer_momentum", c.diloco.outer_momentum},
                 {"min_nodes", c.diloco.min_nodes},
                 {"max_nodes", c.diloco.max_nodes},
                 {"round_deadline_s", c.diloco.round_deadline_s}};
  o["data"] = {{"source", c.data.source},
               {"tokenizer", c.data.tokenizer},
               {"split", c.data.split},
               {"val_fraction", c.data.val_fraction}};
  o["robust"] = {{"screen", c.robust.screen},
                 {"norm_multiple", c.robust.norm_multiple},
                 {"max_norm", c.robust.max_norm},
                 {"replay_cosine", c.robust.replay_cosine},
                 {"stale_margin", c.robust.stale_margin},
                 {"aggregator", c.robust.aggregator}};
  o["privacy"] = {{"clip_norm", c.privacy.clip_norm},
                  {"noise_multiplier", c.privacy.noise_multiplier},
                  {"delta", c.privacy.delta},
                  {"target_epsilon", c.privacy.target_epsilon}};
  o["hydra"] = {{"reselect_every", c.hydra.reselect_every},
                {"min_coverage", c.hydra.min_coverage},
                {"ffn_blocks", c.hydra.ffn_blocks},
                {"importance_batches", c.hydra.importance_batches},
                {"min_train_share", c.hydra.min_train_share},
                {"removal_penalty", c.hydra.removal_penalty},
                {"trained_layers", c.hydra.trained_layers},
                {"forward_share_power", c.hydra.forward_share_power}};
  o["secagg"] = {{"enabled", c.secagg.enabled},
                 {"clip_range", c.secagg.clip_range},
                 {"quantization_range", c.secagg.quantization_range},
                 {"threshold", c.secagg.threshold},
                 {"masking", c.secagg.masking}};
  return o;
}

json::object to_json(const ExperimentSummary& s) {
  const ExperimentRecord& r = s.record;
  json::object o;
  o["id"] = r.id;
  o["state"] = experiment_state_name(r.state);
  o["live"] = s.live;
  o["current_round"] = r.current_round;
  o["rounds"] = s.config.diloco.rounds;
  o["params"] = r.numel;
  o["params_fingerprint"] = r.params_fingerprint;
  o["created_unix_ms"] = r.created_unix_ms;
  o["failure"] = r.failure;
  o["active_nodes"] = s.active_nodes;
  o["node_address"] = s.node_address;
  o["config"] = to_json(s.config);
  o["config_toml"] = r.config_toml;
  return o;
}

json::object to_json(const NodeView& n) {
  json::object o;
  o["node_id"] = n.node_id;
  o["status"] = n.status;
  o["device"] = n.device;
  o["budget"] = json_number(n.budget);
  o["ready"] = n.ready;
  o["round"] = n.round;
  o["inner_step"] = n.inner_step;
  o["loss"] = json_number(n.loss);
  o["tokens_per_s"] = json_number(n.tokens_per_s);
  o["joined_unix_ms"] = n.joined_unix_ms;
  o["last_seen_unix_ms"] = n.last_seen_unix_ms;
  o["rounds"] = n.rounds;
  o["tokens"] = n.tokens;
  o["bytes_up"] = n.bytes_up;
  o["bytes_down"] = n.bytes_down;
  return o;
}

namespace {
json::array points(const Series& s) {
  json::array a;
  a.reserve(s.size());
  for (const auto& p : s) a.push_back(json::array{json_number(p.round), json_number(p.value)});
  return a;
}
}  // namespace

json::object to_json(const MetricSeries& m) {
  json::object o;
  o["total_rounds"] = m.total_rounds;
  o["bucket"] = m.bucket;
  json::object g;
  for (const auto& [name, s] : m.global) g[name] = points(s);
  o["global"] = std::move(g);
  json::object pn;
  for (const auto& [metric, nodes] : m.per_node) {
    json::object per;
    for (const auto& [node, s] : nodes) per[node] = points(s);
    pn[metric] = std::move(per);
  }
  o["per_node"] = std::move(pn);
  return o;
}

StatusOr<json::object> subnet_json(const std::string& node_id, const std::string& subnet,
                                   const ExperimentConfig& c) {
  const algorithms::ModelConfig model = model_config(c);
  const int blocks = static_cast<int>(c.hydra.ffn_blocks);
  ATOLL_ASSIGN_OR_RETURN(algorithms::Subnet s,
                         algorithms::subnet_from_string(subnet, model, blocks));
  algorithms::hydra::CostModel cm;
  cm.model = model;
  cm.ffn_blocks = blocks;
  cm.seq = model.seq_len;  // the length sites train with (as the selection's cost model)
  json::array layers;
  for (const auto& l : s.layers) {
    json::array heads;
    for (size_t h = 0; h < l.heads.size(); ++h)
      if (l.heads[h]) heads.push_back(static_cast<uint64_t>(h));
    uint64_t kept = 0;
    for (uint8_t b : l.ffn_blocks) kept += b ? 1 : 0;
    layers.push_back(
        json::object{{"trained", l.train}, {"heads", std::move(heads)}, {"ffn_blocks_kept", kept}});
  }
  json::object o;
  o["node_id"] = node_id;
  o["subnet"] = subnet;
  o["flops_fraction"] = json_number(algorithms::hydra::cost_fraction(cm, s));
  o["layers"] = std::move(layers);
  return o;
}

}  // namespace atl::coordinator
