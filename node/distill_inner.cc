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
// anything else fails at once. `waiting` names what is waited for in the log ("the teacher at
// step 5"); `back` is logged when the teacher answers after a wait.
// `pause(seconds)` waits between attempts (it may end early when the teachers are reachable
// again).
template <typename F, typename Pause>
auto with_wait(const DistillNodeOptions& o, const std::atomic<bool>* stop, const std::string& what,
               const std::string& waiting, const std::string& back, F&& attempt, Pause&& pause)
    -> decltype(attempt()) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(o.wait_s);
  double backoff = 0.05;
  bool said = false;
  while (true) {
    auto r = attempt();
    if (r.ok()) {
      if (said && o.log) o.log(back);
      return r;
    }
    // A refusal that no wait changes (another vocabulary, a bad certificate) is said as it is.
    if (!retryable(r.status()))
      return Status(r.status().code(),
                    r.status().message() + " (stopped; no step was trained without its targets)");
    if (Clock::now() >= deadline || (stop && stop->load())) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " within --teacher-wait %.1f s: ", o.wait_s);
      return Status(r.status().code(), what + buf + r.status().message() +
                                           " (stopped; no step was trained without its targets)");
    }
    if (!said && o.log) o.log("waiting for " + waiting + ": " + r.status().message());
    said = true;
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    pause(std::min(backoff, std::max(left, 0.0)));
    backoff = std::min(backoff * 2, 1.0);
  }
}

algorithms::distill::LossConfig loss_config(const DistillNodeOptions& o) {
  algorithms::distill::LossConfig lc;
  lc.alpha = o.alpha;
  lc.tau = o.tau;
  lc.rows = o.loss_rows;
  lc.shards = o.loss_shards;
  return lc;
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
  if (o.window_rows < 1) return InvalidArgument("--window-rows must be >= 1");
  return Status::Ok();
}

StatusOr<std::unique_ptr<DistillInnerStep>> DistillInnerStep::create(
    const DistillNodeOptions& o, const transport::ClientTls& tls,
    const algorithms::ModelConfig& model, const algorithms::TrainerConfig& train,
    const std::atomic<bool>* stop, const DeviceChoice& devices) {
  ATOLL_RETURN_IF_ERROR(validate(o));
  const algorithms::distill::LossConfig lc = loss_config(o);
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
  co.window_rows = o.window_rows;
  co.send_tokens = o.send_tokens;
  auto c =
      with_wait(o, stop, "no answer from the teachers", "the teachers", "the teachers answered",
                [&] { return TeacherClient::connect(co, model.vocab); },
                [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); });
  if (!c.ok()) return c.status();
  d->client_ = std::move(c).value();
  if (!d->gpu_trainer_)
    d->trainer_ = std::make_unique<algorithms::distill::StudentTrainer>(model, train, lc);
  return d;
}

StatusOr<std::unique_ptr<DistillInnerStep>> DistillInnerStep::create_colocated(
    const algorithms::distill::LossConfig& loss, const algorithms::ModelConfig& teacher_model,
    const algorithms::ParamSet& teacher, const algorithms::ModelConfig& model,
    const algorithms::TrainerConfig& train) {
  if (!(loss.alpha > 0))
    return InvalidArgument("a co-located teacher needs alpha > 0 (alpha 0 trains without one)");
  ATOLL_RETURN_IF_ERROR(algorithms::distill::validate(model, teacher_model, train, loss));
  if (teacher.numel() != algorithms::make_layout(teacher_model).numel())
    return InvalidArgument("the teacher's parameters do not fit its model");
  std::unique_ptr<DistillInnerStep> d(new DistillInnerStep());
  d->o_.alpha = loss.alpha;
  d->o_.tau = loss.tau;
  d->B_ = train.batch;
  d->T_ = train.seq;
  d->colocated_ =
      std::make_unique<algorithms::distill::DistillTrainer>(model, teacher_model, train, loss);
  d->teacher_params_ = &teacher;
  return d;
}

