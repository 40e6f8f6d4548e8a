// The inner step of a DiLoCo node that distills from a remote teacher (issue 8, "Students at
// several sites can train with DiLoCo while distilling from the same teacher"): each inner step
// fetches the teacher's targets for the node's own batch and takes the fused distillation step
// (algorithms/distill/student.h) instead of the plain cross-entropy step. Outer rounds, codecs and
// θ exchange are unchanged: the coordinator sees a DiLoCo node whose inner loss is
//   α·τ²·KL(teacher ‖ student) + (1 − α)·CE.
// A site's data is its own (its genres, its seed), so the teacher cannot resample its batches:
// the token ids always travel with the request (4·B·(T + 1) bytes per step, small next to the
// targets). The targets of step s + 1 are fetched on a background thread while step s trains.
// An absent teacher is waited for up to `wait_s`, then the node stops with one line; no step
// ever trains without its targets.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/distill/student.h"
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
  std::string describe() const { return client_->describe(); }

 private:
  DistillInnerStep() = default;
  StatusOr<TeacherTargets> fetch_with_wait(int64_t step, const std::vector<int32_t>& tokens) const;

  DistillNodeOptions o_;
  int B_ = 0, T_ = 0;
  const std::atomic<bool>* stop_ = nullptr;
  std::unique_ptr<TeacherClient> client_;
  std::unique_ptr<algorithms::distill::StudentTrainer> trainer_;  // on the CPU, or
  std::unique_ptr<GpuStudentTrainer> gpu_trainer_;                // on a GPU
  // The prefetch in flight: targets of (pending_step_, pending_tokens_).
  int64_t pending_step_ = -1;
  std::vector<int32_t> pending_tokens_;
  std::future<StatusOr<TeacherTargets>> pending_;
  uint64_t bytes_ = 0;   // payload of the targets trained on
  uint64_t tokens_ = 0;  // target tokens trained on
};

}  // namespace atl::node
