// CUDA runtime plumbing for the CUDA backend: every CUDA call's error turned into a Status, and
// RAII owners for streams, device buffers and the per-device op context (stream + cuBLASLt
// handle + workspace + scratch). Plain C++: usable from .cc files compiled without nvcc (only
// the CUDA runtime headers are needed, which the atoll_cuda target exports).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "kernels/core/status.h"

struct cublasLtContext;  // cublasLtHandle_t is cublasLtContext*; cublasLt.h stays out of here

namespace atl::kernels::cuda {

// Ok for cudaSuccess, else Internal("CUDA error in <what>: <name> (<description>)").
// Also clears the sticky "last error" of non-fatal errors so the next call starts clean.
Status check_cuda(cudaError_t err, const char* what);
#define ATOLL_CUDA_CHECK(call) \
  ATOLL_RETURN_IF_ERROR(::atl::kernels::cuda::check_cuda((call), #call))

// Number of CUDA devices, or an error saying why there is none usable (no driver, no device).
// Never aborts: a CPU-only machine gets a Status it can print.
StatusOr<int> device_count();

// An owned cudaStream_t (non-blocking with respect to the legacy default stream).
class Stream {
 public:
  static StatusOr<Stream> create();
  Stream() = default;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  cudaStream_t get() const { return s_; }
  Status synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

// An owned untyped device allocation (cudaMalloc; freed in the destructor).
class DeviceMemory {
 public:
  static StatusOr<DeviceMemory> alloc(size_t bytes);
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// A typed device array of n elements of T, with synchronous host copies (tests, setup).
// upload/download synchronize the whole current device around the copy: cudaMemcpy runs on the
// legacy default stream, which does not order with the Contexts' non-blocking streams, and a
// pageable host-to-device cudaMemcpy may return before its last DMA has landed. Without the
// device-wide syncs a kernel enqueued on a Context stream right after upload() could read the
// buffer before the copy ends, and download() could read it before the kernels writing it end.
// Call them with the buffer's device current (Context::make_current).
template <typename T>
class DeviceBuffer {
 public:
  static StatusOr<DeviceBuffer> alloc(size_t n) {
    auto mem = DeviceMemory::alloc(n * sizeof(T));
    if (!mem.ok()) return mem.status();
    DeviceBuffer b;
    b.mem_ = std::move(mem).value();
    b.n_ = n;
    return StatusOr<DeviceBuffer>(std::move(b));
  }
  T* data() const { return static_cast<T*>(mem_.get()); }
  size_t size() const { return n_; }
  // Copies min(n, size()) elements; n must not exceed size().
  Status upload(const T* host, size_t n) {
    if (n > n_) return InvalidArgument("DeviceBuffer::upload: more elements than the buffer");
    if (n == 0) return Status::Ok();
    ATOLL_RETURN_IF_ERROR(check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (upload)"));
    ATOLL_RETURN_IF_ERROR(check_cuda(
        cudaMemcpy(data(), host, n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy (upload)"));
    return check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (upload)");
  }
  Status download(T* host, size_t n) const {
    if (n > n_) return InvalidArgument("DeviceBuffer::download: more elements than the buffer");
    if (n == 0) return Status::Ok();
    ATOLL_RETURN_IF_ERROR(check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (download)"));
    return check_cuda(cudaMemcpy(host, data(), n * sizeof(T), cudaMemcpyDeviceToHost),
                      "cudaMemcpy (download)");
  }

 private:
  DeviceMemory mem_;
  size_t n_ = 0;
};

// Everything an op needs on one device: the device id, its stream, a cuBLASLt handle with a
// fixed workspace, and a grow-only scratch area for ops with temporaries (embedding backward's
// sort, attention backward's dS). Ops enqueue on stream() and return without synchronizing;
// scratch is reused by the next op on the same stream, which is safe because the stream orders
// them. One Context per device and per thread.
class Context {
 public:
  // Selects `device` (cudaSetDevice) and creates the handles.
  static StatusOr<std::unique_ptr<Context>> create(int device);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  int cc_major() const { return cc_major_; }
  int cc_minor() const { return cc_minor_; }
  int sm_count() const { return sm_count_; }
  cudaStream_t stream() const { return stream_.get(); }
  cublasLtContext* lt() const { return lt_; }
  void* lt_workspace() const { return lt_ws_.get(); }
  size_t lt_workspace_bytes() const { return lt_ws_.bytes(); }
  // At least `bytes` of device scratch (valid until the next scratch() call). Growing frees the
  // old area after synchronizing the stream.
  StatusOr<void*> scratch(size_t bytes);
  Status synchronize() const { return stream_.synchronize(); }
  // cudaSetDevice(device()): ops launch on the calling thread's current device, so a thread
  // driving several Contexts makes each current before using it.
  Status make_current() const { return check_cuda(cudaSetDevice(device_), "cudaSetDevice"); }

 private:
  Context() = default;
  int device_ = 0;
  int cc_major_ = 0, cc_minor_ = 0, sm_count_ = 0;
  Stream stream_;
  cublasLtContext* lt_ = nullptr;
  DeviceMemory lt_ws_;
  DeviceMemory scratch_;
};

}  // namespace atl::kernels::cuda
