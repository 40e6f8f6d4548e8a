#include "algorithms/hydra/importance.h"

#include <cmath>

#include "algorithms/model/subnet.h"

namespace atl::algorithms::hydra {

UnitScores empty_scores(const ModelConfig& cfg, int ffn_blocks) {
  UnitScores s;
  s.layers = cfg.layers;
  s.heads = head_units(cfg);
  s.ffn_blocks = ffn_blocks;
  s.layer.assign(cfg.layers, 0.0);
  s.head.assign(static_cast<size_t>(cfg.layers) * s.heads, 0.0);
  s.ffn.assign(static_cast<size_t>(cfg.layers) * ffn_blocks, 0.0);
  return s;
}

void accumulate_taylor(const ParamSet& params, const ParamSet& grads, const ModelConfig& cfg,
                       UnitScores& acc) {
  const ParamLayout& L = params.layout();
  const size_t C = cfg.dim, U = head_units(cfg), D = C / cfg.heads, gD = heads_per_unit(cfg) * D,
               Ckv = U * D, F = cfg.ffn_hidden, G = acc.ffn_blocks, Fb = F / G;
  const float* w = params.data();
  const float* g = grads.data();
  // Σ|g·w| over [b, b + n), in double, in index order (deterministic).
  auto tw = [&](size_t b, size_t n) {
    double s = 0;
    for (size_t i = b; i < b + n; ++i) s += std::fabs(static_cast<double>(g[i]) * w[i]);
    return s;
  };
  for (int l = 0; l < cfg.layers; ++l) {
    auto off = [&](const char* s) {
      return L.find("model.layers." + std::to_string(l) + "." + s)->offset;
    };
    const size_t ln1 = off("input_layernorm.weight"), q = off("self_attn.q_proj.weight"),
                 o = off("self_attn.o_proj.weight"), gate = off("mlp.gate_proj.weight"),
                 down = off("mlp.down_proj.weight");
    // The layer's views are contiguous from input_layernorm to down_proj.
    acc.layer[l] += tw(ln1, down + C * F - ln1);
    // q_proj (C, C), k_proj and v_proj (Ckv, C) follow each other, then the biases.
    const size_t k = q + C * C, v = k + Ckv * C, qb = v + Ckv * C;
    for (size_t j = 0; j < U; ++j) {
      double s = tw(q + j * gD * C, gD * C);
      s += tw(k + j * D * C, D * C);
      s += tw(v + j * D * C, D * C);
      for (size_t r = 0; r < C; ++r) s += tw(o + r * C + j * gD, gD);
      if (cfg.attention_bias)
        s += tw(qb + j * gD, gD) + tw(qb + C + j * D, D) + tw(qb + C + Ckv + j * D, D);
      acc.head[l * U + j] += s;
    }
    for (size_t b = 0; b < G; ++b) {
      double s = 0;
      for (size_t part = 0; part < 2; ++part) s += tw(gate + (part * F + b * Fb) * C, Fb * C);
      for (size_t r = 0; r < C; ++r) s += tw(down + r * F + b * Fb, Fb);
      acc.ffn[l * G + b] += s;
    }
  }
  acc.batches += 1;
}

void finish_average(UnitScores& acc) {
  if (acc.batches <= 0) return;
  const double k = 1.0 / acc.batches;
  for (auto* v : {&acc.layer, &acc.head, &acc.ffn})
    for (double& x : *v) x *= k;
  acc.batches = 1;
}

StatusOr<UnitScores> taylor_importance(Llama& model, const ParamSet& params, const int32_t* tokens,
                                       int batches, int B, int T, int ffn_blocks) {
  const ModelConfig& cfg = model.config();
  if (ffn_blocks <= 0 || cfg.ffn_hidden % ffn_blocks != 0)
    return InvalidArgument("importance: ffn_blocks " + std::to_string(ffn_blocks) +
                           " must divide ffn_hidden " + std::to_string(cfg.ffn_hidden));
  if (batches <= 0 || B <= 0 || T <= 0 || T > cfg.seq_len)
    return InvalidArgument("importance: need batches, B > 0 and 0 < T <= seq_len");
  UnitScores acc = empty_scores(cfg, ffn_blocks);
  ParamSet grads(params.layout());
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
  for (int k = 0; k < batches; ++k) {
    const int32_t* rows = tokens + static_cast<size_t>(k) * B * (T + 1);
    for (int r = 0; r < B; ++r)
      for (int t = 0; t < T; ++t) {
        in[static_cast<size_t>(r) * T + t] = rows[static_cast<size_t>(r) * (T + 1) + t];
        tg[static_cast<size_t>(r) * T + t] = rows[static_cast<size_t>(r) * (T + 1) + t + 1];
      }
    grads.zero();
    model.forward(params, in.data(), tg.data(), B, T);
    model.backward(params, grads);
    accumulate_taylor(params, grads, cfg, acc);
  }
  finish_average(acc);
  return acc;
}

Status validate(const UnitScores& s, const ModelConfig& cfg, int ffn_blocks) {
  const int U = head_units(cfg);
  if (s.layers != cfg.layers || s.heads != U || s.ffn_blocks != ffn_blocks ||
      s.layer.size() != static_cast<size_t>(cfg.layers) ||
      s.head.size() != static_cast<size_t>(cfg.layers) * U ||
      s.ffn.size() != static_cast<size_t>(cfg.layers) * ffn_blocks)
    return InvalidArgument("importance scores: shape does not match the model (" +
                           std::to_string(cfg.layers) + " layers, " + std::to_string(U) +
                           " head units, " + std::to_string(ffn_blocks) + " FFN blocks)");
  for (const auto* v : {&s.layer, &s.head, &s.ffn})
    for (double x : *v)
      if (!std::isfinite(x) || x < 0)
        return InvalidArgument("importance scores: every score must be finite and >= 0, got " +
                               std::to_string(x));
  return Status::Ok();
}

}  // namespace atl::algorithms::hydra
