// CappedListener: connections over a cap are closed at accept, and said so in the log.
#include "transport/capped_listener.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/tools/loopback_socket.h"

namespace atl::transport {
namespace {

using namespace std::chrono_literals;

using ::atl::testing::connect_loopback;

// 64 nodes behind one address fill the default cap of 128; the 65th's connections were closed
// with no line at all, and the node blamed the TLS handshake.
TEST(CappedListener, ConnectionsOverTheCapAreSaidOnceInTenSecondsWithTheirCount) {
  auto bound = CappedListener::bind(
      "127.0.0.1:0", {.max_connections = 16, .max_per_address = 1, .evict_idle = false},
      "--listen");
  ASSERT_TRUE(bound.ok()) << bound.status().to_string();
  CappedListener& listener = **bound;
  std::mutex mu;
  std::vector<int> admitted;
  std::vector<std::string> lines;
  listener.attach([&](int fd) {
    std::lock_guard<std::mutex> lk(mu);
    admitted.push_back(fd);
  });
  listener.set_refusal_log([&](const std::string& line) {
    std::lock_guard<std::mutex> lk(mu);
    lines.push_back(line);
  });
  listener.start();
  std::vector<int> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(connect_loopback(listener.port()));
  for (int fd : clients) ASSERT_GE(fd, 0);
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (listener.refused_connections() < 3 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(listener.refused_connections(), 3u);
  {
    std::lock_guard<std::mutex> lk(mu);
    EXPECT_EQ(admitted.size(), 1u);
    ASSERT_EQ(lines.size(), 1u);  // the first refusal at once; the next two within 10 s are not
    EXPECT_EQ(lines[0],
              "connection from 127.0.0.1 to --listen closed at accept: the 1 connections allowed "
              "from one address are open (a node holds 2; more nodes behind one address need a "
              "higher --max-connections-per-address)");
  }
  listener.stop();
  for (int fd : clients) ::close(fd);
  for (int fd : admitted) ::close(fd);
}

}  // namespace
}  // namespace atl::transport
