// GPU throughput figures for bench/gpu/check.sh, one JSON object on stdout:
//   copy:      device-to-device cudaMemcpy GB/s (bytes read + bytes written per second)
//   quantize:  GB/s of every quantizer and dequantizer, same accounting, and its ratio to copy
//   gemm:      TFLOP/s of the fp32 / bf16 / FP8 cuBLASLt paths at a square and a model shape
//   moe:       MoE layer forward + backward against a dense FFN of equal active FLOPs
//              (bench_moe.cc)
// Usage: bench_cuda [--quick]  (--quick: smaller buffers and fewer repetitions)
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/gpu/bench_moe.h"
#include "kernels/core/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quantize.h"

namespace cu = atl::kernels::cuda;
namespace fm = atl::kernels::formats;

namespace {

#define CHECK(expr) ::atl::die_if_error((expr), "bench_cuda: " #expr)

// Owned CUDA event pair timing a stretch of one stream.
class Timer {
 public:
  Timer() {
    CHECK(cu::check_cuda(cudaEventCreate(&a_), "cudaEventCreate"));
    CHECK(cu::check_cuda(cudaEventCreate(&b_), "cudaEventCreate"));
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  // Mean milliseconds of fn over reps runs (after one warm-up run).
  double time_ms(cudaStream_t s, int reps, const std::function<void()>& fn) {
    fn();
    CHECK(cu::check_cuda(cudaEventRecord(a_, s), "cudaEventRecord"));
    for (int i = 0; i < reps; ++i) fn();
    CHECK(cu::check_cuda(cudaEventRecord(b_, s), "cudaEventRecord"));
    CHECK(cu::check_cuda(cudaEventSynchronize(b_), "cudaEventSynchronize"));
    float ms = 0;
    CHECK(cu::check_cuda(cudaEventElapsedTime(&ms, a_, b_), "cudaEventElapsedTime"));
    return double(ms) / reps;
  }

 private:
  cudaEvent_t a_{}, b_{};
};

template <typename T>
cu::DeviceBuffer<T> alloc(size_t n) {
  auto b = cu::DeviceBuffer<T>::alloc(n);
  atl::die_if_error(b.status(), "bench_cuda: alloc");
  return std::move(b).value();
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  auto n_dev = cu::device_count();
  atl::die_if_error(n_dev.status(), "bench_cuda: no CUDA device");
  auto ctx_or = cu::Context::create(0);
  atl::die_if_error(ctx_or.status(), "bench_cuda: Context::create");
  cu::Context& ctx = **ctx_or;
  cudaDeviceProp prop{};
  CHECK(cu::check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
  const cudaStream_t s = ctx.stream();
  Timer timer;
  const int reps = quick ? 5 : 20;

  // ---- bandwidth: 64 Mi floats (256 MiB) of N(0,1)-ish data.
  const size_t n = quick ? (size_t(1) << 24) : (size_t(1) << 26);
  auto x = alloc<float>(n);
  auto y = alloc<float>(n);
  {
    std::vector<float> h(n);
    uint32_t r = 1;
    for (auto& v : h) {
      r = r * 1664525u + 1013904223u;
      v = float(int32_t(r)) * (1.0f / 2147483648.0f) * 4.0f;
    }
    CHECK(x.upload(h.data(), n));
  }
  const double in_bytes = double(n) * 4;
  const double copy_ms = timer.time_ms(s, reps, [&] {
    CHECK(cu::check_cuda(cudaMemcpyAsync(y.data(), x.data(), n * 4, cudaMemcpyDeviceToDevice, s),
                         "cudaMemcpyAsync"));
  });
  const double copy_gbs = 2 * in_bytes / copy_ms / 1e6;

  auto codes = alloc<uint8_t>(n * 2 + 64);
  std::string q = "[";
  auto add = [&](const char* name, double code_bytes, const std::function<void()>& qf,
                 const std::function<void()>& df) {
    const double qms = timer.time_ms(s, reps, qf);
    const double dms = timer.time_ms(s, reps, df);
    const double qgbs = (in_bytes + code_bytes) / qms / 1e6,
                 dgbs = (in_bytes + code_bytes) / dms / 1e6;
    char buf[400];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"format\": \"%s\", \"quantize_gbs\": %.1f, \"dequantize_gbs\": %.1f, "
                  "\"quantize_vs_copy\": %.3f, \"dequantize_vs_copy\": %.3f}",
                  q.size() > 1 ? ", " : "", name, qgbs, dgbs, qgbs / copy_gbs, dgbs / copy_gbs);
    q += buf;
  };
  void* c = codes.data();
  const cu::SrKey key{1, 2, 0};
  for (auto [f, name] :
       {std::pair{cu::ScalarFormat::kBf16, "bf16"}, std::pair{cu::ScalarFormat::kFp16, "fp16"},
        std::pair{cu::ScalarFormat::kE4M3, "e4m3"}, std::pair{cu::ScalarFormat::kE5M2, "e5m2"}}) {
    const double cb = double(n) * double(cu::scalar_format_bytes(f));
    add(
        name, cb, [&] { CHECK(cu::quantize(ctx, f, x.data(), c, n, fm::Overflow::kSaturate)); },
        [&] { CHECK(cu::dequantize(ctx, f, c, y.data(), n)); });
    if (f == cu::ScalarFormat::kBf16) {
      add(
          "bf16_sr", cb,
          [&] { CHECK(cu::quantize(ctx, f, x.data(), c, n, fm::Overflow::kSaturate, &key)); },
          [&] { CHECK(cu::dequantize(ctx, f, c, y.data(), n)); });
    }
  }
  auto* mx8 = static_cast<fm::BlockMxfp8*>(c);
  auto* mx4 = static_cast<fm::BlockMxfp4*>(c);
  auto* nv = static_cast<fm::BlockNvfp4*>(c);
  add(
      "mxfp8", double(n) * 33 / 32, [&] { CHECK(cu::quantize_mxfp8(ctx, x.data(), n, mx8)); },
      [&] { CHECK(cu::dequantize_mxfp8(ctx, mx8, y.data(), n)); });
  add(
      "mxfp4", double(n) * 17 / 32, [&] { CHECK(cu::quantize_mxfp4(ctx, x.data(), n, mx4)); },
      [&] { CHECK(cu::dequantize_mxfp4(ctx, mx4, y.data(), n)); });
  add(
      "nvfp4", double(n) * 9 / 16, [&] { CHECK(cu::quantize_nvfp4(ctx, x.data(), n, 0.01f, nv)); },
      [&] { CHECK(cu::dequantize_nvfp4(ctx, nv, 0.01f, y.data(), n)); });
  add(
      "nvfp4_sr", double(n) * 9 / 16,
      [&] {
        CHECK(cu::quantize_nvfp4(ctx, x.data(), n, 0.01f, nv, fm::NvfpScaleRounding::kUp, &key));
      },
      [&] { CHECK(cu::dequantize_nvfp4(ctx, nv, 0.01f, y.data(), n)); });
  add(
      "int8_b32", double(n) * 36 / 32, [&] { CHECK(cu::quantize_int(ctx, 8, 32, x.data(), n, c)); },
      [&] { CHECK(cu::dequantize_int(ctx, 8, 32, c, y.data(), n)); });
  add(
      "int4_b32", double(n) * 20 / 32, [&] { CHECK(cu::quantize_int(ctx, 4, 32, x.data(), n, c)); },
      [&] { CHECK(cu::dequantize_int(ctx, 4, 32, c, y.data(), n)); });
  q += "]";

  // ---- GEMMs: out (N, OC) = x (N, IC) · w (OC, IC)ᵀ.
  std::string g = "[";
  struct Shape {
    int N, IC, OC;
    const char* name;
  };
  const Shape shapes[] = {{4096, 4096, 4096, "square_4096"}, {8192, 768, 3072, "mlp_up_768"}};
  auto scales = alloc<float>(2);
  {
    const float h[2] = {1.0f, 1.0f};
    CHECK(scales.upload(h, 2));
  }
  for (const Shape& sh : shapes) {
    const size_t xs = size_t(sh.N) * sh.IC, ws = size_t(sh.OC) * sh.IC, os = size_t(sh.N) * sh.OC;
    auto a = alloc<float>(xs), b = alloc<float>(ws), o = alloc<float>(os);
    CHECK(cu::zero_fill(ctx, a.data(), xs));
    CHECK(cu::zero_fill(ctx, b.data(), ws));
    auto a16 = alloc<uint16_t>(xs), b16 = alloc<uint16_t>(ws);
    auto a8 = alloc<uint8_t>(xs), b8 = alloc<uint8_t>(ws);
    CHECK(cu::quantize(ctx, cu::ScalarFormat::kBf16, a.data(), a16.data(), xs,
                       fm::Overflow::kSaturate));
    CHECK(cu::quantize(ctx, cu::ScalarFormat::kBf16, b.data(), b16.data(), ws,
                       fm::Overflow::kSaturate));
    CHECK(cu::quantize(ctx, cu::ScalarFormat::kE4M3, a.data(), a8.data(), xs,
                       fm::Overflow::kSaturate));
    CHECK(cu::quantize(ctx, cu::ScalarFormat::kE4M3, b.data(), b8.data(), ws,
                       fm::Overflow::kSaturate));
    const double flop = 2.0 * sh.N * sh.IC * sh.OC;
    const int greps = quick ? 3 : 10;
    const double f32 = timer.time_ms(s, greps, [&] {
      CHECK(cu::matmul_forward(ctx, o.data(), a.data(), b.data(), sh.N, sh.IC, sh.OC));
    });
    const double bwd = timer.time_ms(s, greps, [&] {
      CHECK(cu::matmul_backward(ctx, a.data(), b.data(), o.data(), a.data(), b.data(), sh.N, sh.IC,
                                sh.OC));
    });
    const double bf = timer.time_ms(s, greps, [&] {
      CHECK(cu::matmul_bf16(ctx, o.data(), a16.data(), b16.data(), sh.N, sh.IC, sh.OC, false));
    });
    double f8 = 0;
    if (ctx.cc_major() * 10 + ctx.cc_minor() >= 89) {
      f8 = timer.time_ms(s, greps, [&] {
        CHECK(cu::matmul_fp8(ctx, o.data(), a8.data(), cu::Fp8Format::kE4M3, scales.data(),
                             b8.data(), cu::Fp8Format::kE4M3, scales.data() + 1, sh.N, sh.IC, sh.OC,
                             false));
      });
    }
    char buf[400];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"shape\": \"%s\", \"N\": %d, \"IC\": %d, \"OC\": %d, \"fp32_tflops\": %.1f, "
                  "\"fp32_backward_tflops\": %.1f, \"bf16_tflops\": %.1f, \"fp8_tflops\": %.1f}",
                  g.size() > 1 ? ", " : "", sh.name, sh.N, sh.IC, sh.OC, flop / f32 / 1e9,
                  2 * flop / bwd / 1e9, flop / bf / 1e9, f8 > 0 ? flop / f8 / 1e9 : 0.0);
    g += buf;
  }
  g += "]";
  const std::string moe = atl::bench::bench_moe_layer(ctx, quick);
  CHECK(ctx.synchronize());
  std::printf(
      "{\"device\": \"%s\", \"sm\": \"%d.%d\", \"elements\": %zu, \"copy_gbs\": %.1f, "
      "\"quantize\": %s, \"gemm\": %s, \"moe\": %s}\n",
      prop.name, prop.major, prop.minor, n, copy_gbs, q.c_str(), g.c_str(), moe.c_str());
  return 0;
}
