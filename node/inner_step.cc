#include "node/inner_step.h"

#include <cstdio>
#include <optional>
#include <utility>

#include "algorithms/hydra/trainer.h"
#include "algorithms/model/subnet.h"
#include "node/saved_value.h"
#include "node/state_bytes.h"

namespace atl::node {

namespace {

namespace al = atl::algorithms;

template <class T>
std::unique_ptr<InnerState> saved(T value) {
  return save_value<InnerState>(std::move(value));
}

template <class T>
StatusOr<const T*> saved_value(const InnerState& state) {
  return node::saved_value<T>(state, "kind of step");
}

// AdamW's state as bytes: step count, m (numel), v (numel).
std::string encode_moments(int64_t steps, const al::ParamSet& m, const al::ParamSet& v) {
  StateWriter w;
  w.u64(static_cast<uint64_t>(steps));
  w.floats(m.vec());
  w.floats(v.vec());
  return w.take();
}

// Reads what encode_moments wrote into m and v, which keep their layout (and size).
Status decode_moments(std::string_view bytes, int64_t& steps, al::ParamSet& m, al::ParamSet& v) {
  StateReader r(bytes);
  ATOLL_ASSIGN_OR_RETURN(const uint64_t n, r.u64());
  ATOLL_ASSIGN_OR_RETURN(m.vec(), r.floats(m.numel()));
  ATOLL_ASSIGN_OR_RETURN(v.vec(), r.floats(v.numel()));
  if (!r.done()) return InvalidArgument("saved round state: bytes after the AdamW state");
  steps = static_cast<int64_t>(n);
  return Status::Ok();
}

StatusOr<std::string> encode_adamw(const InnerState& state) {
  ATOLL_ASSIGN_OR_RETURN(const al::AdamW* opt, saved_value<al::AdamW>(state));
  return encode_moments(opt->step_count(), opt->m(), opt->v());
}

// `live` with the moments and step count of `bytes` (its config and layout are kept).
StatusOr<std::unique_ptr<InnerState>> decode_adamw(const al::AdamW& live, std::string_view bytes) {
  al::AdamW opt = live;
  int64_t steps = 0;
  ATOLL_RETURN_IF_ERROR(decode_moments(bytes, steps, opt.m(), opt.v()));
  opt.set_step_count(steps);
  return saved(std::move(opt));
}

// The CPU model: dense or MoE, every precision recipe; with a LoRA base, the adapters over it
// (θ_local is then the adapter set, and the optimizer state has its layout).
class CpuInnerStep final : public InnerStep {
 public:
  CpuInnerStep(const al::ModelConfig& model, const al::TrainerConfig& train)
      : trainer_(model, train) {}
  CpuInnerStep(const al::ModelConfig& model, const al::TrainerConfig& train,
               const al::LoraConfig& lora, std::shared_ptr<const al::FrozenBase> base)
      : trainer_(model, train) {
    trainer_.attach_lora(lora, std::move(base));
  }
  StatusOr<al::StepStats> step(al::ParamSet& local, const al::data::GlobalBatch& batch,
                               const al::data::GlobalBatch* /*next_batch*/,
                               int64_t global_step) override {
    return trainer_.step(local, batch.tokens.data(), global_step);
  }
  StatusOr<std::unique_ptr<InnerState>> save_state() const override {
    return saved(trainer_.optimizer());
  }
  Status restore_state(const InnerState& state) override {
    ATOLL_ASSIGN_OR_RETURN(const al::AdamW* opt, saved_value<al::AdamW>(state));
    trainer_.optimizer() = *opt;
    return Status::Ok();
  }
  StatusOr<std::string> encode_state(const InnerState& state) const override {
    return encode_adamw(state);
  }
  StatusOr<std::unique_ptr<InnerState>> decode_state(std::string_view bytes) const override {
    return decode_adamw(trainer_.optimizer(), bytes);
  }

