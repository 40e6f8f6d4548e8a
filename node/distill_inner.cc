#include "node/distill_inner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include "node/teacher_service.h"

namespace atl::node {

namespace {

using Clock = std::chrono::steady_clock;

bool retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kDataLoss;
}

// Retries `attempt` while the teacher is unavailable, until wait_s has passed or a stop request;
// anything else fails at once.
template <typename F>
auto with_wait(double wait_s, const std::atomic<bool>* stop, const std::string& what, F&& attempt)
    -> decltype(attempt()) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(wait_s);
  double backoff = 0.05;
  while (true) {
    auto r = attempt();
    if (r.ok()) return r;
    if (!retryable(r.status()) || Clock::now() >= deadline || (stop && stop->load())) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " within --teacher-wait %.1f s: ", wait_s);
      return Status(r.status().code(), what + buf + r.status().message() +
                                           " (stopped; no step was trained without its targets)");
    }
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    std::this_thread::sleep_for(
        std::chrono::duration<double>(std::min(backoff, std::max(left, 0.0))));
    backoff = std::min(backoff * 2, 1.0);
  }
}

}  // namespace

Status validate(const DistillNodeOptions& o) {
  if (o.teachers.empty()) return InvalidArgument("no teacher address (--teacher HOST:PORT[,...])");
  if (!(o.alpha > 0 && o.alpha <= 1))
    return InvalidArgument("--alpha " + std::to_string(o.alpha) +
                           " must be in (0, 1] with a teacher");
  if (!(std::isfinite(o.tau) && o.tau > 0)) return InvalidArgument("--tau must be finite and > 0");
  if (auto k = parse_representation(o.codec); !k.ok())
    return InvalidArgument("--codec: " + k.status().message());
  if (o.loss_rows < 1 || o.loss_shards < 1)
    return InvalidArgument("--loss-rows and --loss-shards must be >= 1");
  if (!(o.wait_s >= 0) || !(o.rpc_timeout_s > 0))
    return InvalidArgument("--teacher-wait must be >= 0 and --teacher-timeout > 0");
  return Status::Ok();
}

StatusOr<std::unique_ptr<DistillInnerStep>> DistillInnerStep::create(
    const DistillNodeOptions& o, const transport::ClientTls& tls,
    const algorithms::ModelConfig& model, const algorithms::TrainerConfig& train,
    const std::atomic<bool>* stop, const DeviceChoice& devices) {
  ATOLL_RETURN_IF_ERROR(validate(o));
  algorithms::distill::LossConfig lc;
  lc.alpha = o.alpha;
  lc.tau = o.tau;
  lc.rows = o.loss_rows;
  lc.shards = o.loss_shards;
  ATOLL_RETURN_IF_ERROR(algorithms::distill::validate(model, model, train, lc));
  std::unique_ptr<DistillInnerStep> d(new DistillInnerStep());
  // The device first: a GPU that cannot be opened is one line before any teacher is waited for.
  if (devices.gpu()) {
    ATOLL_ASSIGN_OR_RETURN(d->gpu_trainer_, GpuStudentTrainer::create(model, train, lc, devices));
  }
  d->o_ = o;
  d->B_ = train.batch;
  d->T_ = train.seq;
  d->stop_ = stop;
  TeacherClientOptions co;
  co.addresses = o.teachers;
  co.tls = tls;
  co.rpc_timeout_s = o.rpc_timeout_s;
  co.representation = o.codec;
  co.tau = o.tau;
  co.send_tokens = true;  // the site's batches come from the site's own data
  auto c = with_wait(o.wait_s, stop, "no answer from the teachers",
                     [&] { return TeacherClient::connect(co, model.vocab); });
  if (!c.ok()) return c.status();
  d->client_ = std::move(c).value();
  if (!d->gpu_trainer_)
    d->trainer_ = std::make_unique<algorithms::distill::StudentTrainer>(model, train, lc);
  return d;
}

DistillInnerStep::~DistillInnerStep() {
  if (pending_.valid()) pending_.wait();
}

StatusOr<TeacherTargets> DistillInnerStep::fetch_with_wait(
    int64_t step, const std::vector<int32_t>& tokens) const {
  return with_wait(o_.wait_s, stop_, "no teacher targets for step " + std::to_string(step),
                   [&] { return client_->fetch(0, step, B_, T_, tokens); });
}

StatusOr<algorithms::distill::DistillStepStats> DistillInnerStep::step(
    algorithms::ParamSet& params, const std::vector<int32_t>& tokens, int64_t step,
    const std::vector<int32_t>* next_tokens) {
  // The prefetched targets are used only when they are for exactly this batch (a new round may
  // start at another step, or a restarted round resample).
  std::optional<StatusOr<TeacherTargets>> got;
  if (pending_.valid()) {
    auto r = pending_.get();
    if (pending_step_ == step && pending_tokens_ == tokens) got.emplace(std::move(r));
  }
  if (!got) got.emplace(fetch_with_wait(step, tokens));
  if (!got->ok()) return got->status();
  TeacherTargets targets = std::move(**got);
  if (next_tokens != nullptr) {
    pending_step_ = step + 1;
    pending_tokens_ = *next_tokens;
    pending_ = std::async(std::launch::async,
                          [this, s = step + 1] { return fetch_with_wait(s, pending_tokens_); });
  }
  std::optional<ShardTeacherLogits> full;
  std::optional<algorithms::distill::TopKTargets<float>> topk;
  if (targets.k == 0)
    full.emplace(targets);
  else
    topk = targets.topk();
  algorithms::distill::TeacherLogits<float>* full_targets = full ? &*full : nullptr;
  const algorithms::distill::TopKTargets<float>* topk_targets = topk ? &*topk : nullptr;
  auto r = gpu_trainer_
               ? gpu_trainer_->step(params, tokens.data(), step, full_targets, topk_targets)
               : trainer_->step(params, tokens.data(), step, full_targets, topk_targets);
  if (r.ok()) {
    tokens_ += static_cast<uint64_t>(r->tokens);
    bytes_ += targets.wire_bytes;
  }
  return r;
}

}  // namespace atl::node
