#include "coordinator/experiment_config.h"

#include <openssl/rand.h>
#include <toml++/toml.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/spec.h"
#include "algorithms/hydra/aggregate.h"
#include "algorithms/secagg/quantize.h"
#include "coordinator/store.h"
#include "kernels/core/file_io.h"
#include "kernels/core/number_text.h"

namespace atl::coordinator {
namespace {

std::string show(const toml::node& n) {
  std::ostringstream os;
  if (n.is_table()) {
    os << "{...}";
  } else if (auto* sv = n.as_string()) {
    os << '"' << sv->get() << '"';
  } else if (auto* a = n.as_array()) {
    os << *a;
  } else {
    n.visit([&](auto&& v) { os << v; });
  }
  std::string s = os.str();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// One accepted key: how to store its value. Returns "" or the complaint ("must be an integer").
using Setter = std::function<std::string(const toml::node&)>;
struct Key {
  std::string name;
  Setter set;
};

// `min`: the key's real lower bound (validate_experiment_config checks it again with its own
// words), so that a value out of the type's range is told the range it must be in.
Setter u32(uint32_t* out, uint32_t min = 0) {
  return [out, min](const toml::node& n) -> std::string {
    auto v = n.value_exact<int64_t>();
    if (!v) return "must be an integer";
    if (*v < 0 || *v > std::numeric_limits<uint32_t>::max())
      return "must be an integer in [" + std::to_string(min) + ", 4294967295]";
    *out = static_cast<uint32_t>(*v);
    return "";
  };
}
Setter u64(uint64_t* out) {
  return [out](const toml::node& n) -> std::string {
    auto v = n.value_exact<int64_t>();
    if (!v) return "must be an integer";
    if (*v < 0) return "must be an integer in [0, " + std::to_string(INT64_MAX) + "]";
    *out = static_cast<uint64_t>(*v);
    return "";
  };
}
Setter f64(double* out) {
  return [out](const toml::node& n) -> std::string {
    if (auto d = n.value_exact<double>()) {
      *out = *d;
    } else if (auto i = n.value_exact<int64_t>()) {
      *out = static_cast<double>(*i);
    } else {
      return "must be a number";
    }
    if (!std::isfinite(*out)) return "must be a finite number";
    return "";
  };
}
Setter str(std::string* out) {
  return [out](const toml::node& n) -> std::string {
    auto v = n.value_exact<std::string>();
    if (!v) return "must be a string (in double quotes)";
    *out = *v;
    return "";
  };
}
Setter boolean(bool* out) {
  return [out](const toml::node& n) -> std::string {
    auto v = n.value_exact<bool>();
    if (!v) return "must be true or false";
    *out = *v;
    return "";
  };
}
Setter str_list(std::vector<std::string>* out) {
  return [out](const toml::node& n) -> std::string {
    const toml::array* a = n.as_array();
    if (!a) return "must be an array of strings, e.g. [\"a.txt\", \"b.txt\"]";
    out->clear();
    for (const auto& e : *a) {
      auto v = e.value_exact<std::string>();
      if (!v) return "must be an array of strings, e.g. [\"a.txt\", \"b.txt\"]";
      out->push_back(*v);
    }
    return "";
  };
}

struct Table {
  std::string name;  // "" = top level
  std::vector<Key> keys;
};

// Sets the schema's keys from `t`; every unknown key and bad value is appended to `errors`.
void apply_table(const toml::table& t, const Table& schema, std::string_view source,
                 const std::vector<std::string>& subtables, std::vector<Status>& errors) {
  const std::string prefix = schema.name.empty() ? "" : schema.name + ".";
  for (const auto& [k, node] : t) {
    const std::string key(k.str());
    if (schema.name.empty() &&
        std::find(subtables.begin(), subtables.end(), key) != subtables.end()) {
      if (!node.is_table())
        errors.push_back(
            InvalidArgument(std::string(source) + ": " + key + " must be a table ([" + key + "])"));
      continue;  // handled by its own schema
    }
    const Key* match = nullptr;
    for (const auto& sk : schema.keys)
      if (sk.name == key) match = &sk;
    if (!match) {
      std::string known, best;
      size_t best_d = 3;  // suggest only close matches
      for (const auto& sk : schema.keys) {
        known += (known.empty() ? "" : ", ") + sk.name;
        const size_t d = edit_distance(key, sk.name);
        if (d < best_d) best_d = d, best = sk.name;
      }
      std::string best_table;  // a misspelled section ([dilocco]) at the top level
      if (schema.name.empty())
        for (const auto& st : subtables) {
          known += ", [" + st + "]";
          const size_t d = edit_distance(key, st);
          if (d < best_d) best_d = d, best_table = st, best.clear();
        }
      std::string msg = std::string(source) + ": unknown key " + prefix + key;
      if (!best_table.empty()) msg += " (did you mean [" + best_table + "]?)";
      if (!best.empty()) msg += " (did you mean " + prefix + best + "?)";
      msg += "; known keys" + (schema.name.empty() ? std::string() : " in [" + schema.name + "]") +
             ": " + known;
      errors.push_back(InvalidArgument(msg));
      continue;
    }
    const std::string why = match->set(node);
    if (!why.empty())
      errors.push_back(InvalidArgument(std::string(source) + ": " + prefix + key + " = " +
                                       show(node) + " " + why));
  }
}

// `ch` as it stands inside a TOML basic string: quote, backslash and control bytes escaped.
void append_toml_char(std::string& o, char ch) {
  switch (ch) {
    case '"':
      o += "\\\"";
      break;
    case '\\':
      o += "\\\\";
      break;
    case '\b':
      o += "\\b";
      break;
    case '\t':
      o += "\\t";
      break;
    case '\n':
      o += "\\n";
      break;
    case '\f':
      o += "\\f";
      break;
    case '\r':
      o += "\\r";
      break;
    default: {
      // TOML forbids every other control character (NUL included) unescaped in a string.
      const auto byte = static_cast<unsigned char>(ch);
      if (byte < 0x20 || byte == 0x7f) {
        char escaped[8];
        std::snprintf(escaped, sizeof(escaped), "\\u%04X", byte);
        o += escaped;
      } else {
        o += ch;
      }
    }
  }
}

Status range_error(std::string_view source, const std::string& key, const std::string& value,
                   const std::string& rule) {
  // A value from the file is echoed with its control bytes escaped as TOML writes them (a NUL
  // or an escape sequence would otherwise reach the terminal or cut the line).
  std::string shown;
  for (const char ch : value) {
    const auto byte = static_cast<unsigned char>(ch);
    if (byte < 0x20 || byte == 0x7f)
      append_toml_char(shown, ch);
    else
      shown += ch;
  }
  return InvalidArgument(std::string(source) + ": " + key + " = " + shown + " " + rule);
}

// ε for a message: 4 significant digits ("19.05", "inf").
std::string four_digits(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// The [privacy] section's ranges, the combinations it cannot be part of, and its budget.
std::vector<Status> privacy_errors(const ExperimentConfig& c, std::string_view src) {
  std::vector<Status> errors;
  auto add = [&errors](Status s) { errors.push_back(std::move(s)); };
  auto d = shortest_decimal;
  const PrivacySection& pv = c.privacy;
  if (!(pv.clip_norm >= 0 && std::isfinite(pv.clip_norm)))
    add(range_error(src, "privacy.clip_norm", d(pv.clip_norm),
                    "must be finite and >= 0 (0 = no differential privacy)"));
  if (!(pv.noise_multiplier >= 0 && pv.noise_multiplier <= kMaxNoiseMultiplier))
    add(range_error(src, "privacy.noise_multiplier", d(pv.noise_multiplier),
                    "must be in [0, " + d(kMaxNoiseMultiplier) + "]"));
  if (!(pv.delta > 0 && pv.delta < 1))
    add(range_error(src, "privacy.delta", d(pv.delta), "must be in (0, 1)"));
  if (!(pv.target_epsilon >= 0 && std::isfinite(pv.target_epsilon)))
    add(range_error(src, "privacy.target_epsilon", d(pv.target_epsilon),
                    "must be finite and >= 0 (0 = no budget)"));
  if (pv.noise_key != "secret" && pv.noise_key != "seed")
    add(range_error(src, "privacy.noise_key", "\"" + pv.noise_key.substr(0, 64) + "\"",
                    "must be \"secret\" (a random key kept in the store) or \"seed\" (from the "
                    "experiment seed: the same noise on every run, removable by anyone who "
                    "knows the seed)"));
  if (!errors.empty()) return errors;
  if (!(pv.clip_norm > 0)) {
    if (pv.noise_multiplier > 0 || pv.target_epsilon > 0)
      add(range_error(src, "privacy.clip_norm", "0",
                      "turns differential privacy off; set it > 0 to use "
                      "privacy.noise_multiplier or privacy.target_epsilon"));
    return errors;
  }
  if (c.is_hydra())
    add(range_error(src, "privacy.clip_norm", d(pv.clip_norm),
                    "cannot be used with algorithm = \"hydra\" (its masked aggregation averages "
                    "each element over the sites that hold it, so the weights cannot be equal)"));
  if (c.robust.screen != "off")
    add(range_error(src, "privacy.clip_norm", d(pv.clip_norm),
                    "needs robust.screen = \"off\" (the fixed clip bounds every update; a "
                    "median-based limit would let one site change how the others are clipped)"));
  if (c.robust.aggregator != "mean")
    add(range_error(src, "privacy.clip_norm", d(pv.clip_norm),
                    "needs robust.aggregator = \"mean\" (the noise is calibrated to an unweighted "
                    "mean of clipped updates, not to \"" +
                        c.robust.aggregator + "\")"));
  if (pv.target_epsilon > 0) {
    const uint64_t rounds = c.diloco.rounds;
    const double eps = algorithms::epsilon_after_rounds(rounds, pv.noise_multiplier, pv.delta);
    if (!(eps <= pv.target_epsilon)) {
      const uint64_t fit =
          algorithms::max_rounds_within(pv.target_epsilon, pv.noise_multiplier, pv.delta, rounds);
      const double z = algorithms::min_noise_multiplier_within(pv.target_epsilon, rounds, pv.delta);
      const std::string reaches = std::string(src) + ": diloco.rounds = " + std::to_string(rounds) +
                                  " with privacy.noise_multiplier = " + d(pv.noise_multiplier) +
                                  " reaches epsilon = " + four_digits(eps) +
                                  " > privacy.target_epsilon = " + d(pv.target_epsilon) +
                                  " at delta = " + d(pv.delta);
      if (!std::isfinite(z))  // below the conversion's floor: no noise and no round count fits
        add(InvalidArgument(reaches +
                            "; no noise multiplier reaches it (any noise leaves epsilon >= " +
                            four_digits(algorithms::epsilon_floor(pv.delta)) +
                            " at this delta): raise privacy.target_epsilon or privacy.delta"));
      else
        add(InvalidArgument(
            reaches + "; use " +
            (fit > 0 ? "diloco.rounds <= " + std::to_string(fit) + " or " : std::string()) +
            "privacy.noise_multiplier >= " + d(z)));
    }
  }
  return errors;
}

// The [secagg] section's ranges and the combinations it cannot be part of: the coordinator
// cannot screen, weigh, clip or select what it cannot see.
std::vector<Status> secagg_errors(const ExperimentConfig& c, std::string_view src) {
  std::vector<Status> errors;
  const SecAggSection& sa = c.secagg;
  if (!sa.enabled) return errors;
  auto add = [&errors](Status s) { errors.push_back(std::move(s)); };
  auto refuse = [&](const std::string& rule) {
    add(range_error(src, "secagg.enabled", "true", rule));
  };
  if (Status q = algorithms::secagg::check_quantization(
          {.clip_range = sa.clip_range, .quantization_range = sa.quantization_range},
          c.diloco.max_nodes);
      !q.ok())
    add(InvalidArgument(std::string(src) + ": " + q.message()));
  if (sa.threshold < 2 || sa.threshold > c.diloco.min_nodes)
    add(range_error(src, "secagg.threshold", std::to_string(sa.threshold),
                    "must be >= 2 and <= diloco.min_nodes = " + std::to_string(c.diloco.min_nodes) +
                        " (a round needs t sites to reveal shares)"));
  if (c.diloco.min_nodes < 2)
    refuse("needs diloco.min_nodes >= 2 (the sum of one site's update is that update)");
  if (c.diloco.max_nodes > 255)
    refuse("needs diloco.max_nodes <= 255 (Shamir shares over GF(256) name at most 255 sites)");
  if (c.is_hydra())
    refuse("cannot be used with algorithm = \"hydra\" (its sites push different elements)");
  if (c.diloco.streaming())
    refuse("cannot be used with Streaming DiLoCo (set diloco.streaming_fragments = 1 and "
           "diloco.overlap_steps = 0)");
  if (c.train.codec != "none")
    refuse("needs train.codec = \"none\" (secure aggregation quantizes the update itself)");
  if (c.robust.screen != "off")
    refuse(
        "needs robust.screen = \"off\" (the coordinator cannot screen updates it cannot see: "
        "neither their norms nor replays)");
  if (c.robust.aggregator != "mean")
    refuse("needs robust.aggregator = \"mean\" (only a sum can be aggregated securely, not \"" +
           c.robust.aggregator + "\")");
  if (c.privacy.clip_norm > 0)
    refuse("cannot be used with privacy.clip_norm > 0 (per-site clipping needs each update in "
           "the clear)");
  return errors;
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The [lora] section: its ranges, its base, and the algorithms it cannot be part of.
std::vector<Status> lora_errors(const ExperimentConfig& c, std::string_view src) {
  std::vector<Status> errors;
  auto add = [&errors](Status s) { errors.push_back(std::move(s)); };
  const LoraSection& l = c.lora;
  if (!l.enabled()) {
    if (!l.base.empty() || !l.base_fingerprint.empty())
      add(range_error(src, "lora.rank", "0",
                      "turns LoRA off; set it in [1, 4096] to fine-tune adapters over "
                      "lora.base, or remove lora.base"));
    return errors;
  }
  if (l.rank > 4096)
    add(range_error(src, "lora.rank", std::to_string(l.rank),
                    "must be in [1, 4096] (0 = no adapters)"));
  if (!(l.alpha > 0 && std::isfinite(l.alpha)))
    add(range_error(src, "lora.alpha", shortest_decimal(l.alpha), "must be finite and > 0"));
  if (auto t = algorithms::parse_lora_targets(l.targets); !t.ok())
    add(range_error(src, "lora.targets", "\"" + l.targets + "\"", t.status().message()));
  if (auto d = algorithms::parse_base_storage(l.base_dtype); !d.ok())
    add(range_error(src, "lora.base_dtype", "\"" + l.base_dtype + "\"", d.status().message()));
  if (l.base.empty())
    add(range_error(src, "lora.base", "\"\"",
                    "must name the base checkpoint the adapters fine-tune (`atoll train` or "
                    "`atoll import hf` writes one)"));
  if (!l.base_fingerprint.empty() && !is_sha256_hex(l.base_fingerprint))
    add(range_error(src, "lora.base_fingerprint", "\"" + l.base_fingerprint + "\"",
                    "must be 64 lowercase hex digits (SHA-256), or \"\" to take the base's"));
  if (c.is_hydra())
    add(range_error(src, "lora.rank", std::to_string(l.rank),
                    "cannot be used with algorithm = \"hydra\" (subnetworks select units of "
                    "the full model, not adapters); use algorithm = \"diloco\""));
  if (c.model.moe_experts > 0)
    add(range_error(src, "lora.rank", std::to_string(l.rank),
                    "cannot be used with an MoE model (model.moe_experts > 0) yet"));
  return errors;
}

}  // namespace

std::vector<Status> experiment_config_errors(const ExperimentConfig& c, std::string_view src) {
  std::vector<Status> errors;
  auto add = [&errors](Status s) { errors.push_back(std::move(s)); };
  auto u = [](uint64_t v) { return std::to_string(v); };
  auto d = shortest_decimal;
  if (!valid_id(c.name)) add(range_error(src, "name", "\"" + c.name + "\"", kIdRule));
  const ModelSection& m = c.model;
  const size_t errors_before_model = errors.size();
  if (m.vocab < 2) add(range_error(src, "model.vocab", u(m.vocab), "must be >= 2"));
  if (m.dim < 1) add(range_error(src, "model.dim", u(m.dim), "must be >= 1"));
  if (m.layers < 1) add(range_error(src, "model.layers", u(m.layers), "must be >= 1"));
  if (m.heads < 1) add(range_error(src, "model.heads", u(m.heads), "must be >= 1"));
  if (m.heads >= 1 && m.dim % m.heads != 0)
    add(range_error(src, "model.dim", u(m.dim),
                    "must be divisible by model.heads = " + u(m.heads)));
  else if (m.heads >= 1 && (m.dim / m.heads) % 2 != 0)
    add(range_error(src, "model.heads", u(m.heads),
                    "must make dim/heads even (RoPE rotates pairs); dim = " + u(m.dim)));
  if (m.ffn_hidden < 1) add(range_error(src, "model.ffn_hidden", u(m.ffn_hidden), "must be >= 1"));
  if (m.seq_len < 1) add(range_error(src, "model.seq_len", u(m.seq_len), "must be >= 1"));
  if (!(m.rope_base > 0)) add(range_error(src, "model.rope_base", d(m.rope_base), "must be > 0"));
  if (!(m.norm_eps > 0)) add(range_error(src, "model.norm_eps", d(m.norm_eps), "must be > 0"));
  if (m.kv_heads > 0 && m.heads >= 1 && m.heads % m.kv_heads != 0)
    add(range_error(src, "model.kv_heads", u(m.kv_heads),
                    "must divide model.heads = " + u(m.heads) + " (0 = heads)"));
  // The model's own checks assume that the dense keys above are valid.
  const bool dense_valid = errors.size() == errors_before_model;
  // Bounds that keep the model's own arithmetic in range, each named with its key.
  bool moe_in_range = true;
  if (m.moe_experts > 0) {
    auto bound = [&](const char* key, uint32_t value, uint32_t most) {
      if (value <= most) return;
      moe_in_range = false;
      add(range_error(src, key, u(value), "must be <= " + u(most)));
    };
    bound("model.moe_experts", m.moe_experts, 4096);
    bound("model.moe_top_k", m.moe_top_k, 4096);
    bound("model.moe_every", m.moe_every, 4096);
    bound("model.moe_hidden", m.moe_hidden, 1u << 20);
    bound("model.moe_shared_hidden", m.moe_shared_hidden, 1u << 20);
  }
  if (moe_in_range && dense_valid && !c.is_lora()) {
    // A LoRA experiment's [model] is its base's, read (and so already held) when it resolves.
    if (Status s = check_model_size(c, src); !s.ok()) add(s);
  }

  const TrainSection& t = c.train;
  if (t.batch_size < 1) add(range_error(src, "train.batch_size", u(t.batch_size), "must be >= 1"));
  if (!(t.lr > 0)) add(range_error(src, "train.lr", d(t.lr), "must be > 0"));
  if (!(t.min_lr >= 0 && t.min_lr <= t.lr))
    add(range_error(src, "train.min_lr", d(t.min_lr),
                    "must be in [0, train.lr = " + d(t.lr) + "]"));
  if (!(t.weight_decay >= 0))
    add(range_error(src, "train.weight_decay", d(t.weight_decay), "must be >= 0"));
  if (!(t.beta1 >= 0 && t.beta1 < 1))
    add(range_error(src, "train.beta1", d(t.beta1), "must be in [0, 1)"));
  if (!(t.beta2 >= 0 && t.beta2 < 1))
    add(range_error(src, "train.beta2", d(t.beta2), "must be in [0, 1)"));
  if (!(t.grad_clip >= 0))
    add(range_error(src, "train.grad_clip", d(t.grad_clip), "must be >= 0 (0 = no clipping)"));
  if (t.codec.empty() || t.codec.size() > 128 ||
      t.codec.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789:.+_-") != std::string::npos)
    add(range_error(src, "train.codec", "\"" + t.codec + "\"",
                    "must be a codec spec such as \"none\", \"bf16\" or \"topk:0.02+int4\""));
  else if (t.codec != "none")
    // Here, with the file's name, rather than when the coordinator builds the codec (exit 1,
    // no file name).
    if (auto codec = algorithms::compress::Codec::create(t.codec); !codec.ok())
      add(range_error(src, "train.codec", "\"" + t.codec + "\"",
                      "is not a codec: " + codec.status().message()));
  if (!algorithms::parse_precision(t.precision).ok())
    add(range_error(src, "train.precision", "\"" + t.precision + "\"",
                    "must be one of \"fp32\", \"bf16\", \"fp8\", \"mxfp8\", \"nvfp4\""));
  if (t.optimizer != "adamw" && t.optimizer != "muon")
    add(range_error(src, "train.optimizer", "\"" + t.optimizer.substr(0, 64) + "\"",
                    "must be \"adamw\" or \"muon\""));
  if (!(t.muon_momentum >= 0 && t.muon_momentum < 1))
    add(range_error(src, "train.muon_momentum", d(t.muon_momentum), "must be in [0, 1)"));

  const DilocoSection& g = c.diloco;
  if (g.rounds < 1) add(range_error(src, "diloco.rounds", u(g.rounds), "must be >= 1"));
  if (g.inner_steps < 1)
    add(range_error(src, "diloco.inner_steps", u(g.inner_steps), "must be >= 1"));
  if (!(g.outer_lr > 0)) add(range_error(src, "diloco.outer_lr", d(g.outer_lr), "must be > 0"));
  if (!(g.outer_momentum >= 0 && g.outer_momentum < 1))
    add(range_error(src, "diloco.outer_momentum", d(g.outer_momentum), "must be in [0, 1)"));
  if (g.min_nodes < 1) add(range_error(src, "diloco.min_nodes", u(g.min_nodes), "must be >= 1"));
  if (g.max_nodes < g.min_nodes)
    add(range_error(src, "diloco.max_nodes", u(g.max_nodes),
                    "must be >= diloco.min_nodes = " + u(g.min_nodes)));
  // Upper bounds: a time is a count of nanoseconds in 64 bits (~292 years), and 1e10 s, meant
  // as "never", wrapped into the past (every node lost at once, every round restarted).
  // Lower: a heartbeat every 1e-300 s marked the node lost and rejoined thousands of times a
  // second.
  constexpr double kMaxWaitS = 30 * 86400.0, kMaxHeartbeatS = 3600.0, kMinHeartbeatS = 0.1;
  if (!(g.round_deadline_s > 0 && g.round_deadline_s <= kMaxWaitS))
    add(range_error(src, "diloco.round_deadline_s", d(g.round_deadline_s),
                    "must be > 0 and <= 2592000 seconds (30 days)"));
  if (!(g.heartbeat_interval_s >= kMinHeartbeatS && g.heartbeat_interval_s <= kMaxHeartbeatS))
    add(range_error(src, "diloco.heartbeat_interval_s", d(g.heartbeat_interval_s),
                    "must be in [0.1, 3600] seconds"));
  if (g.lost_after_heartbeats < 2)
    add(range_error(src, "diloco.lost_after_heartbeats", u(g.lost_after_heartbeats),
                    "must be >= 2"));
  else if (g.heartbeat_interval_s >= kMinHeartbeatS && g.heartbeat_interval_s <= kMaxHeartbeatS &&
           g.heartbeat_interval_s * g.lost_after_heartbeats > kMaxWaitS)
    add(range_error(src, "diloco.lost_after_heartbeats", u(g.lost_after_heartbeats),
                    "times diloco.heartbeat_interval_s = " + d(g.heartbeat_interval_s) +
                        " must be <= 2592000 seconds (30 days)"));
  if (!(g.start_wait_s >= 0 && g.start_wait_s <= kMaxHeartbeatS))
    add(range_error(src, "diloco.start_wait_s", d(g.start_wait_s),
                    "must be >= 0 and <= 3600 seconds"));
  if (g.keep_params < 1)
    add(range_error(src, "diloco.keep_params", u(g.keep_params), "must be >= 1"));
  if (c.compressed_broadcast()) {
    auto spec = algorithms::compress::parse_spec(g.pull_codec);
    if (!spec.ok() || *spec == algorithms::compress::CodecSpec{})
      add(range_error(src, "diloco.pull_codec", "\"" + g.pull_codec.substr(0, 64) + "\"",
                      "must be \"exact\", \"sparse-delta\", \"full\", \"bf16\" or a codec "
                      "spec for the outer updates such as \"int8\" or \"nvfp4\" (not \"none\" "
                      "or \"fp32\")"));
    else if (c.is_hydra())
      add(range_error(src, "diloco.pull_codec", "\"" + g.pull_codec + "\"",
                      "(a compressed broadcast) is not supported with algorithm = \"hydra\"; "
                      "use \"exact\", \"sparse-delta\", \"full\" or \"bf16\""));
  }
  // The model has 9 tensors per layer plus the embedding and the final norm; fragment
  // boundaries fall on tensor boundaries.
  // With LoRA, θ is the adapters: two tensors (A, B) per target and layer.
  const auto lora_targets = algorithms::parse_lora_targets(c.lora.targets);
  const uint64_t tensors = c.is_lora() && lora_targets.ok()
                               ? 2 * lora_targets->size() * uint64_t{m.layers}
                               : 9 * uint64_t{m.layers} + 2;
  if (g.streaming_fragments < 1 || g.streaming_fragments > tensors)
    add(range_error(src, "diloco.streaming_fragments", u(g.streaming_fragments),
                    "must be in [1, " + u(tensors) +
                        "] (1 = plain DiLoCo; at most one fragment per tensor of " +
                        (c.is_lora() ? "the adapters)" : "the model)")));
  else if (g.inner_steps % g.streaming_fragments != 0)
    add(range_error(
        src, "diloco.inner_steps", u(g.inner_steps),
        "must be a multiple of diloco.streaming_fragments = " + u(g.streaming_fragments) +
            " (each round syncs one fragment after inner_steps / fragments steps)"));
  if (g.streaming_fragments >= 1 && g.overlap_steps > g.inner_steps / g.streaming_fragments)
    add(range_error(src, "diloco.overlap_steps", u(g.overlap_steps),
                    "must be <= diloco.inner_steps / diloco.streaming_fragments = " +
                        u(g.inner_steps / g.streaming_fragments) +
                        " (the inner steps of one round)"));
  if (!(g.merge_alpha >= 0 && g.merge_alpha < 1))
    add(range_error(src, "diloco.merge_alpha", d(g.merge_alpha),
                    "must be in [0, 1) (0 = replace the local fragment by the global one)"));

  if (c.algorithm != "diloco" && c.algorithm != "hydra")
    add(range_error(src, "algorithm", "\"" + c.algorithm + "\"",
                    "must be \"diloco\" or \"hydra\""));
  const HydraSection& hy = c.hydra;
  if (hy.reselect_every < 1)
    add(range_error(src, "hydra.reselect_every", u(hy.reselect_every), "must be >= 1"));
  if (hy.ffn_blocks < 1 || m.ffn_hidden % hy.ffn_blocks != 0)
    add(range_error(src, "hydra.ffn_blocks", u(hy.ffn_blocks),
                    "must be >= 1 and divide model.ffn_hidden = " + u(m.ffn_hidden)));
  if (hy.importance_batches < 1)
    add(range_error(src, "hydra.importance_batches", u(hy.importance_batches), "must be >= 1"));
  if (!(hy.min_train_share >= 0 && hy.min_train_share <= 1))
    add(range_error(src, "hydra.min_train_share", d(hy.min_train_share), "must be in [0, 1]"));
  if (!(hy.removal_penalty >= 0 && hy.removal_penalty <= 100))
    add(range_error(src, "hydra.removal_penalty", d(hy.removal_penalty),
                    "must be in [0, 100] (0 counts trained units only; docs/hydra.md)"));
  if (hy.trained_layers != "global" && hy.trained_layers != "per_site")
    add(range_error(src, "hydra.trained_layers", "\"" + hy.trained_layers + "\"",
                    "must be \"global\" (one trained layer set for all sites) or \"per_site\" "
                    "(each site chooses its own; docs/hydra.md)"));
  if (!(hy.forward_share_power >= 0 &&
        hy.forward_share_power <= algorithms::hydra::kMaxForwardSharePower))
    add(range_error(src, "hydra.forward_share_power", d(hy.forward_share_power),
                    "must be a finite number in [0, 8] (0 weighs sites by tokens alone; "
                    "docs/hydra.md)"));
  if (c.is_hydra() && g.streaming())
    add(range_error(src, "algorithm", "\"hydra\"",
                    "cannot be combined with Streaming DiLoCo; set diloco.streaming_fragments "
                    "= 1 and diloco.overlap_steps = 0"));
  // Hydra subnetworks (Llama::set_subnet, algorithms/model/subnet.h) need dense FFNs, fp32 GEMMs.
  if (c.is_hydra() && m.moe_experts > 0)
    add(range_error(src, "algorithm", "\"hydra\"",
                    "does not support MoE models yet; set model.moe_experts = 0 or use "
                    "algorithm = \"diloco\""));
  // Muon lives in AdamW (algorithms/optim/adamw.h); Hydra's masked AdamW and the adapters of
  // LoRA do not have it.
  const bool muon = inner_optimizer(c) == algorithms::InnerOptimizer::kMuon;
  if (muon && c.is_hydra())
    add(range_error(src, "train.optimizer", "\"muon\"",
                    "is not available with algorithm = \"hydra\" yet; set train.optimizer = "
                    "\"adamw\""));
  if (muon && c.is_lora())
    add(range_error(src, "train.optimizer", "\"muon\"",
                    "is not available for LoRA adapters yet; set train.optimizer = \"adamw\" "
                    "or remove [lora]"));
  if (c.is_hydra() && c.train.precision != "fp32" && !c.train.precision.empty())
    add(range_error(src, "algorithm", "\"hydra\"",
                    "trains in fp32 only; set train.precision = \"fp32\" or use "
                    "algorithm = \"diloco\""));

  const RobustSection& rb = c.robust;
  if (!algorithms::parse_screen_mode(rb.screen).ok())
    add(range_error(src, "robust.screen", "\"" + rb.screen + "\"",
                    "must be \"clip\", \"drop\" or \"off\""));
  if (!(rb.norm_multiple >= 1))
    add(range_error(src, "robust.norm_multiple", d(rb.norm_multiple),
                    "must be >= 1 (the limit is this multiple of the median update norm)"));
  if (!(rb.max_norm >= 0))
    add(range_error(src, "robust.max_norm", d(rb.max_norm),
                    "must be >= 0 (0 = no absolute bound)"));
  if (!(rb.replay_cosine >= 0 && rb.replay_cosine <= 1))
    add(range_error(src, "robust.replay_cosine", d(rb.replay_cosine),
                    "must be in [0, 1] (0 = no replay detection)"));
  if (!(rb.stale_margin >= 0 && rb.stale_margin <= 2))
    add(range_error(src, "robust.stale_margin", d(rb.stale_margin),
                    "must be in [0, 2] (a difference of two cosines; 0 = no stale detection)"));
  const auto aggregator = algorithms::parse_aggregator(rb.aggregator);
  if (!aggregator.ok())
    add(range_error(src, "robust.aggregator", "\"" + rb.aggregator + "\"",
                    "must be \"mean\", \"clipped-mean\", \"trimmed-mean\", \"median\" or "
                    "\"krum\""));
  if (!(rb.clip_multiple > 0))
    add(range_error(src, "robust.clip_multiple", d(rb.clip_multiple), "must be > 0"));
  if (!(rb.trim_fraction >= 0 && rb.trim_fraction < 0.5))
    add(range_error(src, "robust.trim_fraction", d(rb.trim_fraction), "must be in [0, 0.5)"));
  // ⌊β·k⌋ values are cut at each end of k (Flower's FedTrimmedAvg): with fewer than 1/β updates
  // none is, and the "trimmed" mean is the plain one. Every round has at least min_nodes.
  else if (aggregator.ok() && *aggregator == algorithms::AggregatorKind::kTrimmedMean &&
           !c.is_hydra() &&
           std::floor(rb.trim_fraction * static_cast<double>(c.diloco.min_nodes)) < 1) {
    const uint64_t needed =
        rb.trim_fraction > 0 ? static_cast<uint64_t>(std::ceil(1.0 / rb.trim_fraction)) : 0;
    std::string fix = rb.trim_fraction > 0
                          ? "raise diloco.min_nodes to at least " + std::to_string(needed)
                          : "use a trim_fraction > 0, or aggregator = \"mean\"";
    // 1/min_nodes rounded up to 4 decimals (0.3334 for 3: floor(0.3334 × 3) = 1).
    if (rb.trim_fraction > 0 && c.diloco.min_nodes >= 3)
      fix += ", or trim_fraction to at least " +
             d(std::ceil(1e4 / static_cast<double>(c.diloco.min_nodes)) / 1e4);
    add(range_error(src, "robust.trim_fraction", d(rb.trim_fraction),
                    "cuts nothing from a round of diloco.min_nodes = " + u(c.diloco.min_nodes) +
                        " updates (floor(trim_fraction x " + u(c.diloco.min_nodes) +
                        ") = 0: such rounds would be a plain mean); " + fix));
  }
  if (rb.krum_keep < 1)
    add(range_error(src, "robust.krum_keep", u(rb.krum_keep),
                    "must be >= 1 (1 = Krum, more = Multi-Krum)"));
  // Krum's guarantee needs n >= 2f + 3 updates (Blanchard et al. 2017); below it the scores tie
  // or count a single neighbour and it takes an arbitrary update.
  if (aggregator.ok() && *aggregator == algorithms::AggregatorKind::kKrum && !c.is_hydra() &&
      uint64_t{c.diloco.max_nodes} < 2 * uint64_t{rb.krum_byzantine} + 3)
    add(range_error(src, "robust.krum_byzantine", u(rb.krum_byzantine),
                    "needs at least 2 x krum_byzantine + 3 = " +
                        std::to_string(2 * uint64_t{rb.krum_byzantine} + 3) +
                        " updates a round, and diloco.max_nodes = " + u(c.diloco.max_nodes) +
                        " allows fewer (lower krum_byzantine, raise the node count, or use "
                        "\"median\")"));
  if (c.is_hydra() && aggregator.ok() && *aggregator == algorithms::AggregatorKind::kKrum)
    add(range_error(src, "robust.aggregator", "\"krum\"",
                    "cannot be used with algorithm = \"hydra\" (its sites train different "
                    "elements); use \"median\" or \"trimmed-mean\""));

  for (Status& s : privacy_errors(c, src)) add(std::move(s));
  for (Status& s : secagg_errors(c, src)) add(std::move(s));
  for (Status& s : lora_errors(c, src)) add(std::move(s));

  const DataSection& a = c.data;
  if (a.source != "brown" && a.source != "text" && a.source != "tokens")
    add(range_error(src, "data.source", "\"" + a.source + "\"",
                    "must be one of \"brown\", \"text\", \"tokens\""));
  if (a.source != "brown" && a.paths.empty())
    add(range_error(
        src, "data.paths", "[]",
        "must list at least one file or directory when data.source = \"" + a.source + "\""));
  if (a.tokenizer != "bytes" && a.tokenizer != "bpe")
    add(range_error(src, "data.tokenizer", "\"" + a.tokenizer + "\"",
                    "must be \"bytes\" or \"bpe\""));
  if (a.tokenizer == "bytes" && m.vocab < 256)
    add(range_error(src, "model.vocab", u(m.vocab),
                    "must be >= 256 with data.tokenizer = \"bytes\""));
  if (a.split != "genre" && a.split != "iid")
    add(range_error(src, "data.split", "\"" + a.split + "\"", "must be \"genre\" or \"iid\""));
  if (!(a.val_fraction > 0 && a.val_fraction <= 0.5))
    add(range_error(src, "data.val_fraction", d(a.val_fraction), "must be in (0, 0.5]"));
  return errors;
}

Status check_model_size(const ExperimentConfig& c, std::string_view src, uint64_t max_params) {
  // The model holds its sizes as int: 4294967295 would read as -1.
  const ModelSection& m = c.model;
  for (const auto& [key, value] : {std::pair{"vocab", m.vocab},
                                   {"dim", m.dim},
                                   {"layers", m.layers},
                                   {"heads", m.heads},
                                   {"ffn_hidden", m.ffn_hidden},
                                   {"seq_len", m.seq_len},
                                   {"kv_heads", m.kv_heads},
                                   {"moe_experts", m.moe_experts},
                                   {"moe_top_k", m.moe_top_k},
                                   {"moe_hidden", m.moe_hidden},
                                   {"moe_every", m.moe_every},
                                   {"moe_shared_hidden", m.moe_shared_hidden}})
    if (value > uint32_t{INT32_MAX})
      return range_error(src, std::string("model.") + key, std::to_string(value),
                         "must be <= 2147483647");
  const algorithms::ModelConfig model = model_config(c);
  if (Status s = algorithms::validate(model); !s.ok()) {
    // The model's messages name its fields (moe_hidden, ...) or the model as a whole.
    const bool names_field = s.message().rfind("model ", 0) != 0;
    return InvalidArgument(
        std::string(src) + ": " + (names_field ? "model." : "") + s.message() +
        (names_field ? "" : " (reduce model.dim, model.vocab or model.ffn_hidden)"));
  }
  const uint64_t numel = theta_layout(c).numel();
  if (numel > max_params)
    return InvalidArgument(std::string(src) + ": the model has " + std::to_string(numel) +
                           " parameters, more than the " + std::to_string(max_params) +
                           " an experiment may have (reduce model.dim, model.layers or " +
                           (c.model.moe_experts > 0 ? "model.ffn_hidden, or the experts: "
                                                      "model.moe_experts, model.moe_hidden)"
                                                    : "model.ffn_hidden)"));
  return Status::Ok();
}

Status validate_experiment_config(const ExperimentConfig& c, std::string_view src) {
  std::vector<Status> errors = experiment_config_errors(c, src);
  return errors.empty() ? Status::Ok() : errors.front();
}

StatusOr<ExperimentConfig> parse_experiment_config(std::string_view text, std::string_view source) {
  ConfigCheck check = check_experiment_config(text, source);
  if (!check.errors.empty()) return check.errors.front();
  return std::move(check.config);
}

ConfigCheck check_experiment_config(std::string_view text, std::string_view source) {
  ConfigCheck check;
  toml::table root;
#if TOML_EXCEPTIONS
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    check.errors.push_back(InvalidArgument(std::string(source) + ":" + std::to_string(b.line) +
                                           ":" + std::to_string(b.column) +
                                           ": TOML syntax error: " + std::string(e.description())));
    return check;
  }
#else
  toml::parse_result r = toml::parse(text, source);
  if (!r) {
    const auto& b = r.error().source().begin;
    check.errors.push_back(InvalidArgument(
        std::string(source) + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
        ": TOML syntax error: " + std::string(r.error().description())));
    return check;
  }
  root = std::move(r).table();
#endif
  check.parsed = true;
  ExperimentConfig& c = check.config;
  const std::vector<std::string> subtables = {"model",  "train",   "diloco", "hydra", "data",
                                              "robust", "privacy", "secagg", "lora"};
  const std::vector<Table> schemas = {
      {"", {{"name", str(&c.name)}, {"seed", u64(&c.seed)}, {"algorithm", str(&c.algorithm)}}},
      {"model",
       {{"vocab", u32(&c.model.vocab, 2)},
        {"dim", u32(&c.model.dim, 1)},
        {"layers", u32(&c.model.layers, 1)},
        {"heads", u32(&c.model.heads, 1)},
        {"ffn_hidden", u32(&c.model.ffn_hidden, 1)},
        {"seq_len", u32(&c.model.seq_len, 1)},
        {"rope_base", f64(&c.model.rope_base)},
        {"norm_eps", f64(&c.model.norm_eps)},
        {"moe_experts", u32(&c.model.moe_experts)},
        {"moe_top_k", u32(&c.model.moe_top_k)},
        {"moe_hidden", u32(&c.model.moe_hidden)},
        {"moe_every", u32(&c.model.moe_every)},
        {"moe_score", str(&c.model.moe_score)},
        {"moe_shared_hidden", u32(&c.model.moe_shared_hidden)},
        {"moe_aux_coef", f64(&c.model.moe_aux_coef)},
        {"moe_z_coef", f64(&c.model.moe_z_coef)},
        {"kv_heads", u32(&c.model.kv_heads)},
        {"tie_word_embeddings", boolean(&c.model.tie_word_embeddings)},
        {"attention_bias", boolean(&c.model.attention_bias)}}},
      {"train",
       {{"batch_size", u32(&c.train.batch_size, 1)},
        {"lr", f64(&c.train.lr)},
        {"min_lr", f64(&c.train.min_lr)},
        {"warmup_steps", u32(&c.train.warmup_steps)},
        {"weight_decay", f64(&c.train.weight_decay)},
        {"beta1", f64(&c.train.beta1)},
        {"beta2", f64(&c.train.beta2)},
        {"grad_clip", f64(&c.train.grad_clip)},
        {"codec", str(&c.train.codec)},
        {"error_feedback", boolean(&c.train.error_feedback)},
        {"precision", str(&c.train.precision)},
        {"optimizer", str(&c.train.optimizer)},
        {"muon_momentum", f64(&c.train.muon_momentum)}}},
      {"diloco",
       {{"rounds", u32(&c.diloco.rounds, 1)},
        {"inner_steps", u32(&c.diloco.inner_steps, 1)},
        {"outer_lr", f64(&c.diloco.outer_lr)},
        {"outer_momentum", f64(&c.diloco.outer_momentum)},
        {"min_nodes", u32(&c.diloco.min_nodes, 1)},
        {"max_nodes", u32(&c.diloco.max_nodes, 1)},
        {"round_deadline_s", f64(&c.diloco.round_deadline_s)},
        {"heartbeat_interval_s", f64(&c.diloco.heartbeat_interval_s)},
        {"lost_after_heartbeats", u32(&c.diloco.lost_after_heartbeats, 2)},
        {"start_wait_s", f64(&c.diloco.start_wait_s)},
        {"keep_params", u32(&c.diloco.keep_params, 1)},
        {"pull_codec", str(&c.diloco.pull_codec)},
        {"streaming_fragments", u32(&c.diloco.streaming_fragments, 1)},
        {"overlap_steps", u32(&c.diloco.overlap_steps)},
        {"merge_alpha", f64(&c.diloco.merge_alpha)},
        {"final_look_ahead", boolean(&c.diloco.final_look_ahead)}}},
      {"hydra",
       {{"reselect_every", u32(&c.hydra.reselect_every, 1)},
        {"min_coverage", u32(&c.hydra.min_coverage)},
        {"ffn_blocks", u32(&c.hydra.ffn_blocks, 1)},
        {"importance_batches", u32(&c.hydra.importance_batches, 1)},
        {"min_train_share", f64(&c.hydra.min_train_share)},
        {"removal_penalty", f64(&c.hydra.removal_penalty)},
        {"trained_layers", str(&c.hydra.trained_layers)},
        {"forward_share_power", f64(&c.hydra.forward_share_power)}}},
      {"robust",
       {{"screen", str(&c.robust.screen)},
        {"norm_multiple", f64(&c.robust.norm_multiple)},
        {"max_norm", f64(&c.robust.max_norm)},
        {"replay_cosine", f64(&c.robust.replay_cosine)},
        {"stale_margin", f64(&c.robust.stale_margin)},
        {"aggregator", str(&c.robust.aggregator)},
        {"clip_multiple", f64(&c.robust.clip_multiple)},
        {"trim_fraction", f64(&c.robust.trim_fraction)},
        {"krum_byzantine", u32(&c.robust.krum_byzantine)},
        {"krum_keep", u32(&c.robust.krum_keep)}}},
      {"privacy",
       {{"clip_norm", f64(&c.privacy.clip_norm)},
        {"noise_multiplier", f64(&c.privacy.noise_multiplier)},
        {"delta", f64(&c.privacy.delta)},
        {"target_epsilon", f64(&c.privacy.target_epsilon)},
        {"noise_key", str(&c.privacy.noise_key)}}},
      {"secagg",
       {{"enabled", boolean(&c.secagg.enabled)},
        {"clip_range", f64(&c.secagg.clip_range)},
        {"quantization_range", u32(&c.secagg.quantization_range)},
        {"threshold", u32(&c.secagg.threshold)},
        {"masking", boolean(&c.secagg.masking)}}},
      {"data",
       {{"source", str(&c.data.source)},
        {"paths", str_list(&c.data.paths)},
        {"tokenizer", str(&c.data.tokenizer)},
        {"split", str(&c.data.split)},
        {"val_fraction", f64(&c.data.val_fraction)}}},
      {"lora",
       {{"rank", u32(&c.lora.rank)},
        {"alpha", f64(&c.lora.alpha)},
        {"targets", str(&c.lora.targets)},
        {"base", str(&c.lora.base)},
        {"base_fingerprint", str(&c.lora.base_fingerprint)},
        {"base_dtype", str(&c.lora.base_dtype)}}},
  };
  apply_table(root, schemas[0], source, subtables, check.errors);
  for (size_t i = 1; i < schemas.size(); ++i) {
    if (const toml::table* t = root[schemas[i].name].as_table())
      apply_table(*t, schemas[i], source, subtables, check.errors);
  }
  for (Status& s : experiment_config_errors(c, source)) check.errors.push_back(std::move(s));
  return check;
}

StatusOr<ExperimentConfig> load_experiment_config(const std::string& path) {
  // read_file_bounded refuses a directory and anything but a regular file: an ifstream opens a
  // directory and reads nothing, and an empty config is a valid one (every default).
  auto text = read_file_bounded(path, 1u << 20);
  if (text.status().code() == StatusCode::kNotFound)
    return NotFound(path + ": cannot open experiment config (check the path passed with --config)");
  if (!text.ok())
    return InvalidArgument(text.status().message() +
                           " (--config takes the experiment's TOML file, at most 1 MiB)");
  const size_t slash = path.find_last_of('/');
  ConfigCheck check =
      check_experiment_config(*text, slash == std::string::npos ? path : path.substr(slash + 1));
  if (check.errors.empty()) return std::move(check.config);
  // Every error, one line each (as the API lists them), so that one edit fixes them all; the
  // status keeps the first one's code.
  constexpr size_t kMaxListed = 20;
  std::string lines = check.errors.front().message();
  for (size_t i = 1; i < check.errors.size() && i < kMaxListed; ++i)
    lines += "\n" + check.errors[i].message();
  if (check.errors.size() > kMaxListed)
    lines += "\n(and " + std::to_string(check.errors.size() - kMaxListed) + " more)";
  return Status(check.errors.front().code(), lines);
}

std::string toml_string(std::string_view text) {
  std::string o = "\"";
  for (char ch : text) append_toml_char(o, ch);
  return o + "\"";
}

std::string to_toml(const ExperimentConfig& c, bool every_key) {
  const auto q = toml_string;
  // Doubles always carry a '.' or exponent so they re-parse as floats.
  auto f = [](double v) {
    std::string s = shortest_decimal(v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  };
  std::ostringstream o;
  o << "name = " << q(c.name) << "\nseed = " << c.seed << "\nalgorithm = " << q(c.algorithm)
    << "\n\n[model]\n"
    << "vocab = " << c.model.vocab << "\ndim = " << c.model.dim << "\nlayers = " << c.model.layers
    << "\nheads = " << c.model.heads << "\nffn_hidden = " << c.model.ffn_hidden
    << "\nseq_len = " << c.model.seq_len << "\nrope_base = " << f(c.model.rope_base)
    << "\nnorm_eps = " << f(c.model.norm_eps) << "\nmoe_experts = " << c.model.moe_experts
    << "\nmoe_top_k = " << c.model.moe_top_k << "\nmoe_hidden = " << c.model.moe_hidden
    << "\nmoe_every = " << c.model.moe_every << "\nmoe_score = " << q(c.model.moe_score)
    << "\nmoe_shared_hidden = " << c.model.moe_shared_hidden
    << "\nmoe_aux_coef = " << f(c.model.moe_aux_coef) << "\nmoe_z_coef = " << f(c.model.moe_z_coef);
  // The Hugging Face fields only when set, so a config of Atoll's own architecture reads as it
  // always did.
  if (every_key || c.model.kv_heads != 0) o << "\nkv_heads = " << c.model.kv_heads;
  if (every_key || !c.model.tie_word_embeddings)
    o << "\ntie_word_embeddings = " << (c.model.tie_word_embeddings ? "true" : "false");
  if (every_key || c.model.attention_bias)
    o << "\nattention_bias = " << (c.model.attention_bias ? "true" : "false");
  o << "\n\n[train]\n"
    << "batch_size = " << c.train.batch_size << "\nlr = " << f(c.train.lr)
    << "\nmin_lr = " << f(c.train.min_lr) << "\nwarmup_steps = " << c.train.warmup_steps
    << "\nweight_decay = " << f(c.train.weight_decay) << "\nbeta1 = " << f(c.train.beta1)
    << "\nbeta2 = " << f(c.train.beta2) << "\ngrad_clip = " << f(c.train.grad_clip)
    << "\ncodec = " << q(c.train.codec)
    << "\nerror_feedback = " << (c.train.error_feedback ? "true" : "false")
    << "\nprecision = " << q(c.train.precision);
  // Written only when not the default, so configs from before it read back byte for byte.
  if (every_key || inner_optimizer(c) != algorithms::InnerOptimizer::kAdamW ||
      c.train.muon_momentum != 0.95)
    o << "\noptimizer = " << q(c.train.optimizer)
      << "\nmuon_momentum = " << f(c.train.muon_momentum);
  o << "\n\n[diloco]\n"
    << "rounds = " << c.diloco.rounds << "\ninner_steps = " << c.diloco.inner_steps
    << "\nouter_lr = " << f(c.diloco.outer_lr)
    << "\nouter_momentum = " << f(c.diloco.outer_momentum) << "\nmin_nodes = " << c.diloco.min_nodes
    << "\nmax_nodes = " << c.diloco.max_nodes
    << "\nround_deadline_s = " << f(c.diloco.round_deadline_s)
    << "\nheartbeat_interval_s = " << f(c.diloco.heartbeat_interval_s)
    << "\nlost_after_heartbeats = " << c.diloco.lost_after_heartbeats
    << "\nstart_wait_s = " << f(c.diloco.start_wait_s) << "\nkeep_params = " << c.diloco.keep_params
    << "\npull_codec = " << q(c.diloco.pull_codec)
    << "\nstreaming_fragments = " << c.diloco.streaming_fragments
    << "\noverlap_steps = " << c.diloco.overlap_steps
    << "\nmerge_alpha = " << f(c.diloco.merge_alpha);
  // Written only when not the default, so configs from before it read back byte for byte.
  if (every_key || !c.diloco.final_look_ahead)
    o << "\nfinal_look_ahead = " << (c.diloco.final_look_ahead ? "true" : "false");
  o << "\n\n[hydra]\nreselect_every = " << c.hydra.reselect_every
    << "\nmin_coverage = " << c.hydra.min_coverage << "\nffn_blocks = " << c.hydra.ffn_blocks
    << "\nimportance_batches = " << c.hydra.importance_batches
    << "\nmin_train_share = " << f(c.hydra.min_train_share)
    << "\nremoval_penalty = " << f(c.hydra.removal_penalty)
    << "\ntrained_layers = " << q(c.hydra.trained_layers);
  // Only when set, so the stored config of an experiment without it reads as it always did.
  if (every_key || c.hydra.forward_share_power != 0)
    o << "\nforward_share_power = " << f(c.hydra.forward_share_power);
  o << "\n\n[data]\nsource = " << q(c.data.source) << "\npaths = [";
  for (size_t i = 0; i < c.data.paths.size(); ++i) o << (i ? ", " : "") << q(c.data.paths[i]);
  o << "]\ntokenizer = " << q(c.data.tokenizer) << "\nsplit = " << q(c.data.split)
    << "\nval_fraction = " << f(c.data.val_fraction)
    << "\n\n[robust]\nscreen = " << q(c.robust.screen)
    << "\nnorm_multiple = " << f(c.robust.norm_multiple) << "\nmax_norm = " << f(c.robust.max_norm)
    << "\nreplay_cosine = " << f(c.robust.replay_cosine)
    << "\nstale_margin = " << f(c.robust.stale_margin)
    << "\naggregator = " << q(c.robust.aggregator)
    << "\nclip_multiple = " << f(c.robust.clip_multiple)
    << "\ntrim_fraction = " << f(c.robust.trim_fraction)
    << "\nkrum_byzantine = " << c.robust.krum_byzantine << "\nkrum_keep = " << c.robust.krum_keep
    << "\n\n[privacy]\nclip_norm = " << f(c.privacy.clip_norm)
    << "\nnoise_multiplier = " << f(c.privacy.noise_multiplier)
    << "\ndelta = " << f(c.privacy.delta) << "\ntarget_epsilon = " << f(c.privacy.target_epsilon)
    << "\nnoise_key = " << q(c.privacy.noise_key)
    << "\n\n[secagg]\nenabled = " << (c.secagg.enabled ? "true" : "false")
    << "\nclip_range = " << f(c.secagg.clip_range)
    << "\nquantization_range = " << c.secagg.quantization_range
    << "\nthreshold = " << c.secagg.threshold
    << "\nmasking = " << (c.secagg.masking ? "true" : "false") << "\n";
  if (every_key || c.is_lora())
    o << "\n[lora]\nrank = " << c.lora.rank << "\nalpha = " << f(c.lora.alpha)
      << "\ntargets = " << q(c.lora.targets) << "\nbase = " << q(c.lora.base)
      << "\nbase_fingerprint = " << q(c.lora.base_fingerprint) << "\n"
      << (every_key || c.lora.base_dtype != "fp32" ? "base_dtype = " + q(c.lora.base_dtype) + "\n"
                                                   : "");
  return o.str();
}

namespace {

// to_toml's lines as (section.key, value) in order; top-level keys have no section prefix.
std::vector<std::pair<std::string, std::string>> toml_entries(const std::string& toml) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::istringstream in(toml);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[') {
      section = line.substr(1, line.size() - 2) + ".";
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos)
      entries.emplace_back(section + line.substr(0, eq), line.substr(eq + 3));
  }
  return entries;
}

}  // namespace

std::vector<std::string> config_changes(const ExperimentConfig& stored,
                                        const ExperimentConfig& given, bool every_key) {
  // robust.trim_fraction too: a trimmed mean created with a fraction that cut nothing (0.1, the
  // default before rounds that trim nothing were refused) can go on with one that cuts.
  static const std::set<std::string> kMayChange = {
      "diloco.round_deadline_s", "diloco.heartbeat_interval_s", "diloco.lost_after_heartbeats",
      "diloco.start_wait_s",     "diloco.keep_params",          "lora.base",
      "robust.trim_fraction"};
  // A key that means nothing under either config is not compared: a changed default of an
  // aggregator's parameter must not stop every experiment that uses another aggregator.
  const auto applies = [](const std::string& key, const ExperimentConfig& c) {
    if (key == "robust.clip_multiple") return c.robust.aggregator == "clipped-mean";
    if (key == "robust.krum_byzantine" || key == "robust.krum_keep")
      return c.robust.aggregator == "krum";
    if (key == "privacy.noise_key") return c.privacy.clip_norm > 0;
    return true;
  };
  // Every key written, so that a key one config leaves at its default (and to_toml omits) reads
  // as the value it means, e.g. `hydra.forward_share_power 2.0 -> 0.0`.
  const auto before = toml_entries(to_toml(stored, /*every_key=*/true));
  const auto after = toml_entries(to_toml(given, /*every_key=*/true));
  // The same writer with every key: the same keys in the same order on both sides.
  std::vector<std::string> changes;
  for (size_t i = 0; i < before.size() && i < after.size(); ++i) {
    const auto& [key, was] = before[i];
    if (after[i].second != was &&
        (every_key || (!kMayChange.count(key) && (applies(key, stored) || applies(key, given)))))
      changes.push_back(key + " " + was + " -> " + after[i].second);
  }
  return changes;
}

algorithms::ModelConfig model_config(const ExperimentConfig& cfg) {
  algorithms::ModelConfig m;
  m.vocab = static_cast<int>(cfg.model.vocab);
  m.dim = static_cast<int>(cfg.model.dim);
  m.layers = static_cast<int>(cfg.model.layers);
  m.heads = static_cast<int>(cfg.model.heads);
  m.ffn_hidden = static_cast<int>(cfg.model.ffn_hidden);
  m.seq_len = static_cast<int>(cfg.model.seq_len);
  m.rope_base = cfg.model.rope_base;
  m.norm_eps = cfg.model.norm_eps;
  m.moe_experts = static_cast<int>(cfg.model.moe_experts);
  m.moe_top_k = static_cast<int>(cfg.model.moe_top_k);
  m.moe_hidden = static_cast<int>(cfg.model.moe_hidden);
  m.moe_every = static_cast<int>(cfg.model.moe_every);
  m.moe_score = cfg.model.moe_score;
  m.moe_shared_hidden = static_cast<int>(cfg.model.moe_shared_hidden);
  m.moe_aux_coef = cfg.model.moe_aux_coef;
  m.moe_z_coef = cfg.model.moe_z_coef;
  m.kv_heads = static_cast<int>(cfg.model.kv_heads);
  m.tie_word_embeddings = cfg.model.tie_word_embeddings;
  m.attention_bias = cfg.model.attention_bias;
  return m;
}

void set_model_section(ExperimentConfig& cfg, const algorithms::ModelConfig& base) {
  ModelSection& m = cfg.model;
  m.vocab = static_cast<uint32_t>(base.vocab);
  m.dim = static_cast<uint32_t>(base.dim);
  m.layers = static_cast<uint32_t>(base.layers);
  m.heads = static_cast<uint32_t>(base.heads);
  m.ffn_hidden = static_cast<uint32_t>(base.ffn_hidden);
  m.rope_base = base.rope_base;
  m.norm_eps = base.norm_eps;
  m.moe_experts = static_cast<uint32_t>(base.moe_experts);
  m.moe_top_k = static_cast<uint32_t>(base.moe_top_k);
  m.moe_hidden = static_cast<uint32_t>(base.moe_hidden);
  m.moe_every = static_cast<uint32_t>(base.moe_every);
  m.moe_score = base.moe_score;
  m.moe_shared_hidden = static_cast<uint32_t>(base.moe_shared_hidden);
  m.moe_aux_coef = base.moe_aux_coef;
  m.moe_z_coef = base.moe_z_coef;
  m.kv_heads = static_cast<uint32_t>(base.kv_heads);
  m.tie_word_embeddings = base.tie_word_embeddings;
  m.attention_bias = base.attention_bias;
}

algorithms::LoraConfig lora_config(const ExperimentConfig& cfg) {
  algorithms::LoraConfig l;
  if (!cfg.is_lora()) return l;
  l.rank = static_cast<int>(cfg.lora.rank);
  l.alpha = cfg.lora.alpha;
  if (auto t = algorithms::parse_lora_targets(cfg.lora.targets); t.ok()) l.targets = *t;
  if (auto d = algorithms::parse_base_storage(cfg.lora.base_dtype); d.ok()) l.base_storage = *d;
  return l;
}

algorithms::ParamLayout theta_layout(const ExperimentConfig& cfg) {
  const algorithms::ModelConfig model = model_config(cfg);
  return cfg.is_lora() ? algorithms::make_lora_layout(lora_config(cfg), model)
                       : algorithms::make_layout(model);
}

algorithms::ParamSet initial_theta(const ExperimentConfig& cfg) {
  const algorithms::ModelConfig model = model_config(cfg);
  algorithms::ParamSet theta(theta_layout(cfg));
  if (cfg.is_lora()) {
    algorithms::init_lora_params(theta, lora_config(cfg), model, cfg.seed);
  } else {
    algorithms::init_params(theta, model, cfg.seed);
  }
  return theta;
}

algorithms::ScreenOptions screen_options(const ExperimentConfig& cfg) {
  algorithms::ScreenOptions o;
  if (auto m = algorithms::parse_screen_mode(cfg.robust.screen); m.ok()) o.mode = *m;
  o.norm_multiple = cfg.robust.norm_multiple;
  o.max_norm = cfg.robust.max_norm;
  return o;
}

algorithms::AggregatorOptions aggregator_options(const ExperimentConfig& cfg) {
  algorithms::AggregatorOptions o;
  if (auto k = algorithms::parse_aggregator(cfg.robust.aggregator); k.ok()) o.kind = *k;
  o.clip_multiple = cfg.robust.clip_multiple;
  o.trim_fraction = cfg.robust.trim_fraction;
  o.krum_byzantine = cfg.robust.krum_byzantine;
  o.krum_keep = cfg.robust.krum_keep;
  return o;
}

algorithms::PrivacyOptions privacy_options(const ExperimentConfig& cfg) {
  algorithms::PrivacyOptions o;
  o.clip_norm = cfg.privacy.clip_norm;
  o.noise_multiplier = cfg.privacy.noise_multiplier;
  o.delta = cfg.privacy.delta;
  o.target_epsilon = cfg.privacy.target_epsilon;
  return o;
}

algorithms::TrainerConfig trainer_config(const ExperimentConfig& cfg, int64_t total_steps) {
  algorithms::TrainerConfig t;
  t.batch = static_cast<int>(cfg.train.batch_size);
  t.seq = static_cast<int>(cfg.model.seq_len);
  t.lr = cfg.train.lr;
  t.min_lr = cfg.train.min_lr;
  t.warmup = cfg.train.warmup_steps;
  t.total_steps = total_steps;
  t.weight_decay = cfg.train.weight_decay;
  t.beta1 = cfg.train.beta1;
  t.beta2 = cfg.train.beta2;
  t.grad_clip = cfg.train.grad_clip;
  // Validated at parse time; an unparsable value (a config built in code) stays fp32.
  const auto precision = algorithms::parse_precision(cfg.train.precision);
  t.precision = precision.ok() ? *precision : algorithms::Precision::kFp32;
  t.precision_seed = cfg.seed;
  t.optimizer = inner_optimizer(cfg);
  t.muon_momentum = cfg.train.muon_momentum;
  return t;
}

algorithms::InnerOptimizer inner_optimizer(const ExperimentConfig& cfg) {
  const auto optimizer = algorithms::parse_inner_optimizer(cfg.train.optimizer);
  return optimizer.ok() ? *optimizer : algorithms::InnerOptimizer::kAdamW;
}

std::vector<std::string> ignored_settings(const ExperimentConfig& cfg) {
  // Every key against its default, as the canonical text writes both.
  const auto given = toml_entries(to_toml(cfg, /*every_key=*/true));
  const auto defaults = toml_entries(to_toml(ExperimentConfig{}, /*every_key=*/true));
  const std::map<std::string, std::string> default_of(defaults.begin(), defaults.end());
  // One line for the keys under `prefix` (but `except`) set away from their defaults.
  std::vector<std::string> lines;
  auto report = [&](const std::string& prefix, const std::string& except, const std::string& why) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : given)
      if (key.rfind(prefix, 0) == 0 && key != except && default_of.at(key) != value)
        keys.push_back(key);
    if (keys.empty()) return;
    std::string line = "config: ";
    for (size_t i = 0; i < keys.size(); ++i)
      line += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i];
    lines.push_back(line + (keys.size() == 1 ? " is" : " are") + " set but ignored: " + why);
  };
  if (!cfg.is_hydra())
    report("hydra.", "",
           "algorithm = \"" + cfg.algorithm +
               "\" (set algorithm = \"hydra\" to train subnetworks; docs/hydra.md)");
  if (cfg.model.moe_experts == 0)
    report("model.moe_", "model.moe_experts",
           "model.moe_experts = 0 is a dense model (set it to the number of experts; "
           "docs/moe.md)");
  if (!cfg.is_lora())
    report("lora.", "lora.rank",
           "lora.rank = 0 trains the whole model (set lora.rank to train adapters; "
           "docs/federated-finetuning.md)");
  if (!cfg.secagg.enabled)
    report("secagg.", "secagg.enabled",
           "secagg.enabled = false (set it to true to aggregate securely; docs/coordinator.md, "
           "\"Secure aggregation\")");
  return lines;
}

StatusOr<uint64_t> new_privacy_noise_key(const ExperimentConfig& config) {
  uint64_t key = 0;
  if (!(config.privacy.clip_norm > 0) || config.privacy.noise_key != "secret") return key;
  while (key == 0)
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&key), sizeof(key)) != 1)
      return Internal("cannot draw the privacy noise's secret key (OpenSSL RAND_bytes failed)");
  return key;
}

}  // namespace atl::coordinator
