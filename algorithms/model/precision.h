// Low-precision training GEMMs (`--precision fp32|bf16|fp8|mxfp8|nvfp4`), emulated exactly on
// the CPU: every operand is quantized with the format code of kernels/formats, dequantized back
// to fp32, and multiplied by the ordinary fp32 GEMM (fp32 accumulation; the master weights stay
// fp32 in the ParamSet, only the copy a GEMM reads is quantized). docs/precision.md gives each
// recipe and its sources.
//
// A linear layer y = x·Wᵀ has three GEMMs, and each operand is quantized along the dimension its
// GEMM reduces over (blocks of 16/32 run along that dimension):
//   forward  out (N, OC)  = x (N, IC) · W (OC, IC)ᵀ      reduce IC: x by rows, W by rows
//   dgrad    dx  (N, IC) += dY (N, OC) · W (OC, IC)      reduce OC: dY by rows, W by columns
//   wgrad    dW (OC, IC) += dYᵀ (OC, N) · x (N, IC)      reduce N:  dY and x by columns
// A column-blocked operand is transposed, quantized by rows and transposed back (the emulation
// only needs the dequantized values in the original layout).
//
// Recipes (operand formats; "grad" is dY):
//   fp32   nothing quantized: exactly kernels/cpu matmul_forward / matmul_backward (same bits).
//   bf16   x, W, dY rounded to bf16 (nearest even).
//   fp8    x, W: E4M3; dY: E5M2; one fp32 scale per tensor from its current amax (amax -> max).
//   mxfp8  every operand MXFP8 (OCP MX: 32-element blocks, E8M0 scale, E4M3 elements), dY too.
//   nvfp4  x, dY: NVFP4 1x16 blocks (E4M3 block scale + fp32 tensor scale); W: 16x16 blocks
//          (same quantized W for forward and dgrad); dY stochastically rounded (Philox); wgrad
//          inputs (dY and x) first multiplied along N by a 16x16 random Hadamard transform.
// GemmSite::high_precision switches a GEMM to bf16 (the layers a recipe keeps out of its format).
//
// Randomness (nvfp4 stochastic rounding) is a pure function of (seed, step, site id, operand,
// element index): the same seed and call sequence give the same bits, whatever the thread count.
//
// Reuse (for any layer, e.g. MoE experts): construct one PrecisionGemm per model (not
// thread-safe: it owns scratch buffers, which grow to the largest GEMM seen and are reused),
// configure() it once, begin_step() before each training step's forward, and call forward() /
// backward() in place of kernels/cpu matmul_forward / matmul_backward with a GemmSite whose id is
// unique per weight matrix (it separates the random streams). Same argument conventions as those.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/philox.h"
#include "kernels/core/status.h"
#include "kernels/cpu/moe_ops.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"

namespace atl::algorithms {

enum class Precision : uint8_t { kFp32, kBf16, kFp8, kMxfp8, kNvfp4 };

// "fp32", "bf16", "fp8", "mxfp8", "nvfp4".
const char* precision_name(Precision p);
// One of the names above, or InvalidArgument naming the value and the accepted ones.
StatusOr<Precision> parse_precision(std::string_view s);

// How many of the last transformer blocks the nvfp4 recipe keeps in bf16 for a model of
// `layers` blocks: max(1, round(layers / 8)) (NVIDIA kept about the last 12-16 % of a deep model's
// blocks out of NVFP4; a small model keeps at least its last block). The LM head is kept in bf16
// by every low-precision recipe, separately.
int nvfp4_bf16_tail_layers(int layers);

struct GemmSite {
  uint32_t id = 0;              // unique per weight matrix of the model (random streams)
  bool high_precision = false;  // compute this GEMM in bf16 whatever the recipe (fp32: fp32)
};

// GEMM k (0 qkv, 1 o, 2 gate|up, 3 down) of block l of a model with `layers` blocks; l = layers
// is the LM head. id = l·4 + k; high_precision for the head always and, with nvfp4, for the
// last nvfp4_bf16_tail_layers blocks. The one scheme of every backend (CPU Llama, CudaLlama), so
// both draw the same rounding streams.
GemmSite gemm_site(int layers, Precision precision, int l, int k);

// The operand roles of the three GEMMs, for the per-operand recipe (see the table above).
enum class Operand : uint8_t {
  kFwdX,     // forward: activation x (N, IC), reduced along IC
  kFwdW,     // forward: weight W (OC, IC), reduced along IC
  kDgradDy,  // dgrad: dY (N, OC), reduced along OC
  kDgradW,   // dgrad: W (OC, IC), reduced along OC
  kWgradDy,  // wgrad: dY (N, OC), reduced along N
  kWgradX,   // wgrad: x (N, IC), reduced along N
};

// The recipe, operand by operand, as code: shared by PrecisionGemm and the CUDA path
// (algorithms/cuda/precision_cuda.h), so both quantize exactly the same way.
enum class OperandFormat : uint8_t {
  kCopy,   // fp32, unchanged
  kBf16,   // bf16, nearest even
  kE4M3T,  // E4M3 with a per-tensor current scale
  kE5M2T,  // E5M2 with a per-tensor current scale
  kMx8,    // MXFP8 along rows
  kNv,     // NVFP4 1x16 along rows, nearest even
  kNvSr,   // NVFP4 1x16 along rows, stochastic rounding
  kNv2d,   // NVFP4 16x16 tiles (layout-independent)
};
OperandFormat operand_format(Precision p, Operand role, bool high_precision);
// Whether the operand goes through the 16x16 random Hadamard transform first (NVFP4's wgrad
// inputs).
bool hadamard_operand(Precision p, Operand role, bool high_precision);
// Operands whose reduction axis is their row index (blocks run down the columns).
bool reduces_over_rows(Operand role);
// The Philox stream of an operand's stochastic rounding: step, weight matrix (20 bits), operand
// role (4 bits).
uint64_t rounding_stream(uint64_t step, GemmSite site, Operand role);
// The 16 signs (+-1) of the random Hadamard transform for a seed.
void hadamard_signs(uint64_t seed, float signs[16]);

class PrecisionGemm {
 public:
  PrecisionGemm() = default;
  // Selects the recipe; seed keys the random streams (stochastic rounding, Hadamard signs).
  void configure(Precision p, uint64_t seed);
  Precision precision() const { return precision_; }
  // Training step index: every random stream of the step's GEMMs is keyed by it.
  void begin_step(uint64_t step) { step_ = step; }
  // While disabled every GEMM is plain fp32 (evaluation of the fp32 master weights).
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  bool active() const { return enabled_ && precision_ != Precision::kFp32; }

