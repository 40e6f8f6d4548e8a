// A TCP listener of our own in front of a gRPC server, for what gRPC 1.51 lacks: a cap on open
// connections. It accepts on HOST:PORT, admits each connection into a ConnectionTable (at most
// caps.max_connections in all and caps.max_per_address from one address; over a cap a new
// connection is closed at once, before any TLS byte) and hands it to the server through gRPC's
// external connection acceptor, which runs the usual TLS handshake (with the server's handshake
// timeout) and HTTP/2 on it. The bulk lane (transport/bulk_lane.h) takes its connections the
// same way through a function of its own.
//
// The server owns a connection once handed over and does not say when it closes it. The listener keeps
// each one's descriptor and socket inode and counts it open while that descriptor still names
// that socket (a closed descriptor, or one reused for another socket, has a different inode or
// none); the count is refreshed whenever a cap would refuse a connection, so the cap counts
// exactly the connections gRPC still holds. See docs/decisions.md, "Connection limits".
#pragma once

#include <grpcpp/server_builder.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/status.h"
#include "transport/connection_table.h"

namespace atl::transport {

class CappedListener {
 public:
  // Binds and listens on `listen` (HOST:PORT; port 0 = a free port; a wildcard host listens on
  // IPv6 and IPv4 where the machine has both). `flag` names the option in error lines.
  // caps.evict_idle is ignored: gRPC's connections cannot be told apart, so over a cap the new
  // connection is refused.
  static StatusOr<std::unique_ptr<CappedListener>> bind(const std::string& listen,
                                                        ConnectionCaps caps,
                                                        const std::string& flag);
  ~CappedListener();  // stop()
  CappedListener(const CappedListener&) = delete;
  CappedListener& operator=(const CappedListener&) = delete;

  int port() const { return port_; }
  // Registers the hand-over with a server under construction (before BuildAndStart).
  void attach(grpc::ServerBuilder& builder, std::shared_ptr<grpc::ServerCredentials> credentials);
  // Or: hands each admitted connection (a non-blocking descriptor, TCP_NODELAY set) to
  // `hand_over`, which owns it from then on; called on the accept thread, so it must not block.
  void attach(std::function<void(int fd)> hand_over);
  // Starts accepting (after BuildAndStart; connections before then would be closed by gRPC).
  void start();
  // Stops accepting and closes the listening sockets; connections already handed over stay with
  // the server. Idempotent.
  void stop();

  // Connections handed over that gRPC still holds open (refreshed now).
  size_t open_connections();
  // Connections closed at once because a cap was reached, since the start.
  uint64_t refused_connections() const { return refused_.load(); }
  // Where to say that connections are closed at a cap: the first one at once, then at most one
  // line per 10 s with the count since the previous line (the metrics count every one). Set
  // before start().
  void set_refusal_log(std::function<void(const std::string&)> log) {
    refusal_log_ = std::move(log);
  }

 private:
  CappedListener(ConnectionCaps caps, std::string flag) : table_(caps), flag_(std::move(flag)) {}
  // One line about the refusal of a connection from `address` (accept thread, under mu_).
  void say_refused(const std::string& address);
  void accept_loop();
  void accept_one(int listener_fd);
  // Forgets the handed-over connections gRPC has closed.
  void sweep();

  struct HandedOver {
    int fd = -1;
    uint64_t inode = 0;
  };
  ConnectionTable table_;
  std::vector<int> listeners_;
  int port_ = 0;
  int wake_fd_ = -1;  // eventfd: stop() wakes the accept loop
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::function<void(int fd)> hand_over_;
  std::thread thread_;
  std::mutex mu_;  // handed_ (the accept loop and open_connections())
  std::map<ConnectionTable::Id, HandedOver> handed_;
  std::atomic<uint64_t> refused_{0};
  bool stopped_ = false;
  std::string flag_;  // the listen option, for lines
  std::function<void(const std::string&)> refusal_log_;
  uint64_t refused_unsaid_ = 0;  // refusals since the last line
  std::optional<std::chrono::steady_clock::time_point> last_refusal_line_;
};

}  // namespace atl::transport
