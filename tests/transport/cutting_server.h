// A TCP server that accepts, reads 10 bytes and hangs up, again and again, on an ephemeral
// loopback port: what a client sees when a coordinator is killed mid-handshake, or when a proxy
// or a port scanner holds the port. Its thread stops (within 0.1 s) when the object dies.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

namespace atl::testing {

class CuttingServer {
 public:
  CuttingServer() {
    // Close-on-exec: processes the test starts must not inherit (and keep holding) the port.
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    timeval tv{0, 100000};  // accept() wakes every 0.1 s to see the stop flag
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    // Inherited by the accepted connections: once this server is gone, a server that also sets
    // it (gRPC does) can bind the port while they linger in FIN_WAIT or TIME_WAIT.
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        char buf[10];
        (void)::recv(c, buf, sizeof(buf), MSG_WAITALL);
        ::close(c);
        accepted_.fetch_add(1);
      }
    });
  }
  ~CuttingServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  bool listening() const { return port_ > 0; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_.load(); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

}  // namespace atl::testing