  // out (N, OC) = q(x) (N, IC) · q(W) (OC, IC)ᵀ  (overwrites out)
  void forward(float* out, const float* x, const float* w, int N, int IC, int OC, GemmSite site);
  // dx (N, IC) += q(dY) · q(W); dW (OC, IC) += q(dY)ᵀ · q(x). Either output may be nullptr.
  void backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int N,
                int IC, int OC, GemmSite site);

  // Grouped GEMMs of the MoE experts, in place of kernels/cpu moe_grouped_matmul_forward /
  // _backward (same arguments; W_e = w + e·w_stride). Each non-empty group of `plan` is its own
  // GEMM and is quantized as one: per-tensor scales (fp8, nvfp4's fp32 scale) are taken per
  // expert group and per expert weight, never over the whole permuted tensor (one expert's range
  // would set every expert's scale); wgrad blocks and Hadamard groups of 16 run over the group's
  // own tokens. One site serves all the experts of a weight kind: group e's operand is quantized
  // with first_index = offsets[e]·cols, so its stochastic rounding draws the counters
  // [offsets[e]·cols, offsets[e+1]·cols) of the site's stream: no two elements share one.
  void grouped_forward(float* out, const float* x, const float* w, size_t w_stride,
                       const kernels::cpu::MoePlan& plan, int IC, int OC, GemmSite site);
  void grouped_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                        size_t w_stride, const kernels::cpu::MoePlan& plan, int IC, int OC,
                        GemmSite site);

  // The dequantized value of one operand as the recipe quantizes it for `role`, written in the
  // operand's own layout: m (rows, cols) row-major, rows = N for x and dY, OC for W. Exposed
  // for tests and for callers that quantize an operand once and reuse it. Uses the recipe of
  // `site` (bf16 when site.high_precision) at the current step. Stochastic rounding draws
  // u32(first_index + i) for element i of the operand in its quantization layout (transposed
  // for the column-blocked roles).
  void quantize_operand(const float* m, int rows, int cols, Operand role, GemmSite site, float* out,
                        uint64_t first_index = 0);

  // Applies the 16x16 random Hadamard transform of the wgrad inputs along the rows of m
  // (rows, cols): each full group of 16 consecutive rows r is replaced by H · group, with
  // H = Had16 · diag(signs) / 4 orthogonal; a tail of rows % 16 rows is left unchanged. Applied
  // to both wgrad operands it leaves dYᵀ·x unchanged in exact arithmetic.
  void hadamard_rows(float* m, int rows, int cols) const;

  // The random stream that stochastically rounds operand `role` of GEMM `site` at the current
  // step (element i of the operand, in its quantization layout, draws u32(i)).
  Philox rounding_rng(GemmSite site, Operand role) const;

 private:
  // Quantize m (rows, cols) with blocks along its rows (the reduction axis is cols).
  void quantize_rows(const float* m, int rows, int cols, Operand role, GemmSite site, float* out,
                     uint64_t first_index);

  Precision precision_ = Precision::kFp32;
  uint64_t seed_ = 0;
  uint64_t step_ = 0;
  bool enabled_ = true;
  float signs_[16] = {};  // random Hadamard signs (+-1), from the seed
  // Scratch, grown to the largest GEMM and reused.
  std::vector<float> a_, b_, t_, u_, gw_;  // gw_: the quantized expert weights (grouped)
  std::vector<uint16_t> h16_;
  std::vector<uint8_t> u8_;
  std::vector<kernels::formats::BlockMxfp8> mx_;
  std::vector<kernels::formats::BlockNvfp4> nv_;
};

}  // namespace atl::algorithms
