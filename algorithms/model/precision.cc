#include "algorithms/model/precision.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/scalar.h"

namespace atl::algorithms {

namespace fmt = atl::kernels::formats;
namespace ops = atl::kernels::cpu;

namespace {

constexpr Precision kAll[] = {Precision::kFp32, Precision::kBf16, Precision::kFp8,
                              Precision::kMxfp8, Precision::kNvfp4};

// Stream of the Hadamard signs; the per-GEMM streams (see stream()) never reach it: their top
// bits hold the step, and no run has 2^40 steps.
constexpr uint64_t kHadamardStream = ~uint64_t{0};

using Fmt = OperandFormat;

// out (cols, rows) = in (rows, cols)ᵀ, in tiles for cache locality.
void transpose(const float* in, int rows, int cols, float* out) {
  constexpr int kTile = 32;
  for (int r0 = 0; r0 < rows; r0 += kTile)
    for (int c0 = 0; c0 < cols; c0 += kTile)
      for (int r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int c = c0; c < std::min(cols, c0 + kTile); ++c)
          out[static_cast<size_t>(c) * rows + r] = in[static_cast<size_t>(r) * cols + c];
}

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp8:
      return "fp8";
    case Precision::kMxfp8:
      return "mxfp8";
    case Precision::kNvfp4:
      return "nvfp4";
  }
  return "?";
}

StatusOr<Precision> parse_precision(std::string_view s) {
  for (Precision p : kAll)
    if (s == precision_name(p)) return p;
  return InvalidArgument("unknown precision \"" + std::string(s) +
                         "\"; use one of fp32, bf16, fp8, mxfp8, nvfp4");
}

int nvfp4_bf16_tail_layers(int layers) {
  return std::max(1, static_cast<int>(std::lround(layers / 8.0)));
}

GemmSite gemm_site(int layers, Precision precision, int l, int k) {
  GemmSite s;
  s.id = static_cast<uint32_t>(l) * 4 + static_cast<uint32_t>(k);
  s.high_precision = l == layers || (precision == Precision::kNvfp4 &&
                                     l >= layers - nvfp4_bf16_tail_layers(layers));
  return s;
}

OperandFormat operand_format(Precision p, Operand role, bool high_precision) {
  const bool grad = role == Operand::kDgradDy || role == Operand::kWgradDy;
  const bool weight = role == Operand::kFwdW || role == Operand::kDgradW;
  if (p == Precision::kFp32) return Fmt::kCopy;
  if (high_precision) return Fmt::kBf16;
  switch (p) {
    case Precision::kFp32:
      return Fmt::kCopy;
    case Precision::kBf16:
      return Fmt::kBf16;
    case Precision::kFp8:
      return grad ? Fmt::kE5M2T : Fmt::kE4M3T;
    case Precision::kMxfp8:
      return Fmt::kMx8;
    case Precision::kNvfp4:
      return weight ? Fmt::kNv2d : grad ? Fmt::kNvSr : Fmt::kNv;
  }
  return Fmt::kCopy;
}

bool hadamard_operand(Precision p, Operand role, bool high_precision) {
  return p == Precision::kNvfp4 && !high_precision &&
         (role == Operand::kWgradDy || role == Operand::kWgradX);
}

bool reduces_over_rows(Operand role) {
  return role == Operand::kDgradW || role == Operand::kWgradDy || role == Operand::kWgradX;
}

uint64_t rounding_stream(uint64_t step, GemmSite site, Operand role) {
  return (step << 24) | (static_cast<uint64_t>(site.id & 0xfffffu) << 4) |
         static_cast<uint64_t>(role);
}

void hadamard_signs(uint64_t seed, float signs[16]) {
  const Philox rng(seed, kHadamardStream);
  for (int j = 0; j < 16; ++j) signs[j] = (rng.u32(j) & 1u) ? -1.0f : 1.0f;
}

