#include "algorithms/model/subnet.h"

#include <algorithm>

#include "kernels/core/sha256.h"

namespace atl::algorithms {

Subnet full_subnet(const ModelConfig& cfg, int ffn_blocks, bool train) {
  Subnet s;
  s.ffn_blocks = ffn_blocks;
  s.layers.resize(cfg.layers);
  for (auto& l : s.layers) {
    l.heads.assign(cfg.heads, 1);
    l.ffn_blocks.assign(std::max(ffn_blocks, 0), 1);
    l.train = train;
  }
  return s;
}

Status validate(const Subnet& s, const ModelConfig& cfg) {
  if (num_kv_heads(cfg) != cfg.heads || cfg.attention_bias || !cfg.tie_word_embeddings)
    return InvalidArgument(
        "subnet: Hydra's subnet model supports plain multi-head attention with a tied head and "
        "no q/k/v biases; this model has kv_heads " +
        std::to_string(num_kv_heads(cfg)) + ", attention_bias " +
        (cfg.attention_bias ? "true" : "false") + ", tie_word_embeddings " +
        (cfg.tie_word_embeddings ? "true" : "false"));
  if (s.ffn_blocks <= 0 || cfg.ffn_hidden % s.ffn_blocks != 0)
    return InvalidArgument("subnet: ffn_blocks " + std::to_string(s.ffn_blocks) +
                           " must be positive and divide ffn_hidden " +
                           std::to_string(cfg.ffn_hidden));
  if (static_cast<int>(s.layers.size()) != cfg.layers)
    return InvalidArgument("subnet: " + std::to_string(s.layers.size()) +
                           " layers, the model has " + std::to_string(cfg.layers));
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSubnet& x = s.layers[l];
    if (static_cast<int>(x.heads.size()) != cfg.heads ||
        static_cast<int>(x.ffn_blocks.size()) != s.ffn_blocks)
      return InvalidArgument("subnet: layer " + std::to_string(l) + " has " +
                             std::to_string(x.heads.size()) + " heads and " +
                             std::to_string(x.ffn_blocks.size()) + " FFN blocks, expected " +
                             std::to_string(cfg.heads) + " and " + std::to_string(s.ffn_blocks));
    for (uint8_t v : x.heads)
      if (v > 1) return InvalidArgument("subnet: head flags must be 0 or 1");
    for (uint8_t v : x.ffn_blocks)
      if (v > 1) return InvalidArgument("subnet: FFN block flags must be 0 or 1");
  }
  return Status::Ok();
}

namespace {

// Calls f(begin, end) for every trained element range, in ascending offset order.
template <typename F>
void for_each_trained_range(const Subnet& s, const ModelConfig& cfg, F&& f) {
  const ParamLayout layout = make_layout(cfg);
  const size_t C = cfg.dim, H = cfg.heads, D = C / H, Fh = cfg.ffn_hidden, Fb = Fh / s.ffn_blocks;
  auto off = [&](int l, const char* suffix) {
    return layout.find("model.layers." + std::to_string(l) + "." + suffix)->offset;
  };
  for (int l = 0; l < cfg.layers; ++l) {
    const LayerSubnet& x = s.layers[l];
    if (!x.train) continue;
    const bool any_head = std::count(x.heads.begin(), x.heads.end(), 1) > 0;
    const bool any_block = std::count(x.ffn_blocks.begin(), x.ffn_blocks.end(), 1) > 0;
    if (any_head) f(off(l, "input_layernorm.weight"), off(l, "input_layernorm.weight") + C);
    // q, k, v: rows of kept heads (contiguous D×C runs).
    for (const char* m :
         {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"})
      for (size_t h = 0; h < H; ++h)
        if (x.heads[h]) f(off(l, m) + h * D * C, off(l, m) + (h + 1) * D * C);
    // o_proj (C, C): columns of kept heads, row by row.
    const size_t oo = off(l, "self_attn.o_proj.weight");
    for (size_t r = 0; r < C; ++r)
      for (size_t h = 0; h < H; ++h)
        if (x.heads[h]) f(oo + r * C + h * D, oo + r * C + (h + 1) * D);
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
                             "' is not of the form T|F:<head bits>:<ffn block bits>");
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
