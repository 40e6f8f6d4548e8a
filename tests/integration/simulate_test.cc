// `atoll simulate` against `atoll demo`: the same flags and seed must commit the same θ in every
// round, bit for bit, whether the sites are node processes over mTLS gRPC or threads of one
// process exchanging the same messages in memory.
#include <csignal>
#include <boost/json.hpp>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"
#include "tests/integration/committed_rounds.h"
#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"
#include "tests/integration/json_test_util.h"

namespace atl::testing {
namespace {

// A small, fast model: two sites train a few steps a round.
std::vector<std::string> small_experiment(const std::string& run_dir,
                                          std::vector<std::string> extra) {
  std::vector<std::string> args = {"--nodes", "2",     "--rounds", "3",   "--inner-steps", "4",
                                   "--dim",   "32",    "--layers", "2",   "--heads",       "2",
                                   "--ffn",   "64",    "--seq",    "32",  "--batch",       "2",
                                   "--lr",    "1e-2",  "--eval-tokens", "512", "--http",   "off",
                                   "--store", run_dir, "--seed",   "77"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Runs the demo (processes, mTLS) and the simulation with the same flags and compares the
// committed fingerprints round by round.
void expect_same_rounds(const std::vector<std::string>& extra, uint64_t syncs) {
  TempDir dir;
  auto demo = run_atoll(
      [&] {
        auto a = small_experiment(dir / "demo", extra);
        a.insert(a.begin(), "demo");
        return a;
      }(),
      dir / "demo.log", std::chrono::seconds(240));
  ASSERT_EQ(demo.exit_code, 0) << demo.output;
  auto sim = run_atoll(
      [&] {
        auto a = small_experiment(dir / "sim", extra);
        a.insert(a.begin(), "simulate");
        return a;
      }(),
      dir / "sim.log", std::chrono::seconds(240));
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_NE(demo.output.find("TLS 1.3 mTLS"), std::string::npos) << demo.output;
  EXPECT_NE(sim.output.find("in-process"), std::string::npos) << sim.output;

  expect_same_committed_theta(dir / "demo/store", dir / "sim/store", "demo", syncs, demo.output,
                              sim.output);
}

// `atoll simulate` with small_experiment's flags and `extra`, in dir/name: its final θ's SHA-256.
std::string simulated_final_sha256(const TempDir& dir, const std::string& name,
                                   const std::vector<std::string>& extra) {
  auto a = small_experiment(dir / name, extra);
  a.insert(a.begin(), "simulate");
  auto run = run_atoll(a, dir / (name + ".log"), std::chrono::seconds(240));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const std::string sha = printed_final_sha256(run.output);
  EXPECT_EQ(sha.size(), 64u) << run.output;
  return sha;
}

TEST(Simulate, DilocoCommitsTheSameThetaAsNodeProcesses) {
  expect_same_rounds({"--codec", "int8"}, 3);
}

// The inner optimizer travels in the join's TrainSpec: node processes and in-process sites train
// the same Muon steps.
TEST(Simulate, MuonSitesCommitTheSameThetaAsNodeProcesses) {
  expect_same_rounds({"--codec", "int8", "--optimizer", "muon"}, 3);
  // ... and the sites did train with Muon: AdamW ends elsewhere.
  TempDir dir;
  EXPECT_NE(simulated_final_sha256(dir, "adamw", {"--codec", "int8", "--optimizer", "adamw"}),
            simulated_final_sha256(dir, "muon", {"--codec", "int8", "--optimizer", "muon"}));
}

// diloco.final_look_ahead = false changes only the coordinator's last outer step of θ (of each
// fragment, in Streaming DiLoCo): node processes and in-process sites still commit the same θ,
// every sync before those commits the same θ as with the look-ahead, and they do not.
void expect_only_the_last_syncs_change(const std::vector<std::string>& extra, uint64_t syncs,
                                       uint64_t last_syncs) {
  TempDir dir;
  std::vector<std::string> fingerprints[2];
  for (int off = 0; off < 2; ++off) {
    const std::string name = off ? "off" : "on";
    auto flags = extra;
    flags.insert(flags.end(), {"--final-look-ahead", name});
    EXPECT_EQ(simulated_final_sha256(dir, name, flags).size(), 64u);
    fingerprints[off] = committed_fingerprints(dir / name + "/store", "demo", syncs);
  }
  ASSERT_EQ(fingerprints[0].size(), syncs);
  ASSERT_EQ(fingerprints[1].size(), syncs);
  for (uint64_t r = 0; r < syncs; ++r) {
    if (r + last_syncs < syncs)
      EXPECT_EQ(fingerprints[1][r], fingerprints[0][r]) << "sync " << r;
    else
      EXPECT_NE(fingerprints[1][r], fingerprints[0][r]) << "sync " << r;
  }
}

TEST(Simulate, NoFinalLookAheadChangesTheLastStepOnlyAndNodeProcessesAgree) {
  expect_same_rounds({"--codec", "int8", "--final-look-ahead", "off"}, 3);
  expect_only_the_last_syncs_change({"--codec", "int8"}, 3, 1);
  // Streaming DiLoCo, 2 fragments over 3 outer rounds: syncs 4 and 5 are each fragment's last.
  expect_only_the_last_syncs_change({"--fragments", "2", "--pull-codec", "sparse-delta"}, 6, 2);
}

TEST(Simulate, StreamingDilocoCommitsTheSameThetaAsNodeProcesses) {
  // 2 fragments, one overlapped step: 3 outer rounds are 6 syncs.
  expect_same_rounds({"--fragments", "2", "--overlap", "1", "--pull-codec", "sparse-delta"}, 6);
}

// Compressed broadcast through the round engine and the site workers: after its first, full
// pull every site gets each round's update message and nothing else (a site whose θ differed from
// the coordinator's in any bit would have pulled the full θ on top), and the round records count
// the message's bytes, not 4·numel.
void expect_every_site_follows_the_broadcast(const std::string& pull_codec) {
  TempDir dir;
  const uint64_t rounds = 3;
  auto args = small_experiment(dir / "run", {"--codec", "int8", "--pull-codec", pull_codec,
                                             "--summary-json", dir / "summary.json"});
  args.insert(args.begin(), "simulate");
  auto r = run_atoll(args, dir / "sim.log", std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto store = coordinator::Store::open(dir / "run/store");
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto state = (*store)->load_state("demo");
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  const uint64_t numel = state->experiment.numel;
  ASSERT_TRUE(state->feedback.has_value()) << "the error feedback is committed with the round";
  auto spec = algorithms::compress::parse_spec(pull_codec);
  ASSERT_TRUE(spec.ok());
  const uint64_t message = algorithms::compress::encoded_bytes(*spec, numel);
  for (uint64_t round = 0; round < rounds; ++round) {
    auto rec = (*store)->load_round("demo", round);
    ASSERT_TRUE(rec.ok()) << rec.status().to_string();
    ASSERT_EQ(rec->participants.size(), 2u);
    for (const auto& p : rec->participants)
      EXPECT_EQ(p.bytes_down, round == 0 ? numel * 4 : message)
          << pull_codec << " round " << round << " " << p.node_id;
  }
  EXPECT_EQ(printed_final_sha256(r.output), state->experiment.params_fingerprint);
}

TEST(Simulate, EverySiteFollowsAnInt8Broadcast) {
  expect_every_site_follows_the_broadcast("int8");
}

TEST(Simulate, EverySiteFollowsAn4BitBroadcast) {
  expect_every_site_follows_the_broadcast("nvfp4");
}

// "+zstd" is lossless end to end: node processes over mTLS commit the θ in-process sites commit,
// and both the θ of the same codecs without the stage, in fewer bytes up and down.
TEST(Simulate, TheZstdStageChangesBytesNotBits) {
  expect_same_rounds({"--codec", "int3:256+zstd", "--pull-codec", "int3:256+zstd"}, 3);
  TempDir dir;
  auto run = [&](const std::string& name, const std::string& codec) {
    auto a = small_experiment(dir / name, {"--codec", codec, "--pull-codec", codec,
                                           "--summary-json", dir / (name + ".json")});
    a.insert(a.begin(), "simulate");
    auto r = run_atoll(a, dir / (name + ".log"), std::chrono::seconds(240));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream f(dir / (name + ".json"));
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    boost::system::error_code ec;
    auto doc = boost::json::parse(text, ec);
    EXPECT_FALSE(ec) << text;
    if (ec || !doc.is_object()) return std::make_pair(r, boost::json::object{});
    return std::make_pair(r, doc.as_object());
  };
  const auto [plain_run, plain] = run("plain", "int3:256");
  const auto [zstd_run, zstd] = run("zstd", "int3:256+zstd");
  ASSERT_EQ(printed_final_sha256(zstd_run.output).size(), 64u) << zstd_run.output;
  EXPECT_EQ(printed_final_sha256(zstd_run.output), printed_final_sha256(plain_run.output));
  // int3's 4-bit fields carry about 2.2 bits a value: well under three quarters of the bytes
  // (the first, full pull of θ is the same fp32 in both).
  EXPECT_LT(number(zstd, "bytes_up"), 0.75 * number(plain, "bytes_up"));
  EXPECT_LT(number(zstd, "bytes_down") - number(zstd, "initial_pull_bytes"),
            0.75 * (number(plain, "bytes_down") - number(plain, "initial_pull_bytes")));
  EXPECT_EQ(number(zstd, "initial_pull_bytes"), number(plain, "initial_pull_bytes"));
}

TEST(Simulate, MoreSitesThanGenresShareGenresAndFinish) {
  TempDir dir;
  auto args = small_experiment(dir / "run", {});
  args[1] = "20";  // --nodes
  args[3] = "1";   // --rounds
  args.insert(args.begin(), "simulate");
  auto r = run_atoll(args, dir / "sim.log", std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("summary: 20 nodes, 1 rounds x 4 inner steps, in-process"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("node-16: brown:a"), std::string::npos) << r.output;
}

// small_experiment's flags (with --codec int8 --pull-codec nvfp4) written as the config file `atoll coordinator
// --config` reads: the demo's flags set warm-up min(20, R·H) = 12, min_lr = lr / 10 and
// min_nodes = max_nodes = sites.
constexpr const char* kSmallExperimentToml = R"(name = "demo"
seed = 77
[model]
vocab = 256
dim = 32
layers = 2
heads = 2
ffn_hidden = 64
seq_len = 32
[train]
batch_size = 2
lr = 1e-2
min_lr = 1e-3
warmup_steps = 12
codec = "int8"
[diloco]
rounds = 3
inner_steps = 4
min_nodes = 2
max_nodes = 2
outer_lr = 0.7
outer_momentum = 0.9
pull_codec = "nvfp4"
start_wait_s = 0.5
heartbeat_interval_s = 1.0
)";

std::string written(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return dir / name;
}

// `--config FILE` runs the experiment the file describes: the same θ as the flags that describe
// it, in-process and as node processes over mTLS.
TEST(Simulate, AConfigFileCommitsTheSameThetaAsTheFlagsThatDescribeIt) {
  TempDir dir;
  const std::string config = written(dir, "experiment.toml", kSmallExperimentToml);
  auto flags_run = small_experiment(dir / "flags", {"--codec", "int8", "--pull-codec", "nvfp4"});
  flags_run.insert(flags_run.begin(), "simulate");
  auto by_flags = run_atoll(flags_run, dir / "flags.log", std::chrono::seconds(240));
  ASSERT_EQ(by_flags.exit_code, 0) << by_flags.output;
  for (const std::string command : {"simulate", "demo"}) {
    auto by_file = run_atoll({command, "--config", config, "--eval-tokens", "512", "--http", "off",
                              "--store", dir / command},
                             dir / (command + ".log"), std::chrono::seconds(240));
    ASSERT_EQ(by_file.exit_code, 0) << by_file.output;
    EXPECT_NE(by_file.output.find("2 sites, 3 rounds x 4 inner steps"), std::string::npos)
        << by_file.output;
    EXPECT_EQ(printed_final_sha256(by_file.output), printed_final_sha256(by_flags.output))
        << command;
  }
  ASSERT_EQ(printed_final_sha256(by_flags.output).size(), 64u);
}

// What the file sets cannot also come from a flag; the site count must fit the file's
// min_nodes..max_nodes; experiments --config does not run here are named with the way to run them.
TEST(Simulate, AConfigFileRefusesFlagsAndExperimentsItCannotRunInOneLine) {
  TempDir dir;
  const std::string config = written(dir, "experiment.toml", kSmallExperimentToml);
  // A valid Hydra experiment (Hydra pulls exact θ, not a compressed broadcast).
  const std::string hydra_valid = written(
      dir, "hydra.toml",
      std::regex_replace(std::regex_replace(kSmallExperimentToml, std::regex("seed = 77\n"),
                                            "seed = 77\nalgorithm = \"hydra\"\n"),
                         std::regex("\"nvfp4\""), "\"exact\""));
  const std::string text = written(
      dir, "text.toml", std::string(kSmallExperimentToml) + "[data]\nsource = \"text\"\n"
                        "paths = [\"" + config + "\"]\n");
  struct Case {
    std::vector<std::string> args;
    std::string line;
  };
  // min_nodes above what the command runs: it said "--nodes 5000 is outside ... min_nodes = 5000".
  const std::string crowd =
      written(dir, "crowd.toml",
              std::regex_replace(kSmallExperimentToml, std::regex("min_nodes = 2\nmax_nodes = 2\n"),
                                 "min_nodes = 5000\nmax_nodes = 5000\n"));
  const std::vector<Case> cases = {
      {{"--config", crowd},
       "atoll simulate: " + crowd +
           ": [diloco] min_nodes = 5000 sites, more than the 4096 this "
           "command runs on one machine: lower min_nodes, or run atoll coordinator --config with "
           "atoll node processes"},
      {{"--config", config, "--dim", "64"},
       "atoll simulate: --dim cannot be combined with --config: the experiment comes from " +
           config + "; set it there (docs/configuration.md)"},
      {{"--config", config, "--nodes", "3"},
       "atoll simulate: --nodes 3 is outside " + config +
           "'s [diloco] min_nodes = 2 .. max_nodes = 2: change --nodes or the config"},
      {{"--config", text},
       "atoll simulate: " + text +
           ": [data] source = \"text\", tokenizer = \"bytes\": the sites "
           "here divide Brown in bytes; for other data run atoll coordinator --config with atoll "
           "node --data"},
      {{"--config", dir / "missing.toml"}, "cannot open experiment config"},
  };
  for (const Case& c : cases) {
    auto args = c.args;
    args.insert(args.begin(), "simulate");
    args.insert(args.end(), {"--http", "off", "--store", dir / "never"});
    auto r = run_atoll(args, dir / "refused.log", std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.line), std::string::npos) << r.output;
  }
  auto r = run_atoll({"simulate", "--config", hydra_valid, "--http", "off"}, dir / "hydra.log",
                     std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(hydra_valid + ": algorithm = \"hydra\": --config runs DiLoCo and "
                          "Streaming DiLoCo experiments here; use --algorithm hydra"),
            std::string::npos)
      << r.output;
}

// `atoll simulate --store DIR` killed (SIGKILL) after round 3 of 8 and run again with the same
// flags on the same store: with --site-states it ends on the bits of an uninterrupted run;
// without (stopped by SIGTERM), it says on resuming that it will not.
TEST(Simulate, AKilledRunRestartedOnItsStoreEndsOnTheSameBitsWithSiteStates) {
  TempDir dir;
  auto flags = [&](const std::string& store, bool states) {
    auto a = small_experiment(store, {"--codec", "int8", "--pull-codec", "nvfp4"});
    a[3] = "8";  // --rounds
    a.insert(a.begin(), "simulate");
    if (states) a.push_back("--site-states");
    return a;
  };
  auto whole = run_atoll(flags(dir / "whole", true), dir / "whole.log", std::chrono::seconds(240));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string want = printed_final_sha256(whole.output);
  ASSERT_FALSE(want.empty()) << whole.output;

  for (const bool states : {true, false}) {
    const std::string name = states ? "killed" : "killed-without-states";
    std::vector<std::string> argv = {ATOLL_BINARY};
    const auto args = flags(dir / name, states);
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = node::Subprocess::spawn(argv, dir / (name + "-1.log"));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    std::string text;
    ASSERT_TRUE(wait_for_log(dir / (name + "-1.log"), std::regex("round +3/8"),
                             std::chrono::seconds(120), &text))
        << text;
    // Without states it is stopped the way a scheduler stops it (SIGTERM): it says so and exits
    // 143, as a shell reports a process SIGTERM ended (SIGINT gives 130).
    p->signal(states ? SIGKILL : SIGTERM);
    const auto stopped = p->wait_for(std::chrono::seconds(30));
    if (!states) {
      EXPECT_EQ(stopped, std::optional<int>(143));
      EXPECT_NE(read_text(dir / (name + "-1.log")).find("interrupted: the store in"),
                std::string::npos)
          << read_text(dir / (name + "-1.log"));
    }
    auto again = run_atoll(args, dir / (name + "-2.log"), std::chrono::seconds(240));
    ASSERT_EQ(again.exit_code, 0) << again.output;
    // It resumed a round in the middle: the kill came before the experiment finished.
    std::smatch resumed;
    const std::regex resumed_line("round +(\\d+) \\| val bpb [0-9.]+ \\(resumed\\)");
    ASSERT_TRUE(std::regex_search(again.output, resumed, resumed_line)) << again.output;
    EXPECT_GE(std::stoi(resumed[1].str()), 3) << again.output;
    EXPECT_LT(std::stoi(resumed[1].str()), 8) << again.output;
    const bool warned = again.output.find("will not end on the bits of an uninterrupted one") !=
                        std::string::npos;
    if (states) {
      EXPECT_EQ(printed_final_sha256(again.output), want) << text << "\n---\n" << again.output;
      EXPECT_FALSE(warned) << again.output;
    } else {
      EXPECT_TRUE(warned) << again.output;
    }
  }
}

// The same command on a store whose experiment is finished (a crash between the last commit and
// the outputs) writes the outputs of the committed run: the same checkpoint, and a summary with
// the same θ, bpb and bytes. Another seed or codec on that store is refused, naming what differs.
TEST(Simulate, AFinishedStoreGivesItsOutputsAndRefusesAnotherConfig) {
  TempDir dir;
  auto flags = [&](const std::string& out, std::vector<std::string> extra) {
    extra.insert(extra.end(),
                 {"--out", dir / (out + ".safetensors"), "--summary-json", dir / (out + ".json")});
    auto a = small_experiment(dir / "run", extra);
    a.insert(a.begin(), "simulate");
    return a;
  };
  auto first = run_atoll(flags("first", {}), dir / "first.log", std::chrono::seconds(240));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto again = run_atoll(flags("again", {}), dir / "again.log", std::chrono::seconds(240));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("the experiment in this store is finished"), std::string::npos)
      << again.output;
  EXPECT_EQ(read_text(dir / "again.safetensors"), read_text(dir / "first.safetensors"));
  const std::string a = read_text(dir / "first.json"), b = read_text(dir / "again.json");
  for (const char* key : {"final_fingerprint", "final_val_bpb", "initial_val_bpb", "bytes_up",
                          "bytes_down", "rounds", "syncs"}) {
    const std::regex field(std::string("\"") + key + "\":(\"[^\"]*\"|[^,}]*)");
    std::smatch in_a, in_b;
    ASSERT_TRUE(std::regex_search(a, in_a, field)) << key << " in " << a;
    ASSERT_TRUE(std::regex_search(b, in_b, field)) << key << " in " << b;
    EXPECT_EQ(in_a[1].str(), in_b[1].str()) << key;
  }
  auto other_flags = flags("other", {"--codec", "int8"});
  *(std::find(other_flags.begin(), other_flags.end(), "--seed") + 1) = "78";
  auto other = run_atoll(other_flags, dir / "other.log", std::chrono::seconds(60));
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("experiment 'demo' in the store was created with another config "
                              "(seed 77 -> 78, train.codec \"int3:256+zstd\" -> \"int8\")"),
            std::string::npos)
      << other.output;
}

TEST(Simulate, RefusesWhatItCannotRun) {
  TempDir dir;
  auto r = run_atoll({"simulate", "--insecure"}, dir / "a.log", std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--insecure has no meaning here"), std::string::npos) << r.output;
  auto n = run_atoll({"simulate", "--nodes", "0"}, dir / "b.log", std::chrono::seconds(30));
  EXPECT_EQ(n.exit_code, 2);
  EXPECT_NE(n.output.find("--nodes 0 is out of range"), std::string::npos) << n.output;
  // An empty algorithm is no algorithm; distillation's codec and teacher file are checked before
  // the teacher trains.
  const std::string teacher = dir / "teacher.safetensors";
  { std::ofstream(teacher) << "checked later"; }
  for (const auto& [args, line] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"simulate", "--algorithm", ""},
            "--algorithm '' must be diloco, distill, hydra or lora"},
           {{"simulate", "--algorithm", "distill", "--codec", "topk:0"},
            "--codec topk:0 must be bf16 or topk:K with K in [1, 1024]"},
           {{"simulate", "--algorithm", "distill", "--teacher-checkpoint", dir / "none"},
            "--teacher-checkpoint " + (dir / "none") + " is not a file"},
           // Flags that would be taken and ignored (the run's bits were those without them).
           {{"simulate", "--algorithm", "distill", "--teacher-checkpoint", teacher, "--teacher-dim",
             "64"},
            "--teacher-dim cannot be combined with --teacher-checkpoint: the teacher is the "
            "checkpoint's model (drop one of them)"},
           {{"simulate", "--merge-alpha", "0.9"},
            "--merge-alpha needs --fragments P > 1 or --overlap T > 0: plain DiLoCo merges no "
            "fragment"}}) {
    auto r = run_atoll(args, dir / "e.log", std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(line), std::string::npos) << r.output;
  }
  // Files written at the end are checked before the run starts.
  auto out = run_atoll({"simulate", "--out", dir / "missing/final.safetensors"}, dir / "c.log",
                       std::chrono::seconds(30));
  EXPECT_EQ(out.exit_code, 2);
  EXPECT_NE(out.output.find("the folder " + (dir / "missing") + " does not exist; create it first"),
            std::string::npos)
      << out.output;
  auto summary = run_atoll({"simulate", "--summary-json", dir.path()}, dir / "d.log",
                           std::chrono::seconds(30));
  EXPECT_EQ(summary.exit_code, 2);
  EXPECT_NE(summary.output.find("--summary-json " + dir.path() + " is a folder; give a file path"),
            std::string::npos)
      << summary.output;
}

}  // namespace
}  // namespace atl::testing
