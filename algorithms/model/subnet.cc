#include "algorithms/model/subnet.h"

#include <algorithm>

#include "kernels/core/sha256.h"

namespace atl::algorithms {

int head_units(const ModelConfig& cfg) {
  return num_kv_heads(cfg);
}

int heads_per_unit(const ModelConfig& cfg) {
  return cfg.heads / num_kv_heads(cfg);
}

Subnet full_subnet(const ModelConfig& cfg, int ffn_blocks, bool train) {
  Subnet s;
  s.ffn_blocks = ffn_blocks;
  s.layers.resize(cfg.layers);
  for (auto& l : s.layers) {
    l.heads.assign(head_units(cfg), 1);
    l.ffn_blocks.assign(std::max(ffn_blocks, 0), 1);
    l.train = train;
  }
  return s;
}

Status validate(const Subnet& s, const ModelConfig& cfg) {
  if (cfg.moe_experts > 0)
    return InvalidArgument("subnet: Hydra's subnetworks need dense FFNs; this model has " +
                           std::to_string(cfg.moe_experts) +
                           " experts per MoE layer (set moe_experts = 0)");
  if (s.ffn_blocks <= 0 || cfg.ffn_hidden % s.ffn_blocks != 0)
    return InvalidArgument("subnet: ffn_blocks " + std::to_string(s.ffn_blocks) +
                           " must be positive and divide ffn_hidden " +
                           std::to_string(cfg.ffn_hidden));
  if (static_cast<int>(s.layers.size()) != cfg.layers)
    return InvalidArgument("subnet: " + std::to_string(s.layers.size()) +
                           " layers, the model has " + std::to_string(cfg.layers));
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSubnet& x = s.layers[l];
    if (static_cast<int>(x.heads.size()) != head_units(cfg) ||
        static_cast<int>(x.ffn_blocks.size()) != s.ffn_blocks)
      return InvalidArgument("subnet: layer " + std::to_string(l) + " has " +
                             std::to_string(x.heads.size()) + " head units and " +
                             std::to_string(x.ffn_blocks.size()) + " FFN blocks, expected " +
                             std::to_string(head_units(cfg)) + " (one per KV head) and " +
                             std::to_string(s.ffn_blocks));
    for (uint8_t v : x.heads)
      if (v > 1) return InvalidArgument("subnet: head flags must be 0 or 1");
    for (uint8_t v : x.ffn_blocks)
      if (v > 1) return InvalidArgument("subnet: FFN block flags must be 0 or 1");
  }
  return Status::Ok();
}

namespace {

// Calls f(begin, end) for every trained element range (layer by layer; the mask and index
// forms do not depend on the order).
template <typename F>
void for_each_trained_range(const Subnet& s, const ModelConfig& cfg, F&& f) {
  const ParamLayout layout = make_layout(cfg);
  const size_t C = cfg.dim, D = C / cfg.heads, U = head_units(cfg), gD = heads_per_unit(cfg) * D,
               Fh = cfg.ffn_hidden, Fb = Fh / s.ffn_blocks;
  auto off = [&](int l, const char* suffix) {
    return layout.find("model.layers." + std::to_string(l) + "." + suffix)->offset;
  };
  for (int l = 0; l < cfg.layers; ++l) {
    const LayerSubnet& x = s.layers[l];
    if (!x.train) continue;
    const bool any_head = std::count(x.heads.begin(), x.heads.end(), 1) > 0;
    const bool any_block = std::count(x.ffn_blocks.begin(), x.ffn_blocks.end(), 1) > 0;
    if (any_head) f(off(l, "input_layernorm.weight"), off(l, "input_layernorm.weight") + C);
    // q: the gD rows of a kept unit's query heads; k, v: the D rows of its KV head.
    struct Part {
      const char* name;
      size_t rows;  // rows per head unit
    };
    const Part parts[] = {{"self_attn.q_proj.weight", gD},
                          {"self_attn.k_proj.weight", D},
                          {"self_attn.v_proj.weight", D}};
    for (const Part& p : parts)
      for (size_t j = 0; j < U; ++j)
        if (x.heads[j]) f(off(l, p.name) + j * p.rows * C, off(l, p.name) + (j + 1) * p.rows * C);
    if (cfg.attention_bias) {
      const Part biases[] = {{"self_attn.q_proj.bias", gD},
                             {"self_attn.k_proj.bias", D},
                             {"self_attn.v_proj.bias", D}};
      for (const Part& p : biases)
        for (size_t j = 0; j < U; ++j)
          if (x.heads[j]) f(off(l, p.name) + j * p.rows, off(l, p.name) + (j + 1) * p.rows);
    }
    // o_proj (C, C): the gD columns of a kept unit's query heads, row by row.
    const size_t oo = off(l, "self_attn.o_proj.weight");
    for (size_t r = 0; r < C; ++r)
      for (size_t j = 0; j < U; ++j)
        if (x.heads[j]) f(oo + r * C + j * gD, oo + r * C + (j + 1) * gD);
    if (any_block)
      f(off(l, "post_attention_layernorm.weight"), off(l, "post_attention_layernorm.weight") + C);
    for (const char* m : {"mlp.gate_proj.weight", "mlp.up_proj.weight"})
      for (size_t b = 0; b < static_cast<size_t>(s.ffn_blocks); ++b)
        if (x.ffn_blocks[b]) f(off(l, m) + b * Fb * C, off(l, m) + (b + 1) * Fb * C);
    const size_t od = off(l, "mlp.down_proj.weight");  // (C, F): columns of kept blocks
    for (size_t r = 0; r < C; ++r)
      for (size_t b = 0; b < static_cast<size_t>(s.ffn_blocks); ++b)
        if (x.ffn_blocks[b]) f(od + r * Fh + b * Fb, od + r * Fh + (b + 1) * Fb);
  }
}

}  // namespace

