// A full disk pauses the experiment and it resumes by itself when space is freed: the
// coordinator's store on an 8 MiB tmpfs is filled up mid-run, then emptied again. The
// experiment never fails, finishes every round, and commits the same θ in every round as a run
// on a roomy disk (the round that could not be committed is redone from the nodes' snapshots).
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/integration/cli_test_util.h"
#include "tests/integration/committed_rounds.h"
#include "tests/integration/process_cluster.h"

namespace atl::testing {
namespace {

constexpr int kRounds = 30;

// A tmpfs of `megabytes` mounted at `dir` for the object's lifetime.
class SmallTmpfs {
 public:
  SmallTmpfs(const std::string& dir, int megabytes) : dir_(dir) {
    std::filesystem::create_directories(dir);
    const std::string size = "size=" + std::to_string(megabytes) + "m";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, size.c_str()) == 0)
      mounted_ = true;
    else
      error_ = std::strerror(errno);
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

// Appends to `path` until the file system has no space left; returns the bytes written.
uint64_t fill_up(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) return 0;
  std::vector<char> chunk(64 * 1024, 'x');
  uint64_t written = 0;
  for (;;) {
    const size_t n = std::fwrite(chunk.data(), 1, chunk.size(), f);
    written += n;
    if (n < chunk.size() || std::fflush(f) != 0) break;
  }
  std::fclose(f);
  return written;
}

std::string one_node_config() {
  return config_toml(kRounds, 1, 60, 42, 3, 5, 0.3);
}

// The "round N committed" lines of a coordinator log that come after a "store … is full" line
// and before the "can be written again" line that ends that pause.
std::vector<std::string> rounds_committed_while_store_full(const std::string& log) {
  static const std::regex full("^store at [^ ]+ is full: ");
  static const std::regex writable("^store at [^ ]+ can be written again");
  static const std::regex committed("^round \\d+ committed");
  std::vector<std::string> out;
  bool paused = false;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_search(line, full)) paused = true;
    if (std::regex_search(line, writable)) paused = false;
    if (paused && std::regex_search(line, committed)) out.push_back(line);
  }
  return out;
}

TEST(CoordinatorStore, FullDiskPausesTheExperimentAndItResumesWhenSpaceIsFreed) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "mounting the small tmpfs this test fills up needs root; run it as root";
  std::vector<std::string> reference;
  {
    Cluster roomy;
    roomy.make_ca({"node-1"});
    roomy.start_coordinator(one_node_config());
    roomy.start_node("node-1", "brown:a");
    std::string log;
    roomy.run_to_completion(120s, &log);
    if (::testing::Test::HasFatalFailure()) return;
    reference = committed_fingerprints(roomy.dir / "store", "itest", kRounds);
  }

  Cluster c;
  c.make_ca({"node-1"});
  SmallTmpfs disk(c.dir / "store", 8);
  if (!disk.mounted())
    GTEST_SKIP() << "cannot mount an 8 MiB tmpfs at " << c.dir / "store"
                 << " (" << disk.error() << "); this test needs CAP_SYS_ADMIN";
  c.start_coordinator(one_node_config());
  c.start_node("node-1", "brown:a");
  std::string text;
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log", std::regex("round 3 committed"), 60s, &text))
      << text;
  const std::string filler = c.dir / "store/filler";
  ASSERT_GT(fill_up(filler), 0u);

  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log",
                           std::regex("store at [^ ]+ is full: .*; the experiment is paused and "
                                      "resumes once [0-9.]+ MiB are free there"),
                           60s, &text))
      << text;
  EXPECT_TRUE(c.coordinator.running()) << text;
  // Paused while the disk stays full: for 2 s the test takes whatever space appears. The
  // coordinator must never commit a round between a "store is full" line and the "can be
  // written again" line after it, and must not resume at all while there is no room for a
  // commit: a small probe write used to get through, the experiment resumed, the next commit
  // failed, and every site redid the round (36 times a minute on a 2 MB tmpfs).
  const std::string topup = c.dir / "store/filler-2";
  for (auto until = std::chrono::steady_clock::now() + 2s; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(50ms))
    fill_up(topup);
  text = read_text(c.dir / "coordinator.log");
  EXPECT_EQ(rounds_committed_while_store_full(text), std::vector<std::string>{}) << text;
  EXPECT_FALSE(std::regex_search(text, std::regex("can be written again"))) << text;
  EXPECT_LT(committed_rounds(text).size(), static_cast<size_t>(kRounds)) << text;
  EXPECT_TRUE(c.coordinator.running()) << text;
  std::filesystem::remove(topup);
  std::filesystem::remove(filler);
  ASSERT_TRUE(wait_for_log(c.dir / "coordinator.log",
                           std::regex("store at [^ ]+ can be written again: the experiment "
                                      "resumes at round \\d+"),
                           60s, &text))
      << text;
  std::string log;
  c.run_to_completion(120s, &log);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_FALSE(std::regex_search(log, std::regex("(^|\n)(failed|state: failed)"))) << log;
  EXPECT_EQ(committed_fingerprints(c.dir / "store", "itest", kRounds), reference) << log;
}

}  // namespace
}  // namespace atl::testing
