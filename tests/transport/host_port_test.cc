// The one HOST:PORT parser of every address flag: the port is checked here, not by getaddrinfo,
// which wraps it modulo 65536.
#include "transport/host_port.h"

#include <gtest/gtest.h>

#include "transport/channel.h"

namespace atl::transport {
namespace {

TEST(HostPort, AcceptsHostsAndPortsInRange) {
  auto a = parse_host_port("127.0.0.1:7070", "--listen");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7070);
  auto v6 = parse_host_port("[::1]:65535", "--listen");
  ASSERT_TRUE(v6.ok()) << v6.status().to_string();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 65535);
  EXPECT_TRUE(parse_host_port("localhost:0", "--http").ok());
}

TEST(HostPort, RefusesWrappingPortsAndNamesThePort) {
  for (const std::string bad : {"127.0.0.1:65536", "127.0.0.1:99999", "127.0.0.1:abc", ":-1",
                                "localhost:27072x", "h:", "h:123456"}) {
    auto r = parse_host_port(bad, "--listen");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(), "--listen " + bad + ": the port must be a number in 0-65535");
  }
  auto zero = parse_host_port("10.0.0.5:0", "--coordinator", PortZero::kRefused);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(),
            "--coordinator 10.0.0.5:0: the port must be a number in 1-65535");
}

TEST(HostPort, RefusesAMissingPortOrHost) {
  EXPECT_EQ(parse_host_port("", "--listen").status().message(),
            "--listen is empty: expected HOST:PORT, e.g. 127.0.0.1:7070");
  EXPECT_EQ(parse_host_port("127.0.0.1", "--listen").status().message(),
            "--listen 127.0.0.1: expected HOST:PORT, e.g. 127.0.0.1:7070");
  EXPECT_EQ(parse_host_port(":7070", "--listen").status().message(),
            "--listen :7070: the host is missing: expected HOST:PORT, e.g. 127.0.0.1:7070 "
            "(0.0.0.0:PORT for every address)");
}

// check_can_listen used to hand the port text to getaddrinfo: 99999 was port 34463.
TEST(HostPort, CheckCanListenRefusesAPortOutOfRange) {
  EXPECT_EQ(check_can_listen("127.0.0.1:99999", "--listen").message(),
            "--listen 127.0.0.1:99999: the port must be a number in 0-65535");
}

}  // namespace
}  // namespace atl::transport
