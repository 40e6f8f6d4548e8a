#include "measure/codecs.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "algorithms/compress/codec.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/int_block.h"
#include "kernels/formats/lowbit.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"
#include "measure/timing.h"

namespace atl::measure {

namespace {

namespace cmp = algorithms::compress;
namespace fmt = kernels::formats;

// Pseudo-gradient-like input: standard normals, scaled per run of 4096 values (a "tensor") by a
// log-uniform factor in [1e-5, 1e-2] (layers move by different amounts), plus one value in
// 1024 ten times larger (the heavy tail that top-k and block scales have to cope with).
std::vector<float> make_input(size_t n, uint64_t seed) {
  std::vector<float> x(n);
  const Philox normals(seed, 1), scales(seed, 2), spikes(seed, 3);
#pragma omp parallel for schedule(static)
  for (size_t t = 0; t < (n + 4095) / 4096; ++t) {
    const double scale = std::pow(10.0, -5.0 + 3.0 * scales.uniform_double(t));
    for (size_t i = t * 4096; i < std::min(n, (t + 1) * 4096); ++i) {
      const double spike = spikes.u32(i) % 1024 == 0 ? 10.0 : 1.0;
      x[i] = static_cast<float>(normals.normal(i) * scale * spike);
    }
  }
  return x;
}

// memcpy split over the OpenMP threads, as the codecs are.
void parallel_memcpy(float* dst, const float* src, size_t n) {
  const int t = omp_get_max_threads();
  if (t <= 1 || n < (size_t{1} << 16)) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
#pragma omp parallel num_threads(t)
  {
    const size_t per = (n + t - 1) / t;
    const size_t b = std::min(n, per * omp_get_thread_num());
    const size_t e = std::min(n, b + per);
    std::memcpy(dst + b, src + b, (e - b) * sizeof(float));
  }
}

// The format kernels alone (no header, checksum or validation), single-threaded, GB/s of fp32:
// where the codecs' time goes.
std::vector<FormatKernelSpeed> time_format_kernels(const std::vector<float>& x, int reps) {
  const size_t n = x.size();
  const double gb = 4.0 * static_cast<double>(n) / 1e9;
  std::vector<float> y(n);
  std::vector<uint16_t> h(n);
  std::vector<uint8_t> b(n);
  std::vector<fmt::BlockQ8<32>> q8(fmt::int_num_blocks<32>(n));
  std::vector<fmt::BlockQ4<32>> q4(fmt::int_num_blocks<32>(n));
  std::vector<fmt::BlockNvfp4> nv(fmt::nvfp4_num_blocks(n));
  std::vector<fmt::BlockMxfp4> mx4(fmt::mx_num_blocks(n));
  std::vector<fmt::BlockMxfp8> mx8(fmt::mx_num_blocks(n));
  std::vector<fmt::BlockSign<128>> sg(fmt::lowbit_num_blocks<128>(n));
  std::vector<fmt::BlockTernary<128>> tr(fmt::lowbit_num_blocks<128>(n));
  const Philox rng(1, 2);
  const float ts = fmt::nvfp4_tensor_scale(x);
  std::vector<FormatKernelSpeed> rows;
  auto run = [&](const char* name, auto&& fn) {
    rows.push_back({name, gb / best_seconds(fn, reps)});
  };
  run("abs_max", [&] { (void)fmt::abs_max(x); });
  run("bf16_quantize", [&] { fmt::quantize_bf16(x, h); });
  run("bf16_dequantize", [&] { fmt::dequantize_bf16(h, y); });
  run("bf16_quantize_sr", [&] { fmt::quantize_bf16_sr(x, h, rng, 0); });
  run("fp16_quantize", [&] { fmt::quantize_fp16(x, h); });
  run("e4m3_quantize", [&] { fmt::quantize_e4m3(x, b); });
  run("e4m3_scaled_quantize", [&] { fmt::quantize_e4m3_scaled(x, 1e3f, b); });
  run("e4m3_dequantize", [&] { fmt::dequantize_e4m3(b, y); });
  run("e4m3_quantize_sr", [&] { fmt::quantize_e4m3_sr(x, b, rng, 0); });
  run("q8_32_quantize", [&] { fmt::quantize_q8<32>(x, q8); });
  run("q8_32_dequantize", [&] { fmt::dequantize_q8<32>(q8, y); });
  run("q4_32_quantize", [&] { fmt::quantize_q4<32>(x, q4); });
  run("q4_32_dequantize", [&] { fmt::dequantize_q4<32>(q4, y); });
  run("nvfp4_quantize", [&] { fmt::quantize_nvfp4(x, ts, nv); });
  run("nvfp4_dequantize", [&] { fmt::dequantize_nvfp4(nv, ts, y); });
  run("mxfp4_quantize", [&] { fmt::quantize_mxfp4(x, mx4); });
  run("mxfp4_dequantize", [&] { fmt::dequantize_mxfp4(mx4, y); });
  run("mxfp8_quantize", [&] { fmt::quantize_mxfp8(x, mx8); });
  run("mxfp8_dequantize", [&] { fmt::dequantize_mxfp8(mx8, y); });
  run("sign_128_quantize", [&] { fmt::quantize_sign<128>(x, sg); });
  run("sign_128_dequantize", [&] { (void)fmt::dequantize_sign<128>(sg, y); });
  run("ternary_128_quantize", [&] { fmt::quantize_ternary<128>(x, tr); });
  run("ternary_128_dequantize", [&] { (void)fmt::dequantize_ternary<128>(tr, y); });
  return rows;
}

const char* const kDefaultSpecs[] = {
    "bf16",  "fp8",   "int8",      "int4",           "nvfp4",
    "mxfp4", "mxfp8", "topk:0.02", "topk:0.02+int4", "topk-chunked:0.02+int4",
    "sign",  "ternary", "topk-chunked:0.015625:4096+sign",
    // The entropy stage on the 4-bit codes the bandwidth benchmark sends both ways.
    "int4:256", "int4:256+zstd", "nvfp4+zstd"};

}  // namespace

std::vector<std::string> default_codec_specs() {
  return std::vector<std::string>(std::begin(kDefaultSpecs), std::end(kDefaultSpecs));
}

StatusOr<CodecSpeedReport> measure_codec_speed(const std::vector<std::string>& specs,
                                               size_t numel, int threads, int reps,
                                               bool with_kernels) {
  std::vector<cmp::Codec> codecs;
  for (const auto& s : specs) {
    auto c = cmp::Codec::create(s);
    if (!c.ok()) return InvalidArgument("--codecs: " + c.status().message());
    codecs.push_back(*c);
  }
  kernels::cpu::set_num_threads(threads);
  const size_t n = numel;
  const double gb = 4.0 * static_cast<double>(n) / 1e9;

  CodecSpeedReport report;
  report.numel = n;
  report.threads = kernels::cpu::num_threads();
  const std::vector<float> x = make_input(n, 20261129);
  std::vector<float> y(n);
  report.memcpy_gbps = gb / best_seconds([&] { parallel_memcpy(y.data(), x.data(), n); }, reps);

  std::vector<uint8_t> msg;
  for (size_t c = 0; c < codecs.size(); ++c) {
    cmp::Codec& codec = codecs[c];
    codec.set_threads(report.threads);
    const std::string& name = specs[c];
    if (Status s = codec.encode_into(x, msg); !s.ok())
      return Internal(name + ": encode failed: " + s.message());
    if (Status s = codec.decode_into(msg, y); !s.ok())
      return Internal(name + ": decode failed: " + s.message());
    // The whole tensor as one message, encode and decode split over the threads in fixed
    // slices (the bytes are the same for any count; tests/algorithms/compress_codec_digest_test).
    const double enc = best_seconds([&] { (void)codec.encode_into(x, msg); }, reps);
    const double dec = best_seconds([&] { (void)codec.decode_into(msg, y); }, reps);
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(y[i]) - x[i];
      err += d * d;
      ref += static_cast<double>(x[i]) * x[i];
    }
    report.codecs.push_back({name, codec.spec().to_string(), gb / enc, gb / dec,
                             8.0 * static_cast<double>(msg.size()) / static_cast<double>(n),
                             ref > 0 ? std::sqrt(err / ref) : 0.0});
  }
  if (with_kernels) report.kernels = time_format_kernels(x, reps);
  return report;
}

}  // namespace atl::measure