 private:
  al::InnerTrainer trainer_;
};

// Hydra: the subnetwork the coordinator assigned, with masked AdamW. Its state on disk (a
// node's --state-dir): whether a subnetwork is set, its G and text form, the trained-set
// generation, then the masked AdamW's step count and moments (the trained elements follow from
// the subnetwork).
class HydraInnerStep final : public InnerStep {
 public:
  HydraInnerStep(const al::ModelConfig& model, const al::TrainerConfig& train)
      : model_(model), trainer_(model, train) {}
  StatusOr<al::StepStats> step(al::ParamSet& local, const al::data::GlobalBatch& batch,
                               const al::data::GlobalBatch* /*next_batch*/,
                               int64_t global_step) override {
    return trainer_.step(local, batch.tokens.data(), global_step);
  }
  StatusOr<TrainedSet> set_subnet(const al::Subnet& s) override {
    ATOLL_RETURN_IF_ERROR(trainer_.set_subnet(s));
    return TrainedSet{trainer_.indices(), trainer_.trained_set_generation()};
  }
  StatusOr<std::unique_ptr<InnerState>> save_state() const override {
    return saved(trainer_.save_state());
  }
  Status restore_state(const InnerState& state) override {
    ATOLL_ASSIGN_OR_RETURN(const al::hydra::HydraTrainer::State* s,
                           saved_value<al::hydra::HydraTrainer::State>(state));
    return trainer_.restore_state(*s);
  }
  StatusOr<std::string> encode_state(const InnerState& state) const override {
    ATOLL_ASSIGN_OR_RETURN(const al::hydra::HydraTrainer::State* s,
                           saved_value<al::hydra::HydraTrainer::State>(state));
    StateWriter w;
    w.u64(s->have_subnet ? 1 : 0);
    w.u64(static_cast<uint64_t>(s->have_subnet ? s->subnet.ffn_blocks : 0));
    w.bytes(s->have_subnet ? al::to_string(s->subnet) : std::string());
    w.u64(s->generation);
    w.u64(static_cast<uint64_t>(s->opt.step_count()));
    w.floats(s->opt.m());
    w.floats(s->opt.v());
    return w.take();
  }
  StatusOr<std::unique_ptr<InnerState>> decode_state(std::string_view bytes) const override {
    StateReader r(bytes);
    ATOLL_ASSIGN_OR_RETURN(const uint64_t have_subnet, r.u64());
    ATOLL_ASSIGN_OR_RETURN(const uint64_t ffn_blocks, r.u64());
    ATOLL_ASSIGN_OR_RETURN(const std::string_view text, r.bytes());
    ATOLL_ASSIGN_OR_RETURN(const uint64_t generation, r.u64());
    ATOLL_ASSIGN_OR_RETURN(const uint64_t steps, r.u64());
    std::optional<al::Subnet> subnet;
    if (have_subnet) {
      if (ffn_blocks < 1 || ffn_blocks > static_cast<uint64_t>(model_.ffn_hidden))
        return InvalidArgument("saved round state: a subnetwork of " + std::to_string(ffn_blocks) +
                               " FFN blocks");
      auto parsed = al::subnet_from_string(std::string(text), model_, static_cast<int>(ffn_blocks));
      if (!parsed.ok()) return InvalidArgument("saved round state: " + parsed.status().message());
      subnet = std::move(*parsed);
    }
    const uint64_t held = subnet ? al::trainable_indices(*subnet, model_).size() : 0;
    ATOLL_ASSIGN_OR_RETURN(std::vector<float> m, r.floats(held));
    ATOLL_ASSIGN_OR_RETURN(std::vector<float> v, r.floats(held));
    if (!r.done()) return InvalidArgument("saved round state: bytes after the Hydra state");
    ATOLL_ASSIGN_OR_RETURN(
        al::hydra::HydraTrainer::State s,
        trainer_.state_from(subnet ? &*subnet : nullptr, generation, static_cast<int64_t>(steps),
                            std::move(m), std::move(v)));
    return saved(std::move(s));
  }

