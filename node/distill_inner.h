// The inner step of a distillation student (issue 8, "Students at several sites can train with
// DiLoCo while distilling from the same teacher"): each inner step takes the fused distillation
// step (algorithms/distill/student.h) instead of the plain cross-entropy step, with the loss
//   α·τ²·KL(teacher ‖ student) + (1 − α)·CE.
// The teacher's targets come from one of three sources:
//   remote      teachers serving vocabulary shards over mTLS gRPC (node/teacher_client.h): a
//               DiLoCo node with --teacher, and `atoll node --role student --teacher`;
//   co-located  a teacher model in this process (DistillTrainer), the reference the remote
//               modes are compared with (`atoll node --role student --teacher-checkpoint`);
//   none        α = 0: the student's fused loss is plain cross-entropy.
// Outer rounds, codecs and θ exchange are unchanged: the coordinator sees a DiLoCo node.
// A site's data is its own (its genres, its seed), so the teacher cannot resample its batches:
// the token ids travel with the request (4·B·(T + 1) bytes per step, small next to the
// targets) unless the options say the teacher holds the same data. The targets of step s + 1 are
// fetched on a background thread while step s trains. An absent teacher is waited for up to
// `wait_s`, then the student stops with one line; no step ever trains without its targets.
// train_student runs a student alone (no coordinator): `atoll node --role student`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/data/dataset.h"
#include "algorithms/distill/student.h"
#include "algorithms/distill/trainer.h"
#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "node/gpu_trainer.h"
#include "node/teacher_client.h"

namespace atl::node {

struct DistillNodeOptions {
  std::vector<std::string>
      teachers;  // HOST:PORT, one per vocabulary shard; empty = no distillation
  std::string server_name = "teacher";  // name in the teachers' certificates
  std::string codec = "bf16";           // bf16 or topk:K
  double alpha = 0.5;
  double tau = 1.0;
  int loss_rows = 256;  // R of the fused loss
  int loss_shards = 4;  // S of the fused loss (student side)
  double rpc_timeout_s = 30;
  double wait_s = 60;  // how long to wait for an absent teacher
  // Requests. A site's batches are its own: send_tokens. A student whose data is the teacher's
  // (`atoll node --role student` without --send-tokens) names its batch by (request_seed, step).
  bool send_tokens = true;
  uint64_t request_seed = 0;
  int window_rows = 1;  // batch rows per streamed window
  // "waiting for the teacher at step N: why" and "teacher is back at step N" while an absent
  // teacher is waited for (called from the prefetch thread too); may be empty.
  std::function<void(const std::string&)> log;
};

// One line naming the first bad field (alpha, tau, codec, ...), or OK.
Status validate(const DistillNodeOptions& o);

class DistillInnerStep {
 public:
  // Connects to the teachers (waiting up to wait_s for them) and checks their vocabulary. The
  // student trains on `devices`: the CPU (algorithms/distill/student.h) or one GPU
  // (GpuStudentTrainer, node/gpu_trainer.h).
  static StatusOr<std::unique_ptr<DistillInnerStep>> create(
      const DistillNodeOptions& o, const transport::ClientTls& tls,
      const algorithms::ModelConfig& model, const algorithms::TrainerConfig& train,
      const std::atomic<bool>* stop, const DeviceChoice& devices = DeviceChoice{{}, "cpu"});
  // The teacher in this process: `teacher` (of `teacher_model`) is only read and must outlive
  // the step. `loss.alpha` > 0.
  static StatusOr<std::unique_ptr<DistillInnerStep>> create_colocated(
      const algorithms::distill::LossConfig& loss, const algorithms::ModelConfig& teacher_model,
      const algorithms::ParamSet& teacher, const algorithms::ModelConfig& model,
      const algorithms::TrainerConfig& train);
  // No teacher (loss.alpha = 0): the fused loss is the student's cross-entropy.
  static StatusOr<std::unique_ptr<DistillInnerStep>> create_without_teacher(
      const algorithms::distill::LossConfig& loss, const algorithms::ModelConfig& model,
      const algorithms::TrainerConfig& train);
  ~DistillInnerStep();

