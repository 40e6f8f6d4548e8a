// `atoll bench codecs`: encode and decode throughput of the pseudo-gradient codecs against the
// machine's memcpy, measured in the same run on the same input. GB/s are of fp32 input (4 bytes
// per value) for both directions, so the numbers compare directly with memcpy's.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"
#include "cli/bench_common.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "kernels/core/philox.h"
#include "kernels/cpu/ops.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/int_block.h"
#include "kernels/formats/lowbit.h"
#include "kernels/formats/mx.h"
#include "kernels/formats/nvfp4.h"

namespace atl::cli {

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

// Seconds of one call: best of at least `reps` calls and 0.2 s in total (after a warm-up call,
// which also faults in output pages).
template <typename Fn>
double best_seconds(Fn&& fn, int reps) {
  using clock = std::chrono::steady_clock;
  fn();
  double best = 1e30, total = 0;
  for (int r = 0; r < reps || total < 0.2; ++r) {
    const auto t0 = clock::now();
    fn();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
    if (r > 1000) break;
  }
  return best;
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

struct KernelRow {
  std::string name;
  double gbps;
};

// The format kernels alone (no header, checksum or validation), single-threaded, GB/s of fp32:
// where the codecs' time goes.
std::vector<KernelRow> bench_kernels(const std::vector<float>& x, int reps) {
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
  std::vector<KernelRow> rows;
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
    "sign",  "ternary", "topk-chunked:0.015625:4096+sign"};

}  // namespace

int bench_codecs(const Args& args) {
  Flags flags("bench codecs",
              {{"numel", true, "values in the pseudo-gradient", "16777216"},
               {"threads", true,
                "threads (0 = all cores); with T > 1 memcpy is split in T parts and each codec "
                "splits one message's encode and decode over T threads",
                "1"},
               {"reps", true, "timed repetitions per measurement (best is kept)", "5"},
               {"codecs", true, "comma-separated codec specs (default: the standard set)", ""},
               {"kernels", false, "also time the format kernels alone (single-threaded)", ""},
               {"json", false, "print one JSON object", ""}});
  if (Status s = flags.parse(args); !s.ok()) return fail("bench codecs", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto numel = flags.get_int("numel", int64_t{1} << 24, 1024, int64_t{1} << 30);
  auto threads = flags.get_int("threads", 1, 0, 1024);
  auto reps = flags.get_int("reps", 5, 1, 1000);
  if (!numel.ok()) return fail("bench codecs", numel.status().message(), 2);
  if (!threads.ok()) return fail("bench codecs", threads.status().message(), 2);
  if (!reps.ok()) return fail("bench codecs", reps.status().message(), 2);
  std::vector<std::string> specs;
  if (auto list = flags.get("codecs"); list && !list->empty()) {
    size_t pos = 0;
    while (pos <= list->size()) {
      const size_t comma = std::min(list->find(',', pos), list->size());
      specs.push_back(list->substr(pos, comma - pos));
      pos = comma + 1;
    }
  } else {
    specs.assign(std::begin(kDefaultSpecs), std::end(kDefaultSpecs));
  }
  std::vector<cmp::Codec> codecs;
  for (const auto& s : specs) {
    auto c = cmp::Codec::create(s);
    if (!c.ok()) return fail("bench codecs", "--codecs: " + c.status().message(), 2);
    codecs.push_back(*c);
  }
  kernels::cpu::set_num_threads(static_cast<int>(*threads));
  const size_t n = static_cast<size_t>(*numel);
  const int r = static_cast<int>(*reps);
  const double gb = 4.0 * static_cast<double>(n) / 1e9;

  const std::vector<float> x = make_input(n, 20261129);
  std::vector<float> y(n);
  const double memcpy_gbps = gb / best_seconds([&] { parallel_memcpy(y.data(), x.data(), n); }, r);

  struct Row {
    std::string codec, canonical;
    double encode_gbps, decode_gbps, bits_per_value, rel_rmse;
  };
  std::vector<Row> rows;
  std::vector<uint8_t> msg;
  const int threads_used = kernels::cpu::num_threads();
  for (size_t c = 0; c < codecs.size(); ++c) {
    cmp::Codec& codec = codecs[c];
    codec.set_threads(threads_used);
    const std::string& name = specs[c];
    if (Status s = codec.encode_into(x, msg); !s.ok()) {
      return fail("bench codecs", name + ": encode failed: " + s.message());
    }
    if (Status s = codec.decode_into(msg, y); !s.ok()) {
      return fail("bench codecs", name + ": decode failed: " + s.message());
    }
    // The whole tensor as one message, encode and decode split over the threads in fixed
    // slices (the bytes are the same for any count; tests/algorithms/compress_codec_digest_test).
    const double enc = best_seconds([&] { (void)codec.encode_into(x, msg); }, r);
    const double dec = best_seconds([&] { (void)codec.decode_into(msg, y); }, r);
    // Relative RMS error of the round trip: what the bytes saved cost.
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(y[i]) - x[i];
      err += d * d;
      ref += static_cast<double>(x[i]) * x[i];
    }
    rows.push_back({name, codec.spec().to_string(), gb / enc, gb / dec,
                    8.0 * static_cast<double>(msg.size()) / static_cast<double>(n),
                    ref > 0 ? std::sqrt(err / ref) : 0.0});
  }

  std::vector<KernelRow> kernel_rows;
  if (flags.has("kernels")) kernel_rows = bench_kernels(x, r);

  const int used = kernels::cpu::num_threads();
  if (flags.has("json")) {
    std::printf(
        "{\"bench\":\"codecs\",\"numel\":%zu,\"threads\":%d,\"memcpy_gbps\":%.3f,"
        "\"codecs\":[",
        n, used, memcpy_gbps);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& w = rows[i];
      std::printf(
          "%s{\"codec\":\"%s\",\"canonical\":\"%s\",\"encode_gbps\":%.3f,\"decode_gbps\":%.3f,"
          "\"bits_per_value\":%.4f,\"encode_vs_memcpy\":%.3f,\"rel_rmse\":%.3e}",
          i ? "," : "", w.codec.c_str(), w.canonical.c_str(), w.encode_gbps, w.decode_gbps,
          w.bits_per_value, w.encode_gbps / memcpy_gbps, w.rel_rmse);
    }
    std::printf("]");
    if (!kernel_rows.empty()) {
      std::printf(",\"kernels\":[");
      for (size_t i = 0; i < kernel_rows.size(); ++i) {
        std::printf("%s{\"name\":\"%s\",\"gbps\":%.3f}", i ? "," : "", kernel_rows[i].name.c_str(),
                    kernel_rows[i].gbps);
      }
      std::printf("]");
    }
    std::printf("}\n");
  } else {
    std::printf("%zu values, %d thread(s), memcpy %.2f GB/s\n", n, used, memcpy_gbps);
    std::printf("%-28s %10s %10s %8s %10s %10s\n", "codec", "enc GB/s", "dec GB/s", "bits/val",
                "enc/memcpy", "rel rmse");
    for (const Row& w : rows) {
      std::printf("%-28s %10.2f %10.2f %8.3f %9.0f%% %10.2e\n", w.codec.c_str(), w.encode_gbps,
                  w.decode_gbps, w.bits_per_value, 100.0 * w.encode_gbps / memcpy_gbps, w.rel_rmse);
    }
    for (const KernelRow& k : kernel_rows)
      std::printf("kernel %-21s %10.2f\n", k.name.c_str(), k.gbps);
  }
  return 0;
}

}  // namespace atl::cli