 private:
  al::ModelConfig model_;
  al::hydra::HydraTrainer trainer_;
};

// The CUDA model: θ stays on the device(s) between begin() and end().
class CudaInnerStep final : public InnerStep {
 public:
  CudaInnerStep(std::unique_ptr<GpuTrainer> gpu, std::string device_name)
      : gpu_(std::move(gpu)), device_name_(std::move(device_name)) {}
  std::string describe() const override { return "training on " + device_name_; }
  Status begin(al::ParamSet& local) override { return gpu_->load(local); }
  Status end(al::ParamSet& local) override { return gpu_->store(local); }
  StatusOr<al::StepStats> step(al::ParamSet& /*local: on the device*/,
                               const al::data::GlobalBatch& batch,
                               const al::data::GlobalBatch* /*next_batch*/,
                               int64_t global_step) override {
    return gpu_->step_device(batch.tokens.data(), global_step);
  }
  // The device's AdamW state through the host (between rounds: never between begin and end).
  StatusOr<std::unique_ptr<InnerState>> save_state() const override {
    ATOLL_ASSIGN_OR_RETURN(GpuOptimizerState s, gpu_->save_optimizer());
    return saved(std::move(s));
  }
  Status restore_state(const InnerState& state) override {
    ATOLL_ASSIGN_OR_RETURN(const GpuOptimizerState* s, saved_value<GpuOptimizerState>(state));
    return gpu_->restore_optimizer(*s);
  }
  // The CPU step's AdamW bytes: step count, m, v.
  StatusOr<std::string> encode_state(const InnerState& state) const override {
    ATOLL_ASSIGN_OR_RETURN(const GpuOptimizerState* s, saved_value<GpuOptimizerState>(state));
    return encode_moments(s->adam_steps, s->m, s->v);
  }
  StatusOr<std::unique_ptr<InnerState>> decode_state(std::string_view bytes) const override {
    ATOLL_ASSIGN_OR_RETURN(GpuOptimizerState s, gpu_->save_optimizer());  // layout and sizes
    ATOLL_RETURN_IF_ERROR(decode_moments(bytes, s.adam_steps, s.m, s.v));
    return saved(std::move(s));
  }

 private:
  std::unique_ptr<GpuTrainer> gpu_;
  std::string device_name_;
};

// Hydra's subnetwork on one GPU (algorithms/cuda/cuda_hydra.h): θ goes to the device and the
// gradient comes back each step; the masked optimizer runs on the host.
class CudaHydraInnerStep final : public InnerStep {
 public:
  CudaHydraInnerStep(std::unique_ptr<GpuHydraTrainer> gpu, std::string device_name)
      : gpu_(std::move(gpu)), device_name_(std::move(device_name)) {}
  std::string describe() const override { return "training Hydra subnetworks on " + device_name_; }
  StatusOr<al::StepStats> step(al::ParamSet& local, const al::data::GlobalBatch& batch,
                               const al::data::GlobalBatch* /*next_batch*/,
                               int64_t global_step) override {
    return gpu_->step(local, batch.tokens.data(), global_step);
  }
  StatusOr<TrainedSet> set_subnet(const al::Subnet& s) override {
    ATOLL_RETURN_IF_ERROR(gpu_->set_subnet(s));
    return TrainedSet{gpu_->indices(), gpu_->trained_set_generation()};
  }

