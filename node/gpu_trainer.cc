#include "node/gpu_trainer.h"

#if defined(ATOLL_HAVE_CUDA)
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

}  // namespace atl::node
