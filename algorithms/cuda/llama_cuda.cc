#include "algorithms/cuda/llama_cuda.h"

#include <string>

#include "algorithms/cuda/llama_cuda_moe.h"
#include "kernels/cuda/ops.h"

namespace atl::algorithms::cuda {

namespace kc = atl::kernels::cuda;

namespace {

std::string layer_name(int l, const char* suffix) {
  return "model.layers." + std::to_string(l) + "." + suffix;
}

}  // namespace

Status h2d(kc::Context& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  // Pageable source: returns once the bytes are staged, so the caller may reuse src.
  return kc::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream()),
                        "cudaMemcpyAsync (host to device)");
}

Status d2h(kc::Context& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  ATOLL_RETURN_IF_ERROR(
      kc::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream()),
                     "cudaMemcpyAsync (device to host)"));
  return ctx.synchronize();
}

Status check_supported(const ModelConfig& cfg) {
  // Dense and MoE layers (llama_cuda_moe.h) alike: every valid config of the original
  // architecture. The Hugging Face variants run on the CPU model only (docs/model.md).
  ATOLL_RETURN_IF_ERROR(validate(cfg));
  if (num_kv_heads(cfg) != cfg.heads || cfg.attention_bias || !cfg.tie_word_embeddings)
    return InvalidArgument(
        "the CUDA model does not support grouped-query attention, q/k/v biases or an untied "
        "lm_head yet (this model: kv_heads " +
        std::to_string(num_kv_heads(cfg)) + " of heads " + std::to_string(cfg.heads) +
        ", attention_bias " + (cfg.attention_bias ? "true" : "false") + ", tie_word_embeddings " +
        (cfg.tie_word_embeddings ? "true" : "false") + "); train it on the CPU");
  return Status::Ok();
}

CudaLlama::CudaLlama(const ModelConfig& cfg, kc::Context& ctx) : cfg_(cfg), ctx_(ctx), gemm_(ctx) {}

GemmSite CudaLlama::site(int l, int k) const {
  return gemm_site(cfg_.layers, gemm_.precision(), l, k);
}

MoeSites CudaLlama::moe_sites(int l) const {
  return moe_gemm_sites(cfg_.layers, gemm_.precision(), l);
}

CudaLlama::~CudaLlama() = default;

