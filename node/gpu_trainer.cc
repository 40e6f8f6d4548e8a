#include "node/gpu_trainer.h"

#if defined(ATOLL_HAVE_CUDA)
#include "algorithms/cuda/cuda_hydra.h"
#include "algorithms/cuda/cuda_student.h"
#include "algorithms/cuda/cuda_trainer.h"
#include "kernels/cuda/devices.h"
#include "kernels/cuda/nccl_group.h"
#include "kernels/cuda/runtime.h"
#endif

namespace atl::node {

bool cuda_built() {
#if defined(ATOLL_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

StatusOr<DeviceChoice> resolve_devices(const std::string& device, const std::string& devices) {
  DeviceChoice c;
  if (devices.empty() && device == "cpu") {
    c.name = "cpu";
    return c;
  }
  std::string spec = devices;
  std::string flag = "--devices " + devices;
  if (devices.empty()) {
    if (device.rfind("cuda:", 0) != 0)
      return InvalidArgument("--device " + device + ": expected cpu or cuda:N (e.g. cuda:0)");
    if (device.find(',') != std::string::npos)
      return InvalidArgument("--device " + device +
                             ": one device only; list several GPUs with --devices cuda:0,cuda:1");
    spec = device;
    flag = "--device " + device;
  } else if (device != "cpu") {
    return InvalidArgument("--device " + device + " and --devices " + devices +
                           " both given: use --devices alone to train on several GPUs");
  }
#if defined(ATOLL_HAVE_CUDA)
  namespace kc = kernels::cuda;
  ATOLL_ASSIGN_OR_RETURN(c.cuda, kc::parse_devices(spec));
  auto n = kc::device_count();
  if (!n.ok())
    return Unavailable(flag + ": no CUDA device: " + n.status().message() +
                       "; use --device cpu on this machine");
  ATOLL_RETURN_IF_ERROR(kc::validate_devices(c.cuda, *n));
  if (c.cuda.size() > 1 && !kc::nccl_available())
    return FailedPrecondition(flag + ": several GPUs need NCCL, which this build lacks: " +
                              "install NCCL and rebuild, or list one device");
  c.name = spec;
  return c;
#else
  return FailedPrecondition(flag + ": this atoll was built without the CUDA backend (no nvcc " +
                            "at configure time, or -DATOLL_CUDA=OFF): rebuild with the CUDA " +
                            "toolkit, or use --device cpu");
#endif
}

#if defined(ATOLL_HAVE_CUDA)
struct GpuTrainer::Impl {
  std::unique_ptr<algorithms::cuda::CudaTrainer> trainer;
};
#else
struct GpuTrainer::Impl {};
#endif

GpuTrainer::GpuTrainer() : impl_(std::make_unique<Impl>()) {}
GpuTrainer::~GpuTrainer() = default;

StatusOr<std::unique_ptr<GpuTrainer>> GpuTrainer::create(const algorithms::ModelConfig& model,
                                                         const algorithms::TrainerConfig& train,
                                                         const DeviceChoice& devices) {
  if (!devices.gpu()) return InvalidArgument("GpuTrainer: no GPU in the device choice");
#if defined(ATOLL_HAVE_CUDA)
  std::unique_ptr<GpuTrainer> t(new GpuTrainer());
  auto ct = algorithms::cuda::CudaTrainer::create(model, train, devices.cuda);
  if (!ct.ok())
    return Status(ct.status().code(), "training on " + devices.name + ": " + ct.status().message());
  t->impl_->trainer = std::move(ct).value();
  return t;
#else
  (void)model;
  (void)train;
  return FailedPrecondition("this atoll was built without the CUDA backend: use --device cpu");
#endif
}

StatusOr<algorithms::StepStats> GpuTrainer::step(algorithms::ParamSet& params,
                                                 const int32_t* tokens, int64_t global_step) {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->step(params, tokens, global_step);
#else
  (void)params;
  (void)tokens;
  (void)global_step;
  return FailedPrecondition("this atoll was built without the CUDA backend");
#endif
}

Status GpuTrainer::load(const algorithms::ParamSet& params) {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->load_params(params);
#else
  (void)params;
  return FailedPrecondition("this atoll was built without the CUDA backend");
#endif
}

StatusOr<algorithms::StepStats> GpuTrainer::step_device(const int32_t* tokens,
                                                        int64_t global_step) {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->step_device(tokens, global_step);
#else
  (void)tokens;
  (void)global_step;
  return FailedPrecondition("this atoll was built without the CUDA backend");
#endif
}

Status GpuTrainer::store(algorithms::ParamSet& params) {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->store_params(params);
#else
  (void)params;
  return FailedPrecondition("this atoll was built without the CUDA backend");
#endif
}

StatusOr<GpuOptimizerState> GpuTrainer::save_optimizer() {
#if defined(ATOLL_HAVE_CUDA)
  GpuOptimizerState s{algorithms::ParamSet(impl_->trainer->layout()),
                      algorithms::ParamSet(impl_->trainer->layout()), impl_->trainer->adam_steps()};
  ATOLL_RETURN_IF_ERROR(impl_->trainer->download_moments(s.m, s.v));
  return s;
#else
  return FailedPrecondition("this atoll was built without the CUDA backend");
#endif
}

Status GpuTrainer::restore_optimizer(const GpuOptimizerState& state) {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->upload_moments(state.m, state.v, state.adam_steps);
#else
  (void)state;
  return FailedPrecondition("this atoll was built without the CUDA backend");
#endif
}

namespace {

// Hydra and distillation train on one device: the multi-GPU worker is CudaTrainer's.
Status one_device(const DeviceChoice& devices, const char* what) {
  if (!devices.gpu()) return InvalidArgument(std::string(what) + ": no GPU in the device choice");
  if (devices.cuda.size() > 1)
    return FailedPrecondition("--devices " + devices.name + ": " + what +
                              " trains on one GPU: use --device cuda:N");
  return Status::Ok();
}

}  // namespace

#if defined(ATOLL_HAVE_CUDA)
struct GpuHydraTrainer::Impl {
  std::unique_ptr<algorithms::cuda::CudaHydraTrainer> trainer;
};
struct GpuStudentTrainer::Impl {
  std::unique_ptr<algorithms::cuda::CudaStudentTrainer> trainer;
};
#else
struct GpuHydraTrainer::Impl {
  std::vector<uint32_t> none;
};
struct GpuStudentTrainer::Impl {};
#endif

GpuHydraTrainer::GpuHydraTrainer() : impl_(std::make_unique<Impl>()) {}
GpuHydraTrainer::~GpuHydraTrainer() = default;

StatusOr<std::unique_ptr<GpuHydraTrainer>> GpuHydraTrainer::create(
    const algorithms::ModelConfig& model, const algorithms::TrainerConfig& train,
    const DeviceChoice& devices) {
  ATOLL_RETURN_IF_ERROR(one_device(devices, "a Hydra subnetwork"));
#if defined(ATOLL_HAVE_CUDA)
  std::unique_ptr<GpuHydraTrainer> t(new GpuHydraTrainer());
  auto ct = algorithms::cuda::CudaHydraTrainer::create(model, train, devices.cuda[0]);
  if (!ct.ok())
    return Status(ct.status().code(), "training on " + devices.name + ": " + ct.status().message());
  t->impl_->trainer = std::move(ct).value();
  return t;
#else
  (void)model;
  (void)train;
  return FailedPrecondition("this atoll was built without the CUDA backend: use --device cpu");
#endif
}

Status GpuHydraTrainer::set_subnet(const algorithms::Subnet& s) {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->set_subnet(s);
#else
  (void)s;
  return FailedPrecondition("this atoll was built without the CUDA backend");
#endif
}

const std::vector<uint32_t>& GpuHydraTrainer::indices() const {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->indices();
#else
  return impl_->none;
#endif
}

uint64_t GpuHydraTrainer::trained_set_generation() const {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->trained_set_generation();
#else
  return 0;
#endif
}

StatusOr<algorithms::StepStats> GpuHydraTrainer::step(algorithms::ParamSet& params,
                                                      const int32_t* tokens, int64_t global_step) {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->step(params, tokens, global_step);
#else
  (void)params;
  (void)tokens;
  (void)global_step;
  return FailedPrecondition("this atoll was built without the CUDA backend");
#endif
}

GpuStudentTrainer::GpuStudentTrainer() : impl_(std::make_unique<Impl>()) {}
GpuStudentTrainer::~GpuStudentTrainer() = default;

StatusOr<std::unique_ptr<GpuStudentTrainer>> GpuStudentTrainer::create(
    const algorithms::ModelConfig& model, const algorithms::TrainerConfig& train,
    const algorithms::distill::LossConfig& loss, const DeviceChoice& devices) {
  ATOLL_RETURN_IF_ERROR(one_device(devices, "a distillation student"));
#if defined(ATOLL_HAVE_CUDA)
  std::unique_ptr<GpuStudentTrainer> t(new GpuStudentTrainer());
  auto ct = algorithms::cuda::CudaStudentTrainer::create(model, train, loss, devices.cuda[0]);
  if (!ct.ok())
    return Status(ct.status().code(), "training on " + devices.name + ": " + ct.status().message());
  t->impl_->trainer = std::move(ct).value();
  return t;
#else
  (void)model;
  (void)train;
  (void)loss;
  return FailedPrecondition("this atoll was built without the CUDA backend: use --device cpu");
#endif
}

StatusOr<algorithms::distill::DistillStepStats> GpuStudentTrainer::step(
    algorithms::ParamSet& params, const int32_t* tokens, int64_t global_step,
    algorithms::distill::TeacherLogits<float>* full,
    const algorithms::distill::TopKTargets<float>* topk) {
#if defined(ATOLL_HAVE_CUDA)
  return impl_->trainer->step(params, tokens, global_step, full, topk);
#else
  (void)params;
  (void)tokens;
  (void)global_step;
  (void)full;
  (void)topk;
  return FailedPrecondition("this atoll was built without the CUDA backend");
#endif
}

}  // namespace atl::node