 private:
  std::unique_ptr<GpuHydraTrainer> gpu_;
  std::string device_name_;
};

// A distillation student: the inner loss is α·τ²·KL(teacher ‖ student) + (1 − α)·CE, with the
// teacher's targets for each batch fetched from remote teachers.
class DistillStudentStep final : public InnerStep {
 public:
  DistillStudentStep(std::unique_ptr<DistillInnerStep> distiller, DistillNodeOptions options,
                     DeviceChoice devices)
      : distiller_(std::move(distiller)),
        options_(std::move(options)),
        devices_(std::move(devices)) {}
  std::string describe() const override {
    return "distilling from teachers " + distiller_->describe() + " (" + options_.codec +
           ", alpha " + std::to_string(options_.alpha).substr(0, 5) + ")" +
           (devices_.gpu() ? " on " + devices_.name : "");
  }
  StatusOr<al::StepStats> step(al::ParamSet& local, const al::data::GlobalBatch& batch,
                               const al::data::GlobalBatch* next_batch,
                               int64_t global_step) override {
    ATOLL_ASSIGN_OR_RETURN(const al::distill::DistillStepStats ds,
                           distiller_->step(local, batch.tokens, global_step,
                                            next_batch != nullptr ? &next_batch->tokens : nullptr));
    al::StepStats st;
    st.loss = ds.loss;
    st.grad_norm = ds.grad_norm;
    st.lr = ds.lr;
    st.tokens = ds.tokens;
    return st;
  }
  bool wants_next_batch() const override { return true; }
  StatusOr<std::unique_ptr<InnerState>> save_state() const override {
    ATOLL_ASSIGN_OR_RETURN(const al::AdamW* opt, distiller_->optimizer());
    return saved(*opt);
  }
  Status restore_state(const InnerState& state) override {
    ATOLL_ASSIGN_OR_RETURN(const al::AdamW* saved_opt, saved_value<al::AdamW>(state));
    ATOLL_ASSIGN_OR_RETURN(al::AdamW * opt, distiller_->optimizer());
    *opt = *saved_opt;
    return Status::Ok();
  }
  StatusOr<std::string> encode_state(const InnerState& state) const override {
    return encode_adamw(state);
  }
  StatusOr<std::unique_ptr<InnerState>> decode_state(std::string_view bytes) const override {
    ATOLL_ASSIGN_OR_RETURN(al::AdamW * opt, distiller_->optimizer());
    return decode_adamw(*opt, bytes);
  }
  std::string round_note() const override {
    char t[96];
    std::snprintf(t, sizeof(t), ", teacher %.1f bytes/token", distiller_->bytes_per_token());
    return t;
  }
  // Cumulative over the site's steps, as the round's log line says it.
  std::vector<std::pair<std::string, double>> round_metrics() const override {
    return {{"teacher_bytes_per_token", distiller_->bytes_per_token()}};
  }