StatusOr<std::unique_ptr<CudaLlama>> CudaLlama::create(const ModelConfig& cfg, kc::Context& ctx) {
  ATOLL_RETURN_IF_ERROR(check_supported(cfg));
  std::unique_ptr<CudaLlama> m(new CudaLlama(cfg, ctx));
  m->layout_ = make_layout(cfg);
  m->off_embed_ = m->layout_.find("model.embed_tokens.weight")->offset;
  m->off_norm_ = m->layout_.find("model.norm.weight")->offset;
  m->off_.resize(size_t(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l) {
    auto at = [&](const char* s) {
      const ParamView* v = m->layout_.find(layer_name(l, s));
      return v ? v->offset : size_t(0);  // the mlp.* tensors are absent in MoE layers
    };
    m->off_[size_t(l)] = {at("input_layernorm.weight"),  at("self_attn.q_proj.weight"),
                          at("self_attn.o_proj.weight"), at("post_attention_layernorm.weight"),
                          at("mlp.gate_proj.weight"),    at("mlp.down_proj.weight")};
  }
  if (cfg.moe_experts > 0) m->moe_ = std::make_unique<CudaMoeBlocks>(cfg, m->layout_, ctx);
  return m;
}

Status CudaLlama::ensure_shape(int B, int T) {
  if (B <= 0 || T <= 0 || T > cfg_.seq_len)
    return InvalidArgument("CUDA model: bad batch shape B=" + std::to_string(B) + " T=" +
                           std::to_string(T) + " (seq_len " + std::to_string(cfg_.seq_len) + ")");
  const size_t N = size_t(B) * T, C = cfg_.dim, F = cfg_.ffn_hidden, V = cfg_.vocab, H = cfg_.heads,
               L = cfg_.layers;
  const size_t att = size_t(B) * H * T * T;
  // The kernels index with 32-bit ints (as the CPU model checks).
  if (att > (1ULL << 31) - 1 || N * V > (1ULL << 31) - 1 || N * 3 * C > (1ULL << 31) - 1)
    return InvalidArgument("CUDA model: batch shape B=" + std::to_string(B) +
                           " T=" + std::to_string(T) +
                           " is too large for 32-bit indexing: use a smaller batch");
  // Same views as Llama::ensure_shape (dense layers only), each rounded up to 64 floats so every
  // GEMM operand starts 256-byte aligned (cuBLASLt's fastest kernels need it).
  const auto pad = [](size_t n) { return (n + 63) / 64 * 64; };
  const size_t per_layer =
      pad(N * C) * 5 + pad(N) * 2 + pad(N * 3 * C) + pad(att) + pad(N * 2 * F) + pad(N * F);
  const size_t total = per_layer * L + pad(N * C) * 3 + pad(N) + pad(N * V) + pad(N);
  // Activation gradients: dres dln datty (N, C) each, dqkv (N, 3C), dgu (N, 2F), dswi (N, F).
  const size_t gtotal = pad(N * C) * 3 + pad(N * 3 * C) + pad(N * 2 * F) + pad(N * F);
  if (total > acts_cap_ || gtotal > grads_cap_ || 2 * N > tok_cap_) {
    // Queued kernels may still read the old buffers: drain the stream before freeing them.
    ATOLL_RETURN_IF_ERROR(ctx_.synchronize());
    if (total > acts_cap_) {
      acts_ = kc::DeviceBuffer<float>();
      ATOLL_ASSIGN_OR_RETURN(acts_, kc::DeviceBuffer<float>::alloc(total));
      acts_cap_ = total;
    }
    if (gtotal > grads_cap_) {
      grads_ = kc::DeviceBuffer<float>();
      ATOLL_ASSIGN_OR_RETURN(grads_, kc::DeviceBuffer<float>::alloc(gtotal));
      grads_cap_ = gtotal;
    }
    if (2 * N > tok_cap_) {
      tok_ = kc::DeviceBuffer<int32_t>();
      ATOLL_ASSIGN_OR_RETURN(tok_, kc::DeviceBuffer<int32_t>::alloc(2 * N));
      tok_cap_ = 2 * N;
    }
  }
  if (moe_) ATOLL_RETURN_IF_ERROR(moe_->ensure(int(N)));
  B_ = B;
  T_ = T;
  float* p = acts_.data();
  auto take = [&p, &pad](size_t n) {
    float* r = p;
    p += pad(n);
    return r;
  };
  la_.resize(L);
  for (size_t l = 0; l < L; ++l) {
    LayerActs& a = la_[l];
    a.x = take(N * C);
    a.ln1 = take(N * C);
    a.rstd1 = take(N);
    a.qkv = take(N * 3 * C);
    a.att = take(att);
    a.atty = take(N * C);
    a.h = take(N * C);
    a.ln2 = take(N * C);
    a.rstd2 = take(N);
    a.gu = take(N * 2 * F);
    a.swi = take(N * F);
  }
  out_ = take(N * C);
  lnf_ = take(N * C);
  rstdf_ = take(N);
  scratch_ = take(N * C);
  logits_ = take(N * V);
  losses_ = take(N);
  return Status::Ok();
}

Status CudaLlama::forward_trunk(const float* P, const int32_t* tokens, const int32_t* targets,
                                int B, int T) {
  have_targets_ = false;  // until this forward's inputs are known good
  have_forward_ = false;
  num_targets_ = 0;
  ATOLL_RETURN_IF_ERROR(ctx_.make_current());
  ATOLL_RETURN_IF_ERROR(ensure_shape(B, T));
  const int N = B * T, C = cfg_.dim, F = cfg_.ffn_hidden, V = cfg_.vocab, H = cfg_.heads, D = C / H;
  for (int i = 0; i < N; ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      return InvalidArgument("CUDA model: token " + std::to_string(tokens[i]) + " at " +
                             std::to_string(i) + " is outside the vocabulary [0, " +
                             std::to_string(V) + ")");
  if (targets != nullptr) {
    int64_t count = 0;
    for (int i = 0; i < N; ++i) {
      if (targets[i] < -1 || targets[i] >= V)
        return InvalidArgument("CUDA model: target " + std::to_string(targets[i]) + " at " +
                               std::to_string(i) + " is outside [-1, " + std::to_string(V) + ")");
      count += targets[i] >= 0;
    }
    host_targets_.assign(targets, targets + N);
    have_targets_ = true;
    num_targets_ = count;
  }
  int32_t* dtok = tok_.data();
  int32_t* dtgt = dtok + N;
  ATOLL_RETURN_IF_ERROR(h2d(ctx_, dtok, tokens, sizeof(int32_t) * size_t(N)));
  if (have_targets_) ATOLL_RETURN_IF_ERROR(h2d(ctx_, dtgt, targets, sizeof(int32_t) * size_t(N)));

  const size_t NC = size_t(N) * C;
  const float* wte = P + off_embed_;
  ATOLL_RETURN_IF_ERROR(kc::embedding_forward(ctx_, la_[0].x, dtok, wte, N, V, C));
  for (int l = 0; l < cfg_.layers; ++l) {
    const LayerOffsets& o = off_[size_t(l)];
    const LayerActs& a = la_[size_t(l)];
    float* next = (l + 1 < cfg_.layers) ? la_[size_t(l) + 1].x : out_;
    // attention sub-block
    ATOLL_RETURN_IF_ERROR(
        kc::rmsnorm_forward(ctx_, a.ln1, a.rstd1, a.x, P + o.ln1, N, C, cfg_.norm_eps));
    ATOLL_RETURN_IF_ERROR(gemm_.forward(a.qkv, a.ln1, P + o.qkv, N, C, 3 * C, site(l, 0)));
    ATOLL_RETURN_IF_ERROR(kc::rope_forward(ctx_, a.qkv, B, T, 2 * H, D, 3 * C, cfg_.rope_base));
    ATOLL_RETURN_IF_ERROR(kc::attention_forward(ctx_, a.atty, a.att, a.qkv, B, T, H, D));
    ATOLL_RETURN_IF_ERROR(gemm_.forward(scratch_, a.atty, P + o.o, N, C, C, site(l, 1)));
    ATOLL_RETURN_IF_ERROR(kc::add_forward(ctx_, a.h, a.x, scratch_, NC));
    // MLP sub-block (dense SwiGLU, or the MoE layer of llama_cuda_moe.h)
    ATOLL_RETURN_IF_ERROR(
        kc::rmsnorm_forward(ctx_, a.ln2, a.rstd2, a.h, P + o.ln2, N, C, cfg_.norm_eps));
    if (moe_ && moe_->is_moe(l)) {
      ATOLL_RETURN_IF_ERROR(moe_->forward(l, P, a.ln2, scratch_, N, gemm_, moe_sites(l)));
    } else {
      ATOLL_RETURN_IF_ERROR(gemm_.forward(a.gu, a.ln2, P + o.gu, N, C, 2 * F, site(l, 2)));
      ATOLL_RETURN_IF_ERROR(kc::swiglu_forward(ctx_, a.swi, a.gu, N, F));
      ATOLL_RETURN_IF_ERROR(gemm_.forward(scratch_, a.swi, P + o.down, N, F, C, site(l, 3)));
    }
    ATOLL_RETURN_IF_ERROR(kc::add_forward(ctx_, next, a.h, scratch_, NC));
  }
  ATOLL_RETURN_IF_ERROR(
      kc::rmsnorm_forward(ctx_, lnf_, rstdf_, out_, P + off_norm_, N, C, cfg_.norm_eps));
  have_forward_ = true;
  return Status::Ok();
}

Status CudaLlama::forward(const float* P, const int32_t* tokens, const int32_t* targets, int B,
                          int T) {
  ATOLL_RETURN_IF_ERROR(forward_trunk(P, tokens, targets, B, T));
  const int N = B * T, C = cfg_.dim, V = cfg_.vocab;
  const int32_t* dtgt = tok_.data() + N;
  ATOLL_RETURN_IF_ERROR(
      gemm_.forward(logits_, lnf_, P + off_embed_, N, C, V, site(cfg_.layers, 0)));  // tied head
  ATOLL_RETURN_IF_ERROR(kc::zero_fill(ctx_, losses_, size_t(N)));
  if (!have_targets_) return Status::Ok();
  return kc::softmax_xent(ctx_, losses_, nullptr, logits_, dtgt, N, V, 0.0);
}

StatusOr<const float*> CudaLlama::forward_hidden(const float* P, const int32_t* tokens, int B,
                                                 int T) {
  ATOLL_RETURN_IF_ERROR(forward_trunk(P, tokens, nullptr, B, T));
  return static_cast<const float*>(lnf_);
}

StatusOr<double> CudaLlama::loss_sum(double start) {
  if (B_ == 0) return FailedPrecondition("CUDA model: loss_sum() before any forward");
  const size_t N = size_t(B_) * T_;
  std::vector<float> l(N);
  ATOLL_RETURN_IF_ERROR(ctx_.make_current());
  ATOLL_RETURN_IF_ERROR(d2h(ctx_, l.data(), losses_, N * sizeof(float)));
  double sum = start;  // in index order, as Llama::forward
  if (have_targets_)
    for (size_t i = 0; i < N; ++i)
      if (host_targets_[i] >= 0) sum += l[i];
  return sum;
}

Status CudaLlama::router_loss_sums(double& balance_sum, double& z_sum) {
  balance_sum = z_sum = 0.0;
  if (!moe_) return Status::Ok();
  if (B_ == 0) return FailedPrecondition("CUDA model: router losses before any forward");
  return moe_->loss_sums(balance_sum, z_sum);
}

StatusOr<double> CudaLlama::aux_loss() {
  double b = 0, z = 0;
  ATOLL_RETURN_IF_ERROR(router_loss_sums(b, z));
  return cfg_.moe_aux_coef * b + cfg_.moe_z_coef * z;  // MoeBlocks::weighted_loss
}

StatusOr<float> CudaLlama::loss() {
  ATOLL_ASSIGN_OR_RETURN(const double sum, loss_sum());
  return num_targets_ ? static_cast<float>(sum / static_cast<double>(num_targets_)) : 0.0f;
}

CudaLlama::GradViews CudaLlama::grad_views() {
  const size_t N = size_t(B_) * T_, NC = N * cfg_.dim, F = cfg_.ffn_hidden;
  const auto pad = [](size_t n) { return (n + 63) / 64 * 64; };  // as in ensure_shape
  GradViews g;
  g.dres = grads_.data();
  g.dln = g.dres + pad(NC);
  g.datty = g.dln + pad(NC);
  g.dqkv = g.datty + pad(NC);
  g.dgu = g.dqkv + pad(3 * NC);
  g.dswi = g.dgu + pad(N * 2 * F);
  return g;
}

Status CudaLlama::backward(const float* P, float* G, int64_t denom, double router_scale) {
  if (!have_targets_ || B_ == 0)
    return FailedPrecondition("CUDA model: backward() without a forward with targets");
  ATOLL_RETURN_IF_ERROR(ctx_.make_current());
  const int N = B_ * T_, C = cfg_.dim, V = cfg_.vocab;
  const size_t NC = size_t(N) * C;
  const int32_t* dtgt = tok_.data() + N;
  const GradViews g = grad_views();

  // Loss = Σ losses / denom, so dloss/dlosses[i] = 1/denom (the CPU model: denom = targets).
  const int64_t d = denom > 0 ? denom : num_targets_;
  const double dloss = d ? 1.0 / static_cast<double>(d) : 0.0;
  ATOLL_RETURN_IF_ERROR(kc::softmax_xent(ctx_, losses_, logits_, logits_, dtgt, N, V, dloss));
  // Tied head: dlnf (N, C) = dlogits · wte ; dwte += dlogitsᵀ · lnf.
  ATOLL_RETURN_IF_ERROR(kc::zero_fill(ctx_, g.dln, NC));
  ATOLL_RETURN_IF_ERROR(gemm_.backward(g.dln, G + off_embed_, logits_, lnf_, P + off_embed_, N, C,
                                       V, site(cfg_.layers, 0)));
  return backward_trunk(P, G, router_scale);
}

Status CudaLlama::backward_from_hidden(const float* P, float* G, const float* dh,
                                       double router_scale) {
  if (!have_forward_ || B_ == 0)
    return FailedPrecondition("CUDA model: backward_from_hidden() without a forward");
  ATOLL_RETURN_IF_ERROR(ctx_.make_current());
  const size_t NC = size_t(B_) * T_ * cfg_.dim;
  ATOLL_RETURN_IF_ERROR(h2d(ctx_, grad_views().dln, dh, NC * sizeof(float)));
  return backward_trunk(P, G, router_scale);
}

Status CudaLlama::backward_trunk(const float* P, float* G, double router_scale) {
  const int B = B_, T = T_, N = B * T, C = cfg_.dim, F = cfg_.ffn_hidden, V = cfg_.vocab,
            H = cfg_.heads, D = C / H;
  const size_t NC = size_t(N) * C;
  const int32_t* dtok = tok_.data();
  const GradViews g = grad_views();
  float *dres = g.dres, *dln = g.dln, *datty = g.datty, *dqkv = g.dqkv, *dgu = g.dgu,
        *dswi = g.dswi;
  auto zero = [&](float* p, size_t n) { return kc::zero_fill(ctx_, p, n); };

  // Final norm: dres = d(last block output).
  ATOLL_RETURN_IF_ERROR(zero(dres, NC));
  ATOLL_RETURN_IF_ERROR(
      kc::rmsnorm_backward(ctx_, dres, G + off_norm_, dln, out_, P + off_norm_, rstdf_, N, C));
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    const LayerOffsets& o = off_[size_t(l)];
    const LayerActs& a = la_[size_t(l)];
    // out = h + ffn(ln2): both branches receive dres.
    if (moe_ && moe_->is_moe(l)) {
      ATOLL_RETURN_IF_ERROR(zero(dln, NC));  // + the router losses' gradients
      ATOLL_RETURN_IF_ERROR(
          moe_->backward(l, P, G, a.ln2, dres, dln, router_scale, gemm_, moe_sites(l)));
    } else {
      ATOLL_RETURN_IF_ERROR(zero(dswi, size_t(N) * F));
      ATOLL_RETURN_IF_ERROR(
          gemm_.backward(dswi, G + o.down, dres, a.swi, P + o.down, N, F, C, site(l, 3)));
      ATOLL_RETURN_IF_ERROR(zero(dgu, size_t(N) * 2 * F));
      ATOLL_RETURN_IF_ERROR(kc::swiglu_backward(ctx_, dgu, dswi, a.gu, N, F));
      ATOLL_RETURN_IF_ERROR(zero(dln, NC));
      ATOLL_RETURN_IF_ERROR(
          gemm_.backward(dln, G + o.gu, dgu, a.ln2, P + o.gu, N, C, 2 * F, site(l, 2)));
    }
    ATOLL_RETURN_IF_ERROR(  // dres = dh
        kc::rmsnorm_backward(ctx_, dres, G + o.ln2, dln, a.h, P + o.ln2, a.rstd2, N, C));
    // h = x + o_proj(atty): both branches receive dh.
    ATOLL_RETURN_IF_ERROR(zero(datty, NC));
    ATOLL_RETURN_IF_ERROR(
        gemm_.backward(datty, G + o.o, dres, a.atty, P + o.o, N, C, C, site(l, 1)));
    ATOLL_RETURN_IF_ERROR(zero(dqkv, 3 * NC));
    ATOLL_RETURN_IF_ERROR(kc::attention_backward(ctx_, dqkv, datty, a.qkv, a.att, B, T, H, D));
    ATOLL_RETURN_IF_ERROR(  // dq, dk before RoPE
        kc::rope_backward(ctx_, dqkv, B, T, 2 * H, D, 3 * C, cfg_.rope_base));
    ATOLL_RETURN_IF_ERROR(zero(dln, NC));
    ATOLL_RETURN_IF_ERROR(
        gemm_.backward(dln, G + o.qkv, dqkv, a.ln1, P + o.qkv, N, C, 3 * C, site(l, 0)));
    ATOLL_RETURN_IF_ERROR(  // dres = dx
        kc::rmsnorm_backward(ctx_, dres, G + o.ln1, dln, a.x, P + o.ln1, a.rstd1, N, C));
  }
  return kc::embedding_backward(ctx_, G + off_embed_, dres, dtok, N, V, C);
}

}  // namespace atl::algorithms::cuda