  // One inner step on `tokens` (B, T + 1) at global step `step`; `next_tokens` (may be null) is
  // the batch of step + 1, fetched in the background. Errors: the teacher stayed away past the
  // deadline, or sent targets that do not fit the batch.
  StatusOr<algorithms::distill::DistillStepStats> step(algorithms::ParamSet& params,
                                                       const std::vector<int32_t>& tokens,
                                                       int64_t step,
                                                       const std::vector<int32_t>* next_tokens);

  uint64_t wire_bytes() const { return bytes_; }  // teacher payload received so far
  // Teacher payload bytes per trained target token so far (0 before the first step).
  double bytes_per_token() const { return tokens_ > 0 ? double(bytes_) / double(tokens_) : 0.0; }
  // The remote teachers ("a:1 [0, 128), b:2 [128, 256)"), "co-located" or "no teacher".
  std::string describe() const;
  int batch() const { return B_; }
  int seq() const { return T_; }
  // The student's CPU model (its buffers), for evaluating θ; null when it trains on a GPU.
  algorithms::Llama* student_model();
  // The student's AdamW state, to save and put back around a DiLoCo round; FAILED_PRECONDITION
  // when it trains on a GPU (the state is on the device).
  StatusOr<algorithms::AdamW*> optimizer();

 private:
  DistillInnerStep() = default;
  StatusOr<TeacherTargets> fetch_with_wait(int64_t step, const std::vector<int32_t>& tokens) const;

  DistillNodeOptions o_;
  int B_ = 0, T_ = 0;
  const std::atomic<bool>* stop_ = nullptr;
  std::unique_ptr<TeacherClient> client_;
  std::unique_ptr<algorithms::distill::StudentTrainer> trainer_;    // on the CPU, or
  std::unique_ptr<GpuStudentTrainer> gpu_trainer_;                  // on a GPU, or
  std::unique_ptr<algorithms::distill::DistillTrainer> colocated_;  // with the teacher here
  const algorithms::ParamSet* teacher_params_ = nullptr;            // co-located only
  // The prefetch in flight: targets of (pending_step_, pending_tokens_).
  int64_t pending_step_ = -1;
  std::vector<int32_t> pending_tokens_;
  std::future<StatusOr<TeacherTargets>> pending_;
  uint64_t bytes_ = 0;   // payload of the targets trained on
  uint64_t tokens_ = 0;  // target tokens trained on
};

// One step of a student trained alone, as train_student reports it.
struct StudentStepReport {
  int64_t step = 0;  // 0-based
  algorithms::distill::DistillStepStats stats;
  double bytes_per_token = 0;  // teacher payload per trained target token so far
  double ms = 0;               // the step's wall time, waiting for its targets included
};

struct StudentRunOptions {
  uint64_t seed = 0;                        // batches: sample_global_batch(data, seed, step, B, T)
  int64_t steps = 0;                        // global steps 0 … steps − 1
  const std::atomic<bool>* stop = nullptr;  // checked before every step: ends the run, OK
  std::function<void(const StudentStepReport&)> on_step;  // after every step; may be empty
};

struct StudentRunResult {
  int64_t steps_done = 0;
  double step_ms_sum = 0;
};

// Trains `params` in place with `step` on `data` (the student's training tokens), one step per
// batch, the next batch's targets prefetched while a step trains. Errors: the teacher stayed
// away past its wait, targets that do not fit, or a loss that is not finite (naming the step).
StatusOr<StudentRunResult> train_student(DistillInnerStep& step, algorithms::ParamSet& params,
                                         const algorithms::data::TokenDataset& data,
                                         const StudentRunOptions& options);

}  // namespace atl::node
