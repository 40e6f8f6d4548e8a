#include "coordinator/json_views.h"

#include <toml++/toml.h>

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
  if (!r.late_bytes_down.empty()) {  // a slow node's pulls that outlived their round
    json::object late;
    for (const auto& [node, bytes] : r.late_bytes_down) late[node] = bytes;
    o["late_bytes_down"] = std::move(late);
  }
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

namespace {

// A TOML value as JSON: tables are objects, arrays arrays, integers int64, floats double.
json::value toml_to_json(const toml::node& n) {
  if (const toml::table* t = n.as_table()) {
    json::object o;
    for (const auto& [key, value] : *t) o[std::string(key.str())] = toml_to_json(value);
    return o;
  }
  if (const toml::array* a = n.as_array()) {
    json::array out;
    for (const toml::node& e : *a) out.push_back(toml_to_json(e));
    return out;
  }
  if (auto v = n.value_exact<int64_t>()) return *v;
  if (auto v = n.value_exact<double>()) return *v;
  if (auto v = n.value_exact<bool>()) return *v;
  if (auto v = n.value_exact<std::string>()) return json::string(*v);
  return nullptr;
}

}  // namespace

// Every key, section by section as the TOML has them: the canonical text with every key
// (to_toml), read back, so that the JSON view and the stored config cannot disagree or miss one.
json::object to_json(const ExperimentConfig& c) {
#if TOML_EXCEPTIONS
  try {
    return toml_to_json(toml::parse(to_toml(c, /*every_key=*/true))).as_object();
  } catch (const toml::parse_error&) {
    return {};  // to_toml's text always parses (tested); nothing rather than a partial view
  }
#else
  toml::parse_result r = toml::parse(to_toml(c, /*every_key=*/true));
  return r ? toml_to_json(r.table()).as_object() : json::object{};
#endif
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
  if (n.has_progress) {
    o["round"] = n.round;
    o["inner_step"] = n.inner_step;
    o["tokens_per_s"] = json_number(n.tokens_per_s);
  } else {
    o["round"] = nullptr;
    o["inner_step"] = nullptr;
    o["tokens_per_s"] = nullptr;
  }
  o["loss"] = json_number(n.loss);
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
