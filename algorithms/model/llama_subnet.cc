#include "algorithms/model/llama_subnet.h"

#include <algorithm>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/cpu/ops.h"

namespace atl::algorithms {

namespace ops = atl::kernels::cpu;

namespace {
std::string lname(int l, const char* s) {
  return "model.layers." + std::to_string(l) + "." + s;
}
}  // namespace

SubnetLlama::SubnetLlama(const ModelConfig& cfg) : cfg_(cfg) {
  Status st = validate(cfg);
  if (!st.ok()) internal_error("SubnetLlama: invalid config: " + st.message());
  layout_ = make_layout(cfg);
  off_embed_ = layout_.find("model.embed_tokens.weight")->offset;
  off_norm_ = layout_.find("model.norm.weight")->offset;
  for (int l = 0; l < cfg.layers; ++l) {
    auto at = [&](const char* s) { return layout_.find(lname(l, s))->offset; };
    off_.push_back({at("input_layernorm.weight"), at("self_attn.q_proj.weight"),
                    at("self_attn.o_proj.weight"), at("post_attention_layernorm.weight"),
                    at("mlp.gate_proj.weight"), at("mlp.down_proj.weight")});
  }
  (void)set_subnet(full_subnet(cfg, 1, true));
}

Status SubnetLlama::set_subnet(const Subnet& s) {
  ATOLL_RETURN_IF_ERROR(validate(s, cfg_));
  sub_ = s;
  heads_.assign(cfg_.layers, {});
  blocks_.assign(cfg_.layers, {});
  for (int l = 0; l < cfg_.layers; ++l) {
    for (int h = 0; h < cfg_.heads; ++h)
      if (s.layers[l].heads[h]) heads_[l].push_back(h);
    for (int b = 0; b < s.ffn_blocks; ++b)
      if (s.layers[l].ffn_blocks[b]) blocks_[l].push_back(b);
  }
  lowest_ = lowest_trained_layer(s);
  B_ = T_ = 0;  // views depend on the kept units: recarve on the next forward
  return Status::Ok();
}

size_t SubnetLlama::buffer_bytes() const {
  size_t n = acts_.size() + grads_buf_.size() + wqkv_.size() + wo_.size() + wgu_.size() +
             wd_.size() + dwqkv_.size() + dwo_.size() + dwgu_.size() + dwd_.size() + dnorm_.size();
  return n * sizeof(float);
}

void SubnetLlama::ensure_shape(int B, int T) {
  if (B <= 0 || T <= 0 || T > cfg_.seq_len) internal_error("SubnetLlama: bad batch shape");
  const size_t N = static_cast<size_t>(B) * T, C = cfg_.dim, D = C / cfg_.heads,
               Fb = cfg_.ffn_hidden / sub_.ffn_blocks, V = cfg_.vocab, L = cfg_.layers;
  // Activations of one layer with h heads and f blocks kept (x excluded: see below).
  auto layer_size = [&](size_t h, size_t f) {
    return N * C * 3 /* ln1 h ln2 */ + N * 2 + N * 3 * h * D + static_cast<size_t>(B) * h * T * T +
           N * h * D + N * 3 * f * Fb;
  };
  // Layers below the lowest trained one are never revisited by backward: they share one block
  // (and two ping-pong inputs), so a site that trains only the top layers keeps only their
  // activations. Without a trained layer nothing is kept.
  const size_t first_kept = lowest_ < 0 ? L : static_cast<size_t>(lowest_);
  size_t shared = 0, total = 2 * N * C;
  for (size_t l = 0; l < L; ++l) {
    const size_t s = layer_size(heads_[l].size(), blocks_[l].size());
    if (l < first_kept)
      shared = std::max(shared, s);
    else
      total += s + N * C;
  }
  total += shared + N * C * 3 + N * 2 + N * V;
  if (acts_.size() < total) acts_.resize(total);
  B_ = B;
  T_ = T;
  float* p = acts_.data();
  auto take = [&p](size_t n) {
    float* r = p;
    p += n;
    return r;
  };
  float* ping[2] = {take(N * C), take(N * C)};
  float* shared_base = take(shared);
  la_.assign(L, {});
  for (size_t l = 0; l < L; ++l) {
    const size_t h = heads_[l].size(), f = blocks_[l].size();
    Acts& a = la_[l];
    float* saved = p;
    if (l < first_kept) {
      p = shared_base;
      a.x = ping[l % 2];
    } else {
      a.x = take(N * C);
    }
    a.ln1 = take(N * C);
    a.rstd1 = take(N);
    a.qkv = take(N * 3 * h * D);
    a.att = take(static_cast<size_t>(B) * h * T * T);
    a.atty = take(N * h * D);
    a.h = take(N * C);
    a.ln2 = take(N * C);
    a.rstd2 = take(N);
    a.gu = take(N * 2 * f * Fb);
    a.swi = take(N * f * Fb);
    if (l < first_kept) p = saved;
  }
  out_ = take(N * C);
  lnf_ = take(N * C);
  scratch_ = take(N * C);
  rstdf_ = take(N);
  losses_ = take(N);
  logits_ = take(N * V);
  const size_t maxw = 3 * C * C + 2 * cfg_.ffn_hidden * C;
  for (auto* w : {&wqkv_, &wo_, &wgu_, &wd_}) w->resize(maxw);
}

namespace {

// The kept units of a weight matrix, as (offset into the full matrix, offset into the packed
// one, length) runs in packed order. Row groups: the full matrix is (parts·R, C), R rows per
// part, a unit owning g consecutive rows of every part (a head's q|k|v rows, a block's
// gate|up rows); the packed matrix holds the kept units' rows part by part. Column groups: the
// full matrix is (C, width), a unit owning g consecutive columns (o_proj, down_proj); the
// packed matrix is (C, kept·g).
template <typename Run>
void for_row_groups(size_t parts, size_t R, size_t C, const std::vector<int>& keep, size_t g,
                    Run run) {
  size_t packed = 0;
  for (size_t part = 0; part < parts; ++part)
    for (int k : keep) {
      run((part * R + k * g) * C, packed, g * C);
      packed += g * C;
    }
}
template <typename Run>
void for_col_groups(size_t C, size_t width, const std::vector<int>& keep, size_t g, Run run) {
  const size_t kept = keep.size() * g;
  for (size_t r = 0; r < C; ++r)
    for (size_t i = 0; i < keep.size(); ++i) run(r * width + keep[i] * g, r * kept + i * g, g);
}

auto copy_into(float* packed, const float* full) {
  return
      [=](size_t f, size_t p, size_t n) { std::memcpy(packed + p, full + f, n * sizeof(float)); };
}
auto add_into(float* full, const float* packed) {
  return [=](size_t f, size_t p, size_t n) {
    for (size_t i = 0; i < n; ++i) full[f + i] += packed[p + i];
  };
}

}  // namespace

void SubnetLlama::gather(const float* P, int l) {
  const size_t C = cfg_.dim, D = C / cfg_.heads, F = cfg_.ffn_hidden, Fb = F / sub_.ffn_blocks;
  for_row_groups(3, C, C, heads_[l], D, copy_into(wqkv_.data(), P + off_[l].qkv));
  for_col_groups(C, C, heads_[l], D, copy_into(wo_.data(), P + off_[l].o));
  for_row_groups(2, F, C, blocks_[l], Fb, copy_into(wgu_.data(), P + off_[l].gu));
  for_col_groups(C, F, blocks_[l], Fb, copy_into(wd_.data(), P + off_[l].down));
}

void SubnetLlama::scatter_add(float* G, int l) const {
  const size_t C = cfg_.dim, D = C / cfg_.heads, F = cfg_.ffn_hidden, Fb = F / sub_.ffn_blocks;
  for_row_groups(3, C, C, heads_[l], D, add_into(G + off_[l].qkv, dwqkv_.data()));
  for_col_groups(C, C, heads_[l], D, add_into(G + off_[l].o, dwo_.data()));
  for_row_groups(2, F, C, blocks_[l], Fb, add_into(G + off_[l].gu, dwgu_.data()));
  for_col_groups(C, F, blocks_[l], Fb, add_into(G + off_[l].down, dwd_.data()));
}

float SubnetLlama::forward(const ParamSet& params, const int32_t* tokens, const int32_t* targets,
                           int B, int T) {
  if (!(params.layout() == layout_)) internal_error("SubnetLlama::forward: layout mismatch");
  if (targets == nullptr) internal_error("SubnetLlama::forward: targets are required");
  if (B != B_ || T != T_) ensure_shape(B, T);
  const int N = B * T, C = cfg_.dim, V = cfg_.vocab, D = C / cfg_.heads,
            Fb = cfg_.ffn_hidden / sub_.ffn_blocks;
  for (int i = 0; i < N; ++i)
    if (tokens[i] < 0 || tokens[i] >= V || targets[i] < -1 || targets[i] >= V)
      internal_error("SubnetLlama::forward: token or target out of range");
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
  const float* P = params.data();
  double fl = 0;
  const double n = N;
  ops::embedding_forward(la_[0].x, tokens, P + off_embed_, N, V, C);
  for (int l = 0; l < cfg_.layers; ++l) {
    Acts& a = la_[l];
    float* next = l + 1 < cfg_.layers ? la_[l + 1].x : out_;
    const int h = static_cast<int>(heads_[l].size()), f = static_cast<int>(blocks_[l].size());
    const int Dk = h * D, Fk = f * Fb;
    gather(P, l);
    if (h > 0) {  // attention over the kept heads only
      ops::rmsnorm_forward(a.ln1, a.rstd1, a.x, P + off_[l].ln1, N, C, cfg_.norm_eps);
      ops::matmul_forward(a.qkv, a.ln1, wqkv_.data(), N, C, 3 * Dk);  // (N, C) -> (N, 3Dk)
      ops::rope_forward(a.qkv, B, T, 2 * h, D, 3 * Dk, cfg_.rope_base);
      ops::attention_forward(a.atty, a.att, a.qkv, B, T, h, D);  // -> (N, Dk)
      ops::matmul_forward(scratch_, a.atty, wo_.data(), N, Dk, C);
      ops::add_forward(a.h, a.x, scratch_, static_cast<size_t>(N) * C);
      fl += 2 * n * C * 3 * Dk + 2 * n * Dk * C + 4.0 * B * h * T * T * D;
    } else {
      std::memcpy(a.h, a.x, sizeof(float) * N * C);
    }
    if (f > 0) {  // SwiGLU over the kept channel blocks only
      ops::rmsnorm_forward(a.ln2, a.rstd2, a.h, P + off_[l].ln2, N, C, cfg_.norm_eps);
      ops::matmul_forward(a.gu, a.ln2, wgu_.data(), N, C, 2 * Fk);  // (N, C) -> (N, 2Fk)
      ops::swiglu_forward(a.swi, a.gu, N, Fk);
      ops::matmul_forward(scratch_, a.swi, wd_.data(), N, Fk, C);
      ops::add_forward(next, a.h, scratch_, static_cast<size_t>(N) * C);
      fl += 2 * n * C * 2 * Fk + 2 * n * Fk * C;
    } else {
      std::memcpy(next, a.h, sizeof(float) * N * C);
    }
  }
  ops::rmsnorm_forward(lnf_, rstdf_, out_, P + off_norm_, N, C, cfg_.norm_eps);
  ops::matmul_forward(logits_, lnf_, P + off_embed_, N, C, V);
  fl += 2 * n * C * V;
  fwd_flops_ = fl;
  bwd_flops_ = 0;
  ops::softmax_xent(losses_, static_cast<float*>(nullptr), logits_, targets, N, V, 0.0);
  double sum = 0;
  num_targets_ = 0;
  for (int i = 0; i < N; ++i)
    if (targets[i] >= 0) {
      sum += losses_[i];
      ++num_targets_;
    }
  return num_targets_ ? static_cast<float>(sum / static_cast<double>(num_targets_)) : 0.0f;
}

void SubnetLlama::backward(const ParamSet& params, ParamSet& grads) {
  if (!(params.layout() == layout_) || !(grads.layout() == layout_))
    internal_error("SubnetLlama::backward: layout mismatch");
  if (B_ == 0) internal_error("SubnetLlama::backward without a forward");
  bwd_flops_ = 0;
  if (lowest_ < 0) return;  // nothing trained: no backward at all
  const int B = B_, T = T_, N = B * T, C = cfg_.dim, V = cfg_.vocab, D = C / cfg_.heads,
            Fb = cfg_.ffn_hidden / sub_.ffn_blocks;
  const size_t NC = static_cast<size_t>(N) * C, F = cfg_.ffn_hidden;
  const double n = N;
  // dres (N,C) dln (N,C) datty (N,C) dqkv (N,3C) dgu (N,2F) dswi (N,F), sized for all units.
  const size_t need = NC * 6 + static_cast<size_t>(N) * 3 * F;
  if (grads_buf_.size() < need) grads_buf_.resize(need);
  float* dres = grads_buf_.data();
  float* dln = dres + NC;
  float* datty = dln + NC;
  float* dqkv = datty + NC;
  float* dgu = dqkv + 3 * NC;
  float* dswi = dgu + static_cast<size_t>(N) * 2 * F;
  const size_t maxw = 3 * static_cast<size_t>(C) * C + 2 * F * C;
  for (auto* w : {&dwqkv_, &dwo_, &dwgu_, &dwd_}) w->resize(maxw);
  dnorm_.resize(C);  // gradient sink for frozen norm gains
  const float* P = params.data();
  float* G = grads.data();
  double fl = 0;

  const double dloss = num_targets_ ? 1.0 / static_cast<double>(num_targets_) : 0.0;
  ops::softmax_xent(losses_, logits_, logits_, targets_.data(), N, V, dloss);
  ops::zero_fill(dln, NC);  // tied head, frozen: only dlnf = dlogits · wte
  ops::matmul_backward(dln, static_cast<float*>(nullptr), logits_, lnf_, P + off_embed_, N, C, V);
  fl += 2 * n * C * V;
  ops::zero_fill(dres, NC);
  ops::rmsnorm_backward(dres, dnorm_.data(), dln, out_, P + off_norm_, rstdf_, N, C);

  for (int l = cfg_.layers - 1; l >= lowest_; --l) {
    const Acts& a = la_[l];
    const bool train = sub_.layers[l].train;
    const int h = static_cast<int>(heads_[l].size()), f = static_cast<int>(blocks_[l].size());
    const int Dk = h * D, Fk = f * Fb;
    gather(P, l);
    if (train) {
      std::fill(dwqkv_.begin(), dwqkv_.end(), 0.0f);
      std::fill(dwo_.begin(), dwo_.end(), 0.0f);
      std::fill(dwgu_.begin(), dwgu_.end(), 0.0f);
      std::fill(dwd_.begin(), dwd_.end(), 0.0f);
    }
    float* nsink = dnorm_.data();
    if (f > 0) {
      // out = h + down(swi): dres flows to both.
      ops::zero_fill(dswi, static_cast<size_t>(N) * Fk);
      ops::matmul_backward(dswi, train ? dwd_.data() : nullptr, dres, a.swi, wd_.data(), N, Fk, C);
      ops::zero_fill(dgu, static_cast<size_t>(N) * 2 * Fk);
      ops::swiglu_backward(dgu, dswi, a.gu, N, Fk);
      ops::zero_fill(dln, NC);
      ops::matmul_backward(dln, train ? dwgu_.data() : nullptr, dgu, a.ln2, wgu_.data(), N, C,
                           2 * Fk);
      ops::rmsnorm_backward(dres, train ? G + off_[l].ln2 : nsink, dln, a.h, P + off_[l].ln2,
                            a.rstd2, N, C);
      fl += (train ? 2.0 : 1.0) * (2 * n * Fk * C + 2 * n * C * 2 * Fk);
    }
    if (h > 0) {
      ops::zero_fill(datty, static_cast<size_t>(N) * Dk);
      ops::matmul_backward(datty, train ? dwo_.data() : nullptr, dres, a.atty, wo_.data(), N, Dk,
                           C);
      ops::zero_fill(dqkv, static_cast<size_t>(N) * 3 * Dk);
      ops::attention_backward(dqkv, datty, a.qkv, a.att, B, T, h, D);
      ops::rope_backward(dqkv, B, T, 2 * h, D, 3 * Dk, cfg_.rope_base);
      // dln feeds both the layer below and this layer's input_layernorm gain.
      ops::zero_fill(dln, NC);
      ops::matmul_backward(dln, train ? dwqkv_.data() : nullptr, dqkv, a.ln1, wqkv_.data(), N, C,
                           3 * Dk);
      ops::rmsnorm_backward(dres, train ? G + off_[l].ln1 : nsink, dln, a.x, P + off_[l].ln1,
                            a.rstd1, N, C);
      fl += (train ? 2.0 : 1.0) * (2 * n * Dk * C + 2 * n * C * 3 * Dk) + 8.0 * B * h * T * T * D;
    }
    if (train) scatter_add(G, l);
  }
  bwd_flops_ = fl;
}

}  // namespace atl::algorithms