void PrecisionGemm::configure(Precision p, uint64_t seed) {
  precision_ = p;
  seed_ = seed;
  hadamard_signs(seed, signs_);
}

void PrecisionGemm::hadamard_rows(float* m, int rows, int cols) const {
  // Fast Walsh-Hadamard transform over groups of 16 rows: sign flip, 4 butterfly stages (the
  // Sylvester matrix, H[i][j] = (-1)^popcount(i & j)), then the 1/4 that makes it orthogonal.
  const size_t C = static_cast<size_t>(cols);
  for (int g = 0; g + 16 <= rows; g += 16) {
    float* base = m + static_cast<size_t>(g) * C;
    for (int j = 0; j < 16; ++j)
      if (signs_[j] < 0)
        for (size_t c = 0; c < C; ++c) base[j * C + c] = -base[j * C + c];
    for (int h = 1; h < 16; h <<= 1)
      for (int i = 0; i < 16; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          float* a = base + j * C;
          float* b = base + (j + h) * C;
          for (size_t c = 0; c < C; ++c) {
            const float u = a[c], v = b[c];
            a[c] = u + v;
            b[c] = u - v;
          }
        }
    for (size_t k = 0; k < 16 * C; ++k) base[k] *= 0.25f;
  }
}

Philox PrecisionGemm::rounding_rng(GemmSite site, Operand role) const {
  return Philox(seed_, rounding_stream(step_, site, role));
}

void PrecisionGemm::quantize_rows(const float* m, int rows, int cols, Operand role, GemmSite site,
                                  float* out, uint64_t first_index) {
  const size_t n = static_cast<size_t>(rows) * cols;
  const std::span<const float> in(m, n);
  const std::span<float> dst(out, n);
  switch (operand_format(precision_, role, site.high_precision)) {
    case Fmt::kCopy:
      std::copy(m, m + n, out);
      return;
    case Fmt::kBf16: {
      const std::span<uint16_t> h(grow(h16_, n), n);
      fmt::quantize_bf16(in, h);
      fmt::dequantize_bf16(h, dst);
      return;
    }
    case Fmt::kE4M3T: {
      const float inv = fmt::current_inv_scale(fmt::abs_max(in).amax, fmt::kE4M3Max);
      const std::span<uint8_t> q(grow(u8_, n), n);
      fmt::quantize_e4m3_scaled(in, inv, q);
      fmt::dequantize_e4m3_scaled(q, 1.0f / inv, dst);
      return;
    }
    case Fmt::kE5M2T: {
      const float inv = fmt::current_inv_scale(fmt::abs_max(in).amax, fmt::kE5M2Max);
      const std::span<uint8_t> q(grow(u8_, n), n);
      fmt::quantize_e5m2_scaled(in, inv, q);
      fmt::dequantize_e5m2_scaled(q, 1.0f / inv, dst);
      return;
    }
    case Fmt::kMx8: {
      const size_t nb = fmt::mx_num_blocks(cols);
      const std::span<fmt::BlockMxfp8> blk(grow(mx_, nb), nb);
      for (int r = 0; r < rows; ++r) {
        const size_t off = static_cast<size_t>(r) * cols;
        fmt::quantize_mxfp8(in.subspan(off, cols), blk);
        fmt::dequantize_mxfp8(blk, dst.subspan(off, cols));
      }
      return;
    }
    case Fmt::kNv:
    case Fmt::kNvSr: {
      // Scale rounding kUp: no element is clamped at 6, so stochastic rounding stays unbiased.
      const float ts = fmt::nvfp4_tensor_scale(in);
      const size_t nb = fmt::nvfp4_num_blocks(cols);
      const std::span<fmt::BlockNvfp4> blk(grow(nv_, nb), nb);
      const Philox rng = rounding_rng(site, role);
      const bool sr = operand_format(precision_, role, site.high_precision) == Fmt::kNvSr;
      for (int r = 0; r < rows; ++r) {
        const size_t off = static_cast<size_t>(r) * cols;
        if (sr) {
          fmt::quantize_nvfp4_sr(in.subspan(off, cols), ts, blk, rng, first_index + off);
        } else {
          fmt::quantize_nvfp4(in.subspan(off, cols), ts, blk);
        }
        fmt::dequantize_nvfp4(blk, ts, dst.subspan(off, cols));
      }
      return;
    }
    case Fmt::kNv2d: {
      const float ts = fmt::nvfp4_tensor_scale(in);
      const size_t nb = fmt::nvfp4_2d_num_blocks(rows, cols);
      const std::span<fmt::BlockNvfp4> blk(grow(nv_, nb), nb);
      fmt::quantize_nvfp4_2d(in, rows, cols, ts, blk);
      fmt::dequantize_nvfp4_2d(blk, rows, cols, ts, dst);
      return;
    }
  }
}

