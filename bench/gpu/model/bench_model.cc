// Tokens/s of the CUDA training path (algorithms/cuda/cuda_trainer.h) on cuda:0, for the
// benchmark config of bench/RESULTS.md, a larger one, the benchmark config with MoE layers
// (every second FFN: 8 experts, top-2, hidden 384 = the dense FFN's active width) and the
// benchmark config under the nvfp4 recipe (emulated: quantize, dequantize, fp32 GEMM). Prints one
// JSON object on stdout; run by bench/gpu/check.sh. Each config: a few warm-up steps, then `steps`
// timed inner steps with θ kept on the device (step_device, as the node runs a round), then `steps`
// timed with a host round trip of θ on every step (step: one H2D and one D2H copy of the flat
// parameters), the worst case of the copy cost.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "algorithms/cuda/cuda_trainer.h"
#include "algorithms/model/llama.h"
#include "kernels/core/check.h"

namespace {

using namespace atl::algorithms;
using Clock = std::chrono::steady_clock;

struct Bench {
  const char* name;
  ModelConfig model;
  TrainerConfig train;
  int steps;
};

std::string run(const Bench& b) {
  auto t = cuda::CudaTrainer::create(b.model, b.train, {0});
  const std::string context = std::string("bench_cuda_model: ") + b.name;
  atl::die_if_error(t.status(), context);
  ParamSet p(make_layout(b.model));
  init_params(p, b.model, 1);
  const int B = b.train.batch, T = b.train.seq;
  std::mt19937 g(7);
  std::vector<int32_t> tok(size_t(B) * (T + 1));
  for (auto& x : tok) x = static_cast<int32_t>(g() % uint32_t(b.model.vocab));
  auto check = [&](const atl::Status& s) { atl::die_if_error(s, context); };
  check((*t)->load_params(p));
  float loss = 0;
  for (int s = 0; s < 3; ++s) check((*t)->step_device(tok.data(), s).status());
  auto t0 = Clock::now();
  for (int s = 0; s < b.steps; ++s) {
    auto st = (*t)->step_device(tok.data(), 3 + s);
    check(st.status());
    loss = st->loss;
  }
  const double dev_s = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int s = 0; s < b.steps; ++s) check((*t)->step(p, tok.data(), 3 + b.steps + s).status());
  const double host_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double toks = double(B) * T * b.steps;
  const double fpt = flops_per_token(b.model, T);
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"name\": \"%s\", \"layers\": %d, \"dim\": %d, \"heads\": %d, \"ffn\": %d, "
                "\"vocab\": %d, \"seq\": %d, \"batch\": %d, \"experts\": %d, \"top_k\": %d, "
                "\"precision\": \"%s\", \"params\": %lld, \"steps\": %d, "
                "\"tokens_per_s\": %.1f, \"tflops\": %.3f, \"step_ms\": %.3f, "
                "\"tokens_per_s_with_host_params\": %.1f, \"last_loss\": %.4f}",
                b.name, b.model.layers, b.model.dim, b.model.heads, b.model.ffn_hidden,
                b.model.vocab, T, B, b.model.moe_experts,
                b.model.moe_experts ? b.model.moe_top_k : 0, precision_name(b.train.precision),
                static_cast<long long>(count_params(b.model)), b.steps, toks / dev_s,
                toks / dev_s * fpt / 1e12, 1e3 * dev_s / b.steps, toks / host_s, loss);
  return buf;
}

}  // namespace

int main() {
  Bench small{"bench", {}, {}, 30};
  small.model.vocab = 256;
  small.model.dim = 256;
  small.model.layers = 4;
  small.model.heads = 4;
  small.model.ffn_hidden = 768;
  small.model.seq_len = 256;
  small.train.batch = 8;
  small.train.seq = 256;
  Bench large{"large", {}, {}, 10};
  large.model.vocab = 256;
  large.model.dim = 768;
  large.model.layers = 12;
  large.model.heads = 12;
  large.model.ffn_hidden = 2048;
  large.model.seq_len = 512;
  large.train.batch = 16;
  large.train.seq = 512;
  Bench moe = small;
  moe.name = "bench-moe";
  moe.steps = 10;
  moe.model.moe_experts = 8;
  moe.model.moe_top_k = 2;
  moe.model.moe_hidden = 384;
  moe.model.moe_every = 2;
  Bench nvfp4 = small;
  nvfp4.name = "bench-nvfp4";
  nvfp4.steps = 10;
  nvfp4.train.precision = Precision::kNvfp4;
  // In this order.
  const std::string a = run(small), b = run(large), c = run(moe), d = run(nvfp4);
  std::printf("{\"device\": \"cuda:0\", \"configs\": [%s, %s, %s, %s]}\n", a.c_str(), b.c_str(),
              c.c_str(), d.c_str());
  return 0;
}
