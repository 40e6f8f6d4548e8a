// `atoll node --device cuda:N` / `--devices LIST` with the real binary: a GPU flag that this
// build or machine cannot honour stops the node before it joins, with one line and exit code 2.
// On a machine with a GPU the node accepts cuda:0 and goes on to join (here: an unreachable
// coordinator, so it gives up after a second). The node's GPU trainer takes MoE models: without
// a GPU the only refusal left is the missing device (or CUDA build), never the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "algorithms/model/llama.h"
#include "node/gpu_trainer.h"
#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {

std::vector<std::string> node_args(std::vector<std::string> extra) {
  // Port 1 on the loopback: nothing listens there, so a node that got past the device check
  // would report "coordinator unreachable" and give up after --give-up-after seconds.
  std::vector<std::string> a = {
      "node",     "--coordinator", "127.0.0.1:1", "--insecure",      "--name",
      "gpu-site", "--data",        "brown:a",     "--give-up-after", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

bool one_line(const std::string& s) {
  return std::count(s.begin(), s.end(), '\n') == 1;
}

TEST(NodeDevice, CudaWithoutAGpuOrCudaBuildFailsBeforeJoiningWithExitCode2) {
  TempDir dir;
  auto r = run_atoll(node_args({"--device", "cuda:0"}), dir / "node.log", std::chrono::seconds(60));
  const bool no_gpu = r.output.find("no CUDA device") != std::string::npos ||
                      r.output.find("built without the CUDA backend") != std::string::npos;
  if (no_gpu) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(one_line(r.output)) << r.output;
    EXPECT_EQ(r.output.rfind("atoll node: --device cuda:0: ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find("--device cpu"), std::string::npos) << "no way out: " << r.output;
    EXPECT_EQ(r.output.find("unreachable"), std::string::npos) << "it tried to join: " << r.output;
  } else {
    // A GPU is present: the flag is accepted and the node tries to join.
    EXPECT_NE(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("unreachable"), std::string::npos) << r.output;
  }
}

TEST(NodeDevice, BadDeviceFlagsAreOneLineAndExitCode2OnEveryMachine) {
  TempDir dir;
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> any_of;  // the line contains one of these
  };
  const std::vector<Case> cases = {
      {{"--device", "gpu0"}, {"--device gpu0: expected cpu or cuda:N"}},
      {{"--device", "cuda:0,cuda:1"}, {"one device only", "--devices cuda:0,cuda:1"}},
      {{"--device", "cuda:0", "--devices", "cuda:1"}, {"both given"}},
      // A device no machine has: absent from this machine, or no GPU, or no CUDA build.
      {{"--device", "cuda:999"},
       {"does not exist", "no CUDA device", "built without the CUDA backend"}},
      {{"--devices", "cuda:0,cuda:0"}, {"listed twice", "built without the CUDA backend"}},
      {{"--devices", "gpu:1"}, {"is not of the form cuda:<index>", "built without the CUDA"}},
  };
  int i = 0;
  for (const auto& c : cases) {
    auto r = run_atoll(node_args(c.flags), dir / ("bad" + std::to_string(i++) + ".log"),
                       std::chrono::seconds(60));
    const std::string what = c.flags[0] + " " + c.flags[1];
    EXPECT_EQ(r.exit_code, 2) << what << ": " << r.output;
    EXPECT_TRUE(one_line(r.output)) << what << ": " << r.output;
    EXPECT_EQ(r.output.rfind("atoll node: ", 0), 0u) << r.output;
    EXPECT_TRUE(
        std::any_of(c.any_of.begin(), c.any_of.end(),
                    [&](const std::string& s) { return r.output.find(s) != std::string::npos; }))
        << what << ": " << r.output;
  }
}

// The node learns its model from the coordinator after joining, so an MoE model reaches
// GpuTrainer::create: with a GPU it trains (one step here), without one the line names the
// missing device or build, not the model.
TEST(NodeDevice, GpuTrainerTakesAnMoeModel) {
  algorithms::ModelConfig m;
  m.vocab = 64;
  m.dim = 32;
  m.layers = 2;
  m.heads = 2;
  m.ffn_hidden = 64;
  m.seq_len = 16;
  m.moe_experts = 4;
  m.moe_top_k = 2;
  m.moe_hidden = 16;
  m.moe_every = 2;
  m.moe_shared_hidden = 8;
  algorithms::TrainerConfig t;
  t.batch = 2;
  t.seq = 16;
  t.warmup = 1;
  t.total_steps = 10;
  node::DeviceChoice d;
  d.cuda = {0};
  d.name = "cuda:0";
  auto g = node::GpuTrainer::create(m, t, d);
  if (!g.ok()) {
    const std::string msg = g.status().message();
    EXPECT_EQ(msg.find("MoE"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("no CUDA device") != std::string::npos ||
                msg.find("built without the CUDA backend") != std::string::npos)
        << msg;
    return;
  }
  algorithms::ParamSet p(algorithms::make_layout(m));
  algorithms::init_params(p, m, 1);
  const std::string before = p.fingerprint();
  std::vector<int32_t> tok(size_t(t.batch) * (t.seq + 1));
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7) % size_t(m.vocab));
  auto s = (*g)->step(p, tok.data(), 0);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_GT(s->loss, 0.0f);
  EXPECT_NE(p.fingerprint(), before);
}

}  // namespace
}  // namespace atl::testing