void PrecisionGemm::quantize_operand(const float* m, int rows, int cols, Operand role,
                                     GemmSite site, float* out, uint64_t first_index) {
  const Fmt f = operand_format(precision_, role, site.high_precision);
  const bool hadamard = hadamard_operand(precision_, role, site.high_precision);
  // Elementwise formats and 16x16 tiles do not depend on the layout; row blocks along cols need
  // no transpose either.
  const bool blocked = f == Fmt::kMx8 || f == Fmt::kNv || f == Fmt::kNvSr;
  const size_t n = static_cast<size_t>(rows) * cols;
  const float* src = m;
  if (hadamard) {
    std::copy(m, m + n, out);
    hadamard_rows(out, rows, cols);
    src = out;
  }
  if (!blocked || !reduces_over_rows(role)) {
    quantize_rows(src, rows, cols, role, site, out, first_index);
    return;
  }
  float* t = grow(t_, n);
  float* u = grow(u_, n);
  transpose(src, rows, cols, t);  // (cols, rows): the reduction axis is now contiguous
  quantize_rows(t, cols, rows, role, site, u, first_index);
  transpose(u, cols, rows, out);
}

void PrecisionGemm::forward(float* out, const float* x, const float* w, int N, int IC, int OC,
                            GemmSite site) {
  if (!active()) {
    ops::matmul_forward(out, x, w, N, IC, OC);
    return;
  }
  if (N == 0 || OC == 0) return;
  float* xq = grow(a_, static_cast<size_t>(N) * IC);
  float* wq = grow(b_, static_cast<size_t>(OC) * IC);
  quantize_operand(x, N, IC, Operand::kFwdX, site, xq);
  quantize_operand(w, OC, IC, Operand::kFwdW, site, wq);
  ops::matmul_forward(out, xq, wq, N, IC, OC);
}

void PrecisionGemm::backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                             int N, int IC, int OC, GemmSite site) {
  if (!active()) {
    ops::matmul_backward(dx, dw, dy, x, w, N, IC, OC);
    return;
  }
  if (N == 0 || OC == 0 || IC == 0) return;
  float* gq = grow(a_, static_cast<size_t>(N) * OC);
  if (dx != nullptr) {
    float* wq = grow(b_, static_cast<size_t>(OC) * IC);
    quantize_operand(dy, N, OC, Operand::kDgradDy, site, gq);
    quantize_operand(w, OC, IC, Operand::kDgradW, site, wq);
    ops::matmul_backward(dx, static_cast<float*>(nullptr), gq, static_cast<const float*>(nullptr),
                         wq, N, IC, OC);
  }
  if (dw != nullptr) {
    float* xq = grow(b_, static_cast<size_t>(N) * IC);
    quantize_operand(dy, N, OC, Operand::kWgradDy, site, gq);
    quantize_operand(x, N, IC, Operand::kWgradX, site, xq);
    ops::matmul_backward(static_cast<float*>(nullptr), dw, gq, xq,
                         static_cast<const float*>(nullptr), N, IC, OC);
  }
}

}  // namespace atl::algorithms
