// The precision recipes (`--precision bf16|fp8|mxfp8|nvfp4`) on the CUDA model path: the
// PrecisionGemm of algorithms/model/precision.h on device buffers. Same emulation as the CPU:
// every operand of a linear layer's GEMMs is quantized with the format code (the CUDA quantize
// kernels of kernels/cuda/quantize.h, plus kernels/cuda/precision_emu.h), dequantized back to
// fp32, and multiplied by the fp32 cuBLASLt GEMM. The same rules, operand by operand: which
// format for x, W and dY in forward, dgrad and wgrad (precision.h's table), column-blocked
// operands transposed, quantized by rows and transposed back, per-tensor current scales (fp8,
// the NVFP4 tensor scale) from the operand's amax, NVFP4 weights in 16x16 tiles, dY
// stochastically rounded with the CPU's Philox streams (seed, step, site id, operand; element
// index as counter), the wgrad inputs through the same 16x16 random Hadamard transform, and
// GemmSite::high_precision GEMMs in bf16. Each quantizer is bit for bit the CPU encoder, so
// given the same fp32 inputs the quantized operands are the CPU's bits; the GEMMs then sum in
// cuBLASLt's order.
//
// Usage as PrecisionGemm: configure() once, begin_step() before each step's forward, then
// forward() / backward() / grouped_*() in place of the fp32 matmul ops (same argument
// conventions; backward ACCUMULATES). Not thread-safe; owns grow-only device scratch. Current
// scales and the NVFP4 tensor scale need the operand's amax on the host: one stream
// synchronization per scaled operand (fp8, nvfp4), as the quantize kernels' abs_max does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/model/precision.h"
#include "kernels/core/status.h"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/precision_emu.h"
#include "kernels/cuda/runtime.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"

namespace atl::algorithms::cuda {

class CudaPrecisionGemm {
 public:
  explicit CudaPrecisionGemm(kernels::cuda::Context& ctx) : ctx_(ctx) {}

  // As PrecisionGemm (the same Hadamard signs from the seed).
  void configure(Precision p, uint64_t seed);
  Precision precision() const { return precision_; }
  void begin_step(uint64_t step) { step_ = step; }
  void set_enabled(bool on) { enabled_ = on; }
  bool active() const { return enabled_ && precision_ != Precision::kFp32; }

  // out (N, OC) = q(x) · q(W)ᵀ (overwrites out).
  Status forward(float* out, const float* x, const float* w, int N, int IC, int OC, GemmSite site);
  // dx (N, IC) += q(dY) · q(W); dW (OC, IC) += q(dY)ᵀ · q(x). Either output may be nullptr.
  Status backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int N,
                  int IC, int OC, GemmSite site);
  // The MoE experts' grouped GEMMs (precision_grouped.cc's rules: each non-empty group quantized
  // as its own GEMM, its operand's stochastic rounding counters starting at offsets[e]·cols).
  Status grouped_forward(float* out, const float* x, const float* w, size_t w_stride,
                         const kernels::cuda::MoeDevicePlan& plan, int IC, int OC, GemmSite site);
  Status grouped_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                          size_t w_stride, const kernels::cuda::MoeDevicePlan& plan, int IC, int OC,
                          GemmSite site);

  // PrecisionGemm::quantize_operand on the device: m (rows, cols) -> out, dequantized values in
  // m's layout. out must not overlap m. Exposed for tests.
  Status quantize_operand(const float* m, int rows, int cols, Operand role, GemmSite site,
                          float* out, uint64_t first_index = 0);

 private:
  Status quantize_rows(const float* m, int rows, int cols, Operand role, GemmSite site, float* out,
                       uint64_t first_index);

  kernels::cuda::Context& ctx_;
  Precision precision_ = Precision::kFp32;
  uint64_t seed_ = 0;
  uint64_t step_ = 0;
  bool enabled_ = true;
  kernels::cuda::HadamardSigns signs_{};
  // Device scratch, grown to the largest GEMM and reused (roles as PrecisionGemm's).
  kernels::cuda::DeviceBuffer<float> a_, b_, t_, u_, gw_;
  kernels::cuda::DeviceBuffer<uint16_t> h16_;
  kernels::cuda::DeviceBuffer<uint8_t> u8_;
  kernels::cuda::DeviceBuffer<kernels::formats::BlockMxfp8> mx_;
  kernels::cuda::DeviceBuffer<kernels::formats::BlockNvfp4> nv_;
};

}  // namespace atl::algorithms::cuda
