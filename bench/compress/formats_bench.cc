// Throughput of the format kernels and codecs on this machine, one core. Prints one JSON object:
// {"n": values, "memcpy_gbps": ..., "kernels": [{"name", "gbps"}], "codecs": [{"codec",
// "encode_gbps", "decode_gbps", "bits_per_value"}]}. GB/s are of fp32 input (4 bytes per value).
// Not wired into the build yet; compile against the kernels and algorithms libraries.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"
#include "kernels/core/philox.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/int_block.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"

namespace fmt = atl::kernels::formats;
namespace cmp = atl::algorithms::compress;

// Best of several repetitions, GB/s of fp32 input.
double gbps(size_t n, const std::function<void()>& fn) {
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
  }
  return 4.0 * static_cast<double>(n) / best / 1e9;
}

int main() {
  const size_t n = size_t{1} << 24;
  std::vector<float> x(n), y(n), z(n);
  const atl::Philox rng(1, 2);
  for (size_t i = 0; i < n; ++i) x[i] = 1e-3f * static_cast<float>(rng.normal(i));
  const double memcpy_gbps = gbps(n, [&] { std::memcpy(y.data(), x.data(), 4 * n); });
  std::vector<uint16_t> h(n);
  std::vector<uint8_t> b(n);
  std::vector<fmt::BlockQ8<32>> q8(fmt::int_num_blocks<32>(n));
  std::vector<fmt::BlockQ4<32>> q4(fmt::int_num_blocks<32>(n));
  std::vector<fmt::BlockNvfp4> nv(fmt::nvfp4_num_blocks(n));
  std::vector<fmt::BlockMxfp4> mx4(fmt::mx_num_blocks(n));
  std::vector<fmt::BlockMxfp8> mx8(fmt::mx_num_blocks(n));
  const float ts = fmt::nvfp4_tensor_scale(x);
  const std::vector<std::pair<std::string, std::function<void()>>> kernels = {
      {"bf16_quantize", [&] { fmt::quantize_bf16(x, h); }},
      {"bf16_dequantize", [&] { fmt::dequantize_bf16(h, y); }},
      {"bf16_quantize_sr", [&] { fmt::quantize_bf16_sr(x, h, rng, 0); }},
      {"fp16_quantize", [&] { fmt::quantize_fp16(x, h); }},
      {"fp16_dequantize", [&] { fmt::dequantize_fp16(h, y); }},
      {"e4m3_quantize", [&] { fmt::quantize_e4m3(x, b); }},
      {"e4m3_dequantize", [&] { fmt::dequantize_e4m3(b, y); }},
      {"e4m3_quantize_sr", [&] { fmt::quantize_e4m3_sr(x, b, rng, 0); }},
      {"e5m2_quantize", [&] { fmt::quantize_e5m2(x, b); }},
      {"q8_32_quantize", [&] { fmt::quantize_q8<32>(x, q8); }},
      {"q8_32_dequantize", [&] { fmt::dequantize_q8<32>(q8, y); }},
      {"q4_32_quantize", [&] { fmt::quantize_q4<32>(x, q4); }},
      {"q4_32_dequantize", [&] { fmt::dequantize_q4<32>(q4, y); }},
      {"nvfp4_quantize", [&] { fmt::quantize_nvfp4(x, ts, nv); }},
      {"nvfp4_dequantize", [&] { fmt::dequantize_nvfp4(nv, ts, y); }},
      {"mxfp4_quantize", [&] { fmt::quantize_mxfp4(x, mx4); }},
      {"mxfp4_dequantize", [&] { fmt::dequantize_mxfp4(mx4, y); }},
      {"mxfp8_quantize", [&] { fmt::quantize_mxfp8(x, mx8); }},
      {"mxfp8_dequantize", [&] { fmt::dequantize_mxfp8(mx8, y); }},
  };
  std::printf("{\"n\": %zu, \"memcpy_gbps\": %.2f,\n \"kernels\": [\n", n, memcpy_gbps);
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::printf("  {\"name\": \"%s\", \"gbps\": %.2f}%s\n", kernels[i].first.c_str(),
                gbps(n, kernels[i].second), i + 1 < kernels.size() ? "," : "");
  }
  std::printf(" ],\n \"codecs\": [\n");
  const std::vector<std::string> specs = {"none",  "bf16",  "fp8",   "int8", "int4",
                                          "nvfp4", "mxfp4", "topk:0.02+int4",
                                          "topk-chunked:0.02+int4"};
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto codec = *cmp::Codec::create(specs[i]);
    std::vector<uint8_t> msg;
    const double enc = gbps(n, [&] { (void)codec.encode_into(x, msg); });
    const double dec = gbps(n, [&] { (void)codec.decode_into(msg, z); });
    std::printf("  {\"codec\": \"%s\", \"encode_gbps\": %.2f, \"decode_gbps\": %.2f, "
                "\"bits_per_value\": %.4f}%s\n",
                specs[i].c_str(), enc, dec, *cmp::bits_per_value(specs[i], n),
                i + 1 < specs.size() ? "," : "");
  }
  std::printf(" ]}\n");
}