StatusOr<std::unique_ptr<DistillInnerStep>> DistillInnerStep::create_without_teacher(
    const algorithms::distill::LossConfig& loss, const algorithms::ModelConfig& model,
    const algorithms::TrainerConfig& train) {
  if (loss.alpha != 0)
    return InvalidArgument("a student without a teacher needs alpha 0 (it has no KL term)");
  ATOLL_RETURN_IF_ERROR(algorithms::distill::validate(model, model, train, loss));
  std::unique_ptr<DistillInnerStep> d(new DistillInnerStep());
  d->o_.alpha = 0;
  d->o_.tau = loss.tau;
  d->B_ = train.batch;
  d->T_ = train.seq;
  d->trainer_ = std::make_unique<algorithms::distill::StudentTrainer>(model, train, loss);
  return d;
}

std::string DistillInnerStep::describe() const {
  if (client_) return client_->describe();
  return colocated_ ? "co-located" : "no teacher";
}

algorithms::Llama* DistillInnerStep::student_model() {
  if (colocated_) return &colocated_->student_model();
  return trainer_ ? &trainer_->model() : nullptr;
}

StatusOr<algorithms::AdamW*> DistillInnerStep::optimizer() {
  if (colocated_) return &colocated_->optimizer();
  if (trainer_) return &trainer_->optimizer();
  return FailedPrecondition("the student trains on a GPU, whose optimizer state cannot be copied");
}

DistillInnerStep::~DistillInnerStep() {
  if (pending_.valid()) pending_.wait();
}

StatusOr<TeacherTargets> DistillInnerStep::fetch_with_wait(
    int64_t step, const std::vector<int32_t>& tokens) const {
  const std::string at = "step " + std::to_string(step);
  return with_wait(o_, stop_, "no teacher targets for " + at, "the teacher at " + at,
                   "teacher is back at " + at,
                   [&] { return client_->fetch(o_.request_seed, step, B_, T_, tokens); },
                   [&](double s) {
                     // Ends as soon as every teacher is connected again (the channels are
                     // driven while it waits), else after s.
                     (void)client_->wait_for_links(std::chrono::milliseconds(
                         static_cast<int64_t>(s * 1000)));
                   });
}

StatusOr<algorithms::distill::DistillStepStats> DistillInnerStep::step(
    algorithms::ParamSet& params, const std::vector<int32_t>& tokens, int64_t step,
    const std::vector<int32_t>* next_tokens) {
  if (colocated_) return colocated_->step(params, *teacher_params_, tokens.data(), step);
  if (!client_) return trainer_->step(params, tokens.data(), step, nullptr, nullptr);
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

StatusOr<StudentRunResult> train_student(DistillInnerStep& step, algorithms::ParamSet& params,
                                         const algorithms::data::TokenDataset& data,
                                         const StudentRunOptions& o) {
  const int B = step.batch(), T = step.seq();
  auto batch_of = [&](int64_t s) {
    return algorithms::data::sample_global_batch(data, o.seed, s, B, T).tokens;
  };
  StudentRunResult res;
  std::vector<int32_t> next = o.steps > 0 ? batch_of(0) : std::vector<int32_t>{};
  for (int64_t s = 0; s < o.steps && !(o.stop && o.stop->load()); ++s) {
    const auto t0 = Clock::now();
    const std::vector<int32_t> tokens = std::move(next);
    if (s + 1 < o.steps) next = batch_of(s + 1);
    ATOLL_ASSIGN_OR_RETURN(const algorithms::distill::DistillStepStats st,
                           step.step(params, tokens, s, s + 1 < o.steps ? &next : nullptr));
    if (!std::isfinite(st.loss))
      return Internal("loss became " + std::to_string(st.loss) + " at step " + std::to_string(s));
    StudentStepReport r;
    r.step = s;
    r.stats = st;
    r.bytes_per_token = step.bytes_per_token();
    r.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    res.step_ms_sum += r.ms;
    res.steps_done = s + 1;
    if (o.on_step) o.on_step(r);
  }
  return res;
}

}  // namespace atl::node