std::vector<uint8_t> trainable_mask(const Subnet& s, const ModelConfig& cfg) {
  std::vector<uint8_t> m(static_cast<size_t>(count_params(cfg)), 0);
  for_each_trained_range(s, cfg,
                         [&](size_t b, size_t e) { std::fill(m.begin() + b, m.begin() + e, 1); });
  return m;
}

std::vector<uint32_t> trainable_indices(const Subnet& s, const ModelConfig& cfg) {
  std::vector<uint8_t> m = trainable_mask(s, cfg);
  std::vector<uint32_t> idx;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]) idx.push_back(static_cast<uint32_t>(i));
  return idx;
}

int lowest_trained_layer(const Subnet& s) {
  for (size_t l = 0; l < s.layers.size(); ++l)
    if (s.layers[l].train) return static_cast<int>(l);
  return -1;
}

std::string to_string(const Subnet& s) {
  std::string out;
  for (size_t l = 0; l < s.layers.size(); ++l) {
    if (l) out += '|';
    out += s.layers[l].train ? 'T' : 'F';
    out += ':';
    for (uint8_t v : s.layers[l].heads) out += static_cast<char>('0' + v);
    out += ':';
    for (uint8_t v : s.layers[l].ffn_blocks) out += static_cast<char>('0' + v);
  }
  return out;
}

std::string subnet_fingerprint(const Subnet& s) {
  const std::string t = to_string(s);
  return sha256_hex(t.data(), t.size());
}

StatusOr<Subnet> subnet_from_string(const std::string& text, const ModelConfig& cfg,
                                    int ffn_blocks) {
  Subnet s;
  s.ffn_blocks = ffn_blocks;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('|', pos);
    if (end == std::string::npos) end = text.size();
    const std::string tok = text.substr(pos, end - pos);
    const size_t c1 = tok.find(':'), c2 = c1 == std::string::npos ? c1 : tok.find(':', c1 + 1);
    if (tok.size() < 3 || (tok[0] != 'T' && tok[0] != 'F') || c1 != 1 || c2 == std::string::npos)
      return InvalidArgument("subnet: layer token '" + tok +
                             "' is not of the form T|F:<head unit bits>:<ffn block bits>");
    LayerSubnet x;
    x.train = tok[0] == 'T';
    for (size_t i = c1 + 1; i < c2; ++i) {
      if (tok[i] != '0' && tok[i] != '1')
        return InvalidArgument("subnet: bad head bit in '" + tok + "'");
      x.heads.push_back(static_cast<uint8_t>(tok[i] - '0'));
    }
    for (size_t i = c2 + 1; i < tok.size(); ++i) {
      if (tok[i] != '0' && tok[i] != '1')
        return InvalidArgument("subnet: bad FFN block bit in '" + tok + "'");
      x.ffn_blocks.push_back(static_cast<uint8_t>(tok[i] - '0'));
    }
    s.layers.push_back(std::move(x));
    pos = end + 1;
  }
  ATOLL_RETURN_IF_ERROR(validate(s, cfg));
  return s;
}

}  // namespace atl::algorithms
