// The precision recipes written out operand by operand, straight from kernels/formats: the
// reference PrecisionGemm (dense and grouped) must equal bit for bit. Shared by the precision
// tests.
#pragma once

#include <cstring>
#include <span>
#include <vector>

#include "algorithms/model/llama.h"
#include "algorithms/model/param_set.h"
#include "algorithms/model/precision.h"
#include "algorithms/optim/inner_trainer.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"
#include "kernels/formats/scalar.h"

namespace atl::algorithms::precision_ref {

namespace f = atl::kernels::formats;

using Mat = std::vector<float>;

inline Mat random_mat(size_t rows, size_t cols, uint64_t seed, double sd = 1.0) {
  const Philox rng(seed, 11);
  Mat m(rows * cols);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(sd * rng.normal(i));
  return m;
}

inline Mat transposed(const Mat& m, size_t rows, size_t cols) {
  Mat t(m.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

inline bool same_bits(const Mat& a, const Mat& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- Reference quantizers, straight from kernels/formats, row blocks along cols ---------------
inline Mat ref_bf16(const Mat& m) {
  std::vector<uint16_t> q(m.size());
  Mat y(m.size());
  f::quantize_bf16(m, q);
  f::dequantize_bf16(q, y);
  return y;
}
inline Mat ref_fp8(const Mat& m, bool e5m2) {
  const float fmax = e5m2 ? f::kE5M2Max : f::kE4M3Max;
  const float inv = f::current_inv_scale(f::abs_max(m).amax, fmax);
  std::vector<uint8_t> q(m.size());
  Mat y(m.size());
  if (e5m2) {
    f::quantize_e5m2_scaled(m, inv, q);
    f::dequantize_e5m2_scaled(q, 1.0f / inv, y);
  } else {
    f::quantize_e4m3_scaled(m, inv, q);
    f::dequantize_e4m3_scaled(q, 1.0f / inv, y);
  }
  return y;
}
inline Mat ref_mx(const Mat& m, size_t rows, size_t cols) {
  Mat y(m.size());
  std::vector<f::BlockMxfp8> b(f::mx_num_blocks(cols));
  for (size_t r = 0; r < rows; ++r) {
    f::quantize_mxfp8(std::span(m).subspan(r * cols, cols), b);
    f::dequantize_mxfp8(b, std::span(y).subspan(r * cols, cols));
  }
  return y;
}
inline Mat ref_nv(const Mat& m, size_t rows, size_t cols, const Philox* sr,
                  uint64_t first_index = 0) {
  const float ts = f::nvfp4_tensor_scale(m);
  Mat y(m.size());
  std::vector<f::BlockNvfp4> b(f::nvfp4_num_blocks(cols));
  for (size_t r = 0; r < rows; ++r) {
    const auto in = std::span(m).subspan(r * cols, cols);
    if (sr) {
      f::quantize_nvfp4_sr(in, ts, b, *sr, first_index + r * cols);
    } else {
      f::quantize_nvfp4(in, ts, b);
    }
    f::dequantize_nvfp4(b, ts, std::span(y).subspan(r * cols, cols));
  }
  return y;
}
inline Mat ref_nv2d(const Mat& m, size_t rows, size_t cols) {
  const float ts = f::nvfp4_tensor_scale(m);
  std::vector<f::BlockNvfp4> b(f::nvfp4_2d_num_blocks(rows, cols));
  Mat y(m.size());
  f::quantize_nvfp4_2d(m, rows, cols, ts, b);
  f::dequantize_nvfp4_2d(b, rows, cols, ts, y);
  return y;
}
// Blocks along the rows (the reduction axis of dgrad's W and of both wgrad operands).
template <typename Fn>
inline Mat along_rows(const Mat& m, size_t rows, size_t cols, Fn q) {
  return transposed(q(transposed(m, rows, cols), cols, rows), cols, rows);
}

// The recipe as documented in precision.h, operand by operand.
// first_index: where the operand's stochastic rounding starts in the site's stream.
inline Mat reference(PrecisionGemm& g, Precision p, const Mat& m, size_t rows, size_t cols,
                     Operand role, GemmSite site, uint64_t first_index = 0) {
  const bool grad = role == Operand::kDgradDy || role == Operand::kWgradDy;
  const bool weight = role == Operand::kFwdW || role == Operand::kDgradW;
  const bool by_rows =
      role == Operand::kDgradW || role == Operand::kWgradDy || role == Operand::kWgradX;
  if (p == Precision::kFp32) return m;
  if (site.high_precision || p == Precision::kBf16) return ref_bf16(m);
  if (p == Precision::kFp8) return ref_fp8(m, grad);
  if (p == Precision::kMxfp8) {
    auto q = [](const Mat& a, size_t r, size_t c) { return ref_mx(a, r, c); };
    return by_rows ? along_rows(m, rows, cols, q) : q(m, rows, cols);
  }
  // nvfp4
  if (weight) return ref_nv2d(m, rows, cols);
  Mat src = m;
  if (role == Operand::kWgradDy || role == Operand::kWgradX)
    g.hadamard_rows(src.data(), static_cast<int>(rows), static_cast<int>(cols));
  const Philox rng = g.rounding_rng(site, role);
  auto q = [&](const Mat& a, size_t r, size_t c) {
    return ref_nv(a, r, c, grad ? &rng : nullptr, first_index);
  };
  return by_rows ? along_rows(src, rows, cols, q) : q(src, rows, cols);
}

// Params after `steps` inner steps of recipe p on a learnable stream (row b of step s starts at
// a Philox(5, s) draw in [0, 64) and continues t+1 = (3 t + 1) mod 64), batch 4 × 32 tokens, lr
// 3e-3, 2 warm-up steps, recipe streams keyed by `seed`, with `threads` CPU threads (restored
// after). Each step's loss is appended to *losses when given.
inline ParamSet train_recipe(const ModelConfig& mc, Precision p, uint64_t seed, int threads,
                             int steps, std::vector<float>* losses) {
  const int prev = kernels::cpu::num_threads();
  kernels::cpu::set_num_threads(threads);
  TrainerConfig tc;
  tc.batch = 4;
  tc.seq = 32;
  tc.lr = 3e-3;
  tc.warmup = 2;
  tc.total_steps = steps;
  tc.precision = p;
  tc.precision_seed = seed;
  InnerTrainer tr(mc, tc);
  ParamSet params(make_layout(mc));
  init_params(params, mc, 1);
  std::vector<int32_t> tokens(static_cast<size_t>(tc.batch) * (tc.seq + 1));
  for (int s = 0; s < steps; ++s) {
    const Philox rng(5, static_cast<uint64_t>(s));
    for (int b = 0; b < tc.batch; ++b) {
      int32_t t = static_cast<int32_t>(rng.below(b, 64));
      for (int i = 0; i <= tc.seq; ++i, t = (3 * t + 1) % 64) tokens[b * (tc.seq + 1) + i] = t;
    }
    const StepStats st = tr.step(params, tokens.data(), s);
    if (losses) losses->push_back(st.loss);
  }
  kernels::cpu::set_num_threads(prev);
  return params;
}

}  // namespace atl::algorithms::precision_ref
