#include "kernels/cuda/runtime.h"

#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/lt_check.h"

namespace atl::kernels::cuda {

Status check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // reset non-sticky errors; sticky ones stay for the next call
  return Internal(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" +
                  cudaGetErrorString(err) + ")");
}

Status check_cublas(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  // A status comes from a cuBLASLt call, so the library is loaded.
  return Internal(std::string("cuBLASLt error in ") + what + ": " + cublaslt().GetStatusName(st) +
                  " (" + cublaslt().GetStatusString(st) + ")");
}

StatusOr<int> device_count() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Unavailable(std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(err) + " (" +
                       cudaGetErrorString(err) + ")");
  }
  if (n <= 0) return Unavailable("cudaGetDeviceCount reports 0 devices");
  return n;
}

StatusOr<Stream> Stream::create() {
  Stream s;
  ATOLL_CUDA_CHECK(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
  return s;
}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_ != nullptr) (void)cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}
Stream::~Stream() {
  if (s_ != nullptr) (void)cudaStreamDestroy(s_);
}
Status Stream::synchronize() const {
  return check_cuda(cudaStreamSynchronize(s_), "cudaStreamSynchronize");
}

StatusOr<DeviceMemory> DeviceMemory::alloc(size_t bytes) {
  DeviceMemory m;
  if (bytes == 0) return m;
  const cudaError_t err = cudaMalloc(&m.p_, bytes);
  if (err != cudaSuccess) {
    m.p_ = nullptr;
    return check_cuda(err, ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
  }
  m.bytes_ = bytes;
  return m;
}
DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) (void)cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
DeviceMemory::~DeviceMemory() {
  if (p_ != nullptr) (void)cudaFree(p_);
}

// 32 MiB: what cuBLASLt's Hopper kernels ask for at most (NVIDIA recommends >= 32 MiB on sm_90).
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

StatusOr<std::unique_ptr<Context>> Context::create(int device) {
  ATOLL_ASSIGN_OR_RETURN(const int n, device_count());
  if (device < 0 || device >= n) {
    return InvalidArgument("CUDA device " + std::to_string(device) + " does not exist (this " +
                           "machine has " + std::to_string(n) +
                           "); use cuda:0 .. cuda:" + std::to_string(n - 1));
  }
  std::unique_ptr<Context> ctx(new Context());
  ctx->device_ = device;
  ATOLL_CUDA_CHECK(cudaSetDevice(device));
  ATOLL_CUDA_CHECK(
      cudaDeviceGetAttribute(&ctx->cc_major_, cudaDevAttrComputeCapabilityMajor, device));
  ATOLL_CUDA_CHECK(
      cudaDeviceGetAttribute(&ctx->cc_minor_, cudaDevAttrComputeCapabilityMinor, device));
  ATOLL_CUDA_CHECK(cudaDeviceGetAttribute(&ctx->sm_count_, cudaDevAttrMultiProcessorCount, device));
  ATOLL_ASSIGN_OR_RETURN(ctx->stream_, Stream::create());
  ATOLL_ASSIGN_OR_RETURN(const CublasLt* lt, load_cublaslt());
  cublasLtHandle_t h = nullptr;
  ATOLL_RETURN_IF_ERROR(check_cublas(lt->Create(&h), "cublasLtCreate"));
  ctx->lt_ = h;
  ATOLL_ASSIGN_OR_RETURN(ctx->lt_ws_, DeviceMemory::alloc(kLtWorkspaceBytes));
  return ctx;
}

Context::~Context() {
  if (stream_.get() != nullptr) (void)cudaStreamSynchronize(stream_.get());
  if (lt_ != nullptr) (void)cublaslt().Destroy(lt_);
}

StatusOr<void*> Context::scratch(size_t bytes) {
  if (bytes <= scratch_.bytes()) return scratch_.get();
  ATOLL_RETURN_IF_ERROR(stream_.synchronize());  // earlier ops may still read the old area
  scratch_ = DeviceMemory();
  // Grow by 1.5x so a sequence of slightly larger requests does not reallocate each time.
  ATOLL_ASSIGN_OR_RETURN(scratch_, DeviceMemory::alloc(bytes + bytes / 2));
  return scratch_.get();
}

}  // namespace atl::kernels::cuda
