#include "algorithms/cuda/cuda_trainer.h"

#include <string>

#include "algorithms/data/dataset.h"
#include "algorithms/optim/adamw.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/devices.h"
#include "kernels/cuda/ops.h"

namespace atl::algorithms::cuda {

namespace kc = atl::kernels::cuda;

Status check_supported(const ModelConfig& model, const TrainerConfig& train) {
  ATOLL_RETURN_IF_ERROR(check_supported(model));
  // Every precision recipe too (precision_cuda.h).
  return validate(train, model);
}

CudaTrainer::~CudaTrainer() {
  // Models and buffers go before the contexts they were created on (members are destroyed in
  // reverse order; ranks_ is declared last, so this is only about explicitness).
  ranks_.clear();
}

StatusOr<std::unique_ptr<CudaTrainer>> CudaTrainer::create(const ModelConfig& model,
                                                           const TrainerConfig& train,
                                                           const std::vector<int>& devices) {
  ATOLL_RETURN_IF_ERROR(check_supported(model, train));
  if (devices.empty()) return InvalidArgument("CUDA trainer: no device given (e.g. cuda:0)");
  if (train.batch < static_cast<int>(devices.size()))
    return InvalidArgument("batch " + std::to_string(train.batch) + " has fewer rows than the " +
                           std::to_string(devices.size()) +
                           " devices: give every device at least one row (raise batch or list " +
                           "fewer devices)");
  auto n = kc::device_count();
  if (!n.ok()) return Unavailable("no CUDA device: " + n.status().message());
  ATOLL_RETURN_IF_ERROR(kc::validate_devices(devices, *n));

  std::unique_ptr<CudaTrainer> t(new CudaTrainer());
  t->mcfg_ = model;
  t->tcfg_ = train;
  t->layout_ = make_layout(model);
  // AdamW's grouping: consecutive views with the same decay rule form one update call.
  const auto& views = t->layout_.views();
  for (size_t i = 0; i < views.size();) {
    const bool d = AdamW::decays(views[i]);
    size_t j = i + 1;
    while (j < views.size() && AdamW::decays(views[j]) == d) ++j;
    t->groups_.push_back({views[i].offset, views[j - 1].offset + views[j - 1].numel(), d});
    i = j;
  }
  std::vector<kc::Context*> ctxs;
  if (devices.size() == 1) {
    ATOLL_ASSIGN_OR_RETURN(t->single_, kc::Context::create(devices[0]));
    ctxs.push_back(t->single_.get());
  } else {
    ATOLL_ASSIGN_OR_RETURN(t->group_, kc::NcclGroup::create(devices));
    for (int r = 0; r < t->group_->size(); ++r) ctxs.push_back(&t->group_->context(r));
  }
  const size_t P = t->layout_.numel();
  for (kc::Context* ctx : ctxs) {
    ATOLL_RETURN_IF_ERROR(ctx->make_current());
    Rank rk;
    rk.ctx = ctx;
    ATOLL_ASSIGN_OR_RETURN(rk.model, CudaLlama::create(model, *ctx));
    rk.model->set_precision(train.precision, train.precision_seed);
    ATOLL_ASSIGN_OR_RETURN(rk.params, kc::DeviceBuffer<float>::alloc(P));
    ATOLL_ASSIGN_OR_RETURN(rk.grads, kc::DeviceBuffer<float>::alloc(P));
    ATOLL_ASSIGN_OR_RETURN(rk.m, kc::DeviceBuffer<float>::alloc(P));
    ATOLL_ASSIGN_OR_RETURN(rk.v, kc::DeviceBuffer<float>::alloc(P));
    t->ranks_.push_back(std::move(rk));
  }
  ATOLL_RETURN_IF_ERROR(t->reset_optimizer());
  return t;
}

Status CudaTrainer::reset_optimizer() {
  for (Rank& rk : ranks_) {
    ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
    ATOLL_RETURN_IF_ERROR(kc::zero_fill(*rk.ctx, rk.m.data(), rk.m.size()));
    ATOLL_RETURN_IF_ERROR(kc::zero_fill(*rk.ctx, rk.v.data(), rk.v.size()));
    ATOLL_RETURN_IF_ERROR(rk.ctx->synchronize());
  }
  adam_step_ = 0;
  return Status::Ok();
}

Status CudaTrainer::load_params(const ParamSet& params) {
  if (!(params.layout() == layout_))
    return InvalidArgument("CUDA trainer: parameter layout does not match the model config");
  for (Rank& rk : ranks_) {
    ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
    ATOLL_RETURN_IF_ERROR(
        h2d(*rk.ctx, rk.params.data(), params.data(), params.numel() * sizeof(float)));
  }
  return Status::Ok();
}

Status CudaTrainer::store_params(ParamSet& params, int rank) {
  if (!(params.layout() == layout_) || rank < 0 || rank >= num_devices())
    return InvalidArgument("CUDA trainer: bad layout or rank in store_params");
  Rank& rk = ranks_[size_t(rank)];
  ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
  return d2h(*rk.ctx, params.data(), rk.params.data(), params.numel() * sizeof(float));
}

Status CudaTrainer::download_grads(ParamSet& grads, int rank) {
  if (!(grads.layout() == layout_) || rank < 0 || rank >= num_devices())
    return InvalidArgument("CUDA trainer: bad layout or rank in download_grads");
  Rank& rk = ranks_[size_t(rank)];
  ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
  return d2h(*rk.ctx, grads.data(), rk.grads.data(), grads.numel() * sizeof(float));
}

Status CudaTrainer::download_moments(ParamSet& m, ParamSet& v) {
  if (!(m.layout() == layout_) || !(v.layout() == layout_))
    return InvalidArgument("CUDA trainer: moment layout does not match the model config");
  Rank& rk = ranks_[0];
  ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
  ATOLL_RETURN_IF_ERROR(d2h(*rk.ctx, m.data(), rk.m.data(), m.numel() * sizeof(float)));
  return d2h(*rk.ctx, v.data(), rk.v.data(), v.numel() * sizeof(float));
}

Status CudaTrainer::upload_moments(const ParamSet& m, const ParamSet& v, int64_t adam_steps) {
  if (!(m.layout() == layout_) || !(v.layout() == layout_))
    return InvalidArgument("CUDA trainer: moment layout does not match the model config");
  for (Rank& rk : ranks_) {
    ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
    ATOLL_RETURN_IF_ERROR(h2d(*rk.ctx, rk.m.data(), m.data(), m.numel() * sizeof(float)));
    ATOLL_RETURN_IF_ERROR(h2d(*rk.ctx, rk.v.data(), v.data(), v.numel() * sizeof(float)));
    ATOLL_RETURN_IF_ERROR(rk.ctx->synchronize());
  }
  adam_step_ = adam_steps;
  return Status::Ok();
}

StatusOr<StepStats> CudaTrainer::step(ParamSet& params, const int32_t* tokens,
                                      int64_t global_step) {
  ATOLL_RETURN_IF_ERROR(load_params(params));
  ATOLL_ASSIGN_OR_RETURN(StepStats s, step_device(tokens, global_step));
  ATOLL_RETURN_IF_ERROR(store_params(params));
  return s;
}

StatusOr<StepStats> CudaTrainer::step_device(const int32_t* tokens, int64_t global_step) {
  const int B = tcfg_.batch, T = tcfg_.seq, R = num_devices();
  const size_t P = layout_.numel();
  data::split_inputs_targets(tokens, B, T, inputs_, targets_);

  // Forward on every rank (enqueued; the ranks run concurrently on their own streams).
  int64_t total_targets = 0;
  for (int r = 0; r < R; ++r) {
    Rank& rk = ranks_[size_t(r)];
    const data::RowRange rows = data::rows_for_worker(B, R, r);
    const size_t at = size_t(rows.begin) * T;
    ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
    ATOLL_RETURN_IF_ERROR(kc::zero_fill(*rk.ctx, rk.grads.data(), P));
    rk.model->gemm().begin_step(static_cast<uint64_t>(global_step));  // as InnerTrainer::step
    ATOLL_RETURN_IF_ERROR(rk.model->forward(rk.params.data(), inputs_.data() + at,
                                            targets_.data() + at, rows.size(), T));
    total_targets += rk.model->num_targets();
  }
  // Backward: each rank's gradient of Σ its losses / total_targets, so their sum is the
  // gradient of the whole batch's mean loss. MoE router losses are each rank's own (over its
  // tokens), weighted by its share of the rows: on one device exactly the CPU objective; on
  // several the z-loss sums to the batch's exactly and the balance loss becomes the
  // token-weighted mean of the ranks' (docs/cuda.md).
  for (int r = 0; r < R; ++r) {
    Rank& rk = ranks_[size_t(r)];
    const double share = R == 1 ? 1.0 : double(data::rows_for_worker(B, R, r).size()) / double(B);
    ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
    ATOLL_RETURN_IF_ERROR(
        rk.model->backward(rk.params.data(), rk.grads.data(), total_targets, share));
  }
  if (R > 1) {
    std::vector<float*> bufs;
    for (Rank& rk : ranks_) bufs.push_back(rk.grads.data());
    ATOLL_RETURN_IF_ERROR(group_->all_reduce_sum(bufs, P));
  }
  StepStats s;
  // The batch's mean loss: one running sum over the ranks in rank (= row) order, each rank's
  // positions in index order: the CPU model's sequence of additions.
  double loss_sum = 0.0;
  for (Rank& rk : ranks_) {
    ATOLL_ASSIGN_OR_RETURN(loss_sum, rk.model->loss_sum(loss_sum));
  }
  s.loss = total_targets ? static_cast<float>(loss_sum / static_cast<double>(total_targets)) : 0.f;
  s.lr = kernels::cpu::lr_schedule(global_step, tcfg_.warmup, tcfg_.total_steps, tcfg_.lr,
                                   tcfg_.min_lr);
  ++adam_step_;
  kc::AdamWParams hp;
  hp.lr = s.lr;
  hp.beta1 = tcfg_.beta1;
  hp.beta2 = tcfg_.beta2;
  hp.eps = tcfg_.eps;
  // After the all-reduce every rank holds the same gradient bits, so the norm, the clip and the
  // update below are the same on every rank: the replicas stay bitwise equal.
  for (int r = 0; r < R; ++r) {
    Rank& rk = ranks_[size_t(r)];
    ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
    ATOLL_ASSIGN_OR_RETURN(const double norm, kc::global_norm_host(*rk.ctx, rk.grads.data(), P));
    if (r == 0) s.grad_norm = norm;
    if (tcfg_.grad_clip > 0)
      ATOLL_RETURN_IF_ERROR(
          kc::clip_by_global_norm(*rk.ctx, rk.grads.data(), P, norm, tcfg_.grad_clip).status());
    for (const DecayGroup& g : groups_) {
      hp.weight_decay = g.decay ? tcfg_.weight_decay : 0.0;
      ATOLL_RETURN_IF_ERROR(kc::adamw_update(
          *rk.ctx, rk.params.data() + g.begin, rk.grads.data() + g.begin, rk.m.data() + g.begin,
          rk.v.data() + g.begin, g.end - g.begin, hp, adam_step_));
    }
  }
  for (Rank& rk : ranks_) {
    ATOLL_RETURN_IF_ERROR(rk.ctx->make_current());
    ATOLL_RETURN_IF_ERROR(rk.ctx->synchronize());
  }
  s.tokens = static_cast<int64_t>(B) * T;
  return s;
}

}  // namespace atl::algorithms::cuda