 private:
  std::unique_ptr<DistillInnerStep> distiller_;
  DistillNodeOptions options_;
  DeviceChoice devices_;
};

}  // namespace

StatusOr<TrainedSet> InnerStep::set_subnet(const algorithms::Subnet& /*s*/) {
  return FailedPrecondition("this inner step trains the whole model, not a subnetwork");
}

StatusOr<std::unique_ptr<InnerState>> InnerStep::save_state() const {
  return FailedPrecondition(
      "this inner step keeps its optimizer state on a GPU and cannot copy it");
}

Status InnerStep::restore_state(const InnerState& /*state*/) {
  return FailedPrecondition(
      "this inner step keeps its optimizer state on a GPU and cannot restore it");
}

StatusOr<std::string> InnerStep::encode_state(const InnerState& /*state*/) const {
  return FailedPrecondition("this inner step's state is not written to disk");
}

StatusOr<std::unique_ptr<InnerState>> InnerStep::decode_state(std::string_view /*bytes*/) const {
  return FailedPrecondition("this inner step's state is not read from disk");
}

Status check_inner_step(const SiteConfig& site, const InnerStepOptions& options) {
  const bool distill = !options.distill.teachers.empty();
  if (site.hydra()) {
    const int ffn_blocks = static_cast<int>(site.spec.ffn_blocks());
    if (ffn_blocks <= 0 || site.model.ffn_hidden % ffn_blocks != 0)
      return InvalidArgument("the coordinator's hydra ffn_blocks " + std::to_string(ffn_blocks) +
                             " does not divide ffn_hidden " +
                             std::to_string(site.model.ffn_hidden));
    if (distill)
      return InvalidArgument(
          "--teacher cannot be used in a Hydra experiment (subnetwork training has no "
          "distillation loss); drop --teacher or use algorithm = diloco");
  }
  if (site.lora_enabled()) {
    // The adapters' arithmetic (algorithms/model/lora.h) has a CPU implementation only, and
    // neither Hydra's subnetworks nor the student's loss know adapters.
    if (site.hydra() || distill || options.devices.gpu())
      return FailedPrecondition(std::string("this experiment trains LoRA adapters, which ") +
                                (site.hydra() ? "Hydra subnetworks do not support"
                                 : distill
                                     ? "distillation (--teacher) does not support: drop --teacher"
                                     : "train on the CPU only: drop --device/--devices"));
    if (!options.lora_base)
      return FailedPrecondition("this experiment trains LoRA adapters: pass --base CKPT");
    const auto want = al::make_layout(site.model);
    if (!(options.lora_base->layout() == want))
      return FailedPrecondition("the LoRA base does not have the experiment's model layout");
  }
  // Muon (algorithms/optim/adamw.h) is in the CPU AdamW only; the coordinator refuses it with
  // Hydra and LoRA, the CUDA trainers have no Newton-Schulz step.
  if (site.train.optimizer == al::InnerOptimizer::kMuon && options.devices.gpu())
    return FailedPrecondition("--device " + options.devices.name +
                              ": the experiment's train.optimizer = \"muon\" runs on the CPU "
                              "only; drop --device/--devices or use train.optimizer = \"adamw\"");
  // The CUDA trainers of Hydra and of the distillation student run on one device; several as
  // one worker (NCCL) is the plain inner step's.
  if (options.devices.cuda.size() > 1 && (site.hydra() || distill))
    return FailedPrecondition("--devices " + options.devices.name + ": " +
                              (site.hydra() ? "Hydra subnetworks" : "distillation (--teacher)") +
                              " train on one GPU: use --device cuda:N");
  return Status::Ok();
}

StatusOr<std::unique_ptr<InnerStep>> make_inner_step(const SiteConfig& site,
                                                     const InnerStepOptions& options) {
  ATOLL_RETURN_IF_ERROR(check_inner_step(site, options));
  if (site.lora_enabled())
    return std::unique_ptr<InnerStep>(
        std::make_unique<CpuInnerStep>(site.model, site.train, site.lora, options.lora_base));
  const bool gpu = options.devices.gpu();
  if (site.hydra() && gpu) {
    ATOLL_ASSIGN_OR_RETURN(auto trainer,
                           GpuHydraTrainer::create(site.model, site.train, options.devices));
    return std::unique_ptr<InnerStep>(
        std::make_unique<CudaHydraInnerStep>(std::move(trainer), options.devices.name));
  }
  if (site.hydra())
    return std::unique_ptr<InnerStep>(std::make_unique<HydraInnerStep>(site.model, site.train));
  if (!options.distill.teachers.empty()) {
    if (!options.teacher_tls.credentials)
      return InvalidArgument(
          "teachers given without credentials to reach them: set teacher_tls "
          "(transport::client_credentials, or insecure_client_credentials for plaintext)");
    ATOLL_ASSIGN_OR_RETURN(
        auto distiller, DistillInnerStep::create(options.distill, options.teacher_tls, site.model,
                                                 site.train, options.stop, options.devices));
    return std::unique_ptr<InnerStep>(std::make_unique<DistillStudentStep>(
        std::move(distiller), options.distill, options.devices));
  }
  if (gpu) {
    ATOLL_ASSIGN_OR_RETURN(auto trainer,
                           GpuTrainer::create(site.model, site.train, options.devices));
    return std::unique_ptr<InnerStep>(
        std::make_unique<CudaInnerStep>(std::move(trainer), options.devices.name));
  }
  return std::unique_ptr<InnerStep>(std::make_unique<CpuInnerStep>(site.model, site.train));
}

}  // namespace atl::node
