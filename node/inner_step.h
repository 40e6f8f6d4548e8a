// One optimizer step of a site on one batch, whatever trains it: the CPU model (dense or MoE,
// every precision recipe: algorithms/optim/inner_trainer.h), the CUDA model
// (node/gpu_trainer.h), Hydra's masked subnetwork (algorithms/hydra/trainer.h) or a
// distillation student whose targets come from remote teachers (node/distill_inner.h); Hydra
// and the student on a GPU too (algorithms/cuda/cuda_hydra.h, cuda_student.h). The site
// worker (node/site_worker.h) runs every algorithm's rounds through this interface; which step a
// site takes is decided once, from the coordinator's JoinResponse and the node's options, by
// make_inner_step.
//
// Every implementation owns its optimizer state (AdamW moments), which persists across rounds;
// θ_local is the caller's. save_state / restore_state copy that state out and back, so that a
// round interrupted by a crash is redone from exactly the state it started from
// (node/round_snapshot.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "algorithms/data/dataset.h"
#include "algorithms/model/frozen_base.h"
#include "algorithms/model/param_set.h"
#include "algorithms/model/subnet.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/status.h"
#include "node/distill_inner.h"
#include "node/gpu_trainer.h"
#include "node/site_config.h"
#include "transport/tls/credentials.h"

namespace atl::node {

// The elements a subnetwork step trains (Hydra).
struct TrainedSet {
  std::span<const uint32_t> indices;  // into θ, ascending; valid until the next set_subnet
  // Moves whenever the indices change (the optimizer restarts then): state kept per trained
  // element elsewhere, such as the error feedback of the update, is stale when it moved.
  uint64_t generation = 0;
};

// A copy of what an InnerStep's steps change (optimizer moments and step count; Hydra's
// subnetwork too). Opaque: only the step that made it reads it.
class InnerState {
 public:
  virtual ~InnerState() = default;
};

class InnerStep {
 public:
  virtual ~InnerStep() = default;

  // One line for the log once the step is set up ("training on cuda:0"), or "".
  virtual std::string describe() const { return ""; }

  // θ residency around a run of consecutive steps on the same θ_local: begin() before the
  // first, end() after the last. A GPU step copies θ to the device once and back once; nothing
  // may read or write `local` in between. The CPU steps do nothing here.
  virtual Status begin(algorithms::ParamSet& local) { return Status::Ok(); }
  virtual Status end(algorithms::ParamSet& local) { return Status::Ok(); }

  // One step on `batch` (B rows of T + 1 tokens) at `global_step` (0-based: the learning-rate
  // schedule). `next_batch` is the batch of global_step + 1 when wants_next_batch() and the
  // experiment has that step, null otherwise.
  virtual StatusOr<algorithms::StepStats> step(algorithms::ParamSet& local,
                                               const algorithms::data::GlobalBatch& batch,
                                               const algorithms::data::GlobalBatch* next_batch,
                                               int64_t global_step) = 0;
  // A distillation student fetches the targets of the next batch while this one trains.
  virtual bool wants_next_batch() const { return false; }

  // Hydra: train only subnetwork `s` from now on (the optimizer state is kept when the trained
  // elements stay the same). Steps that train the whole model refuse with FailedPrecondition.
  virtual StatusOr<TrainedSet> set_subnet(const algorithms::Subnet& s);

  // A copy of the state the following steps change (one extra copy of the optimizer state:
  // 2·numel floats for AdamW; a CUDA step's through the host). FAILED_PRECONDITION where it is
  // not copied (Hydra or a student on a GPU): an interrupted round is then redone from the
  // advanced state (docs/coordinator.md, "Restart").
  virtual StatusOr<std::unique_ptr<InnerState>> save_state() const;
  // Puts back a state this step's save_state() made; between begin() and end() never.
  virtual Status restore_state(const InnerState& state);
  // The bytes of a state this step's save_state() made, and that state from its bytes: what a
  // node writes to its --state-dir so that a restarted process redoes a round bit for bit
  // (node/round_state_file.h). FAILED_PRECONDITION where the state is not written (Hydra).
  virtual StatusOr<std::string> encode_state(const InnerState& state) const;
  virtual StatusOr<std::unique_ptr<InnerState>> decode_state(std::string_view bytes) const;

  // Appended to the round's log line, e.g. ", teacher 512.0 bytes/token"; "" for nothing.
  virtual std::string round_note() const { return ""; }
  // Reported to the coordinator with the round's metrics (which keeps them in its store and
  // shows them on the dashboard), e.g. {"teacher_bytes_per_token", 512}; none by default.
  virtual std::vector<std::pair<std::string, double>> round_metrics() const { return {}; }
};

struct InnerStepOptions {
  DeviceChoice devices{{}, "cpu"};   // resolve_devices(--device, --devices)
  DistillNodeOptions distill;        // teachers empty: the plain cross-entropy step
  transport::ClientTls teacher_tls;  // how to reach the teachers (with distill.teachers only)
  const std::atomic<bool>* stop = nullptr;  // ends a wait for an absent teacher
  // The frozen base of a LoRA experiment (site.lora_enabled()): the step trains the adapters
  // over it (Llama::attach_lora), θ_local is the adapter set. Null otherwise.
  std::shared_ptr<const algorithms::FrozenBase> lora_base;
};

// Whether `site` and `options` name a step that can be built, without building it: one line
// saying what is impossible and what to change (Hydra with a teacher; an FFN block count that
// does not divide the model's; Hydra or a teacher on several GPUs, whose CUDA trainers use one;
// LoRA adapters with Hydra, a teacher or a GPU, or without their base).
Status check_inner_step(const SiteConfig& site, const InnerStepOptions& options);

// check_inner_step, then the step: Hydra's subnetwork (site.hydra()), the distillation student
// (options.distill.teachers; connects to the teachers, waiting up to distill.wait_s for them) or
// the plain step, each on the CPU or on options.devices (node/gpu_trainer.h).
StatusOr<std::unique_ptr<InnerStep>> make_inner_step(const SiteConfig& site,
                                                     const InnerStepOptions& options);

}  // namespace atl::node
