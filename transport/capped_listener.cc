#include "transport/capped_listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "transport/channel.h"
#include "transport/host_port.h"

namespace atl::transport {
namespace {

// A peer that vanished (its address changed, its link is down for good) must not hold a
// connection, a stream handler or the server's shutdown for TCP's ~15 minutes of
// retransmissions: data unacknowledged for kDeadPeerTimeoutSeconds aborts the connection
// (TCP_USER_TIMEOUT; a slow but live link acknowledges within seconds), and an idle one is
// probed after 30 s, every 10 s, 3 times. See docs/protocol.md, "Ports and reconnects".
constexpr int kDeadPeerTimeoutSeconds = 60;

void set_dead_peer_timeouts(int fd) {
  const int on = 1, idle_s = 30, interval_s = 10, probes = 3;
  const unsigned user_timeout_ms = kDeadPeerTimeoutSeconds * 1000;
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

}  // namespace
}  // namespace atl::transport

namespace atl::transport {

namespace {

// The inode of the socket `fd` names now; 0 when it names none.
uint64_t socket_inode(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// A listening socket on `addr`, or -errno.
int listen_on(const sockaddr* addr, socklen_t len, bool dual_stack) {
  const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  const int one = 1, zero = 0;
  // SO_REUSEADDR (connections in TIME_WAIT do not block a restart) but not SO_REUSEPORT: the
  // port is this process's alone (transport::apply_exclusive_port).
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (addr->sa_family == AF_INET6)
    (void)::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual_stack ? &zero : &one, sizeof(int));
  if (::bind(fd, addr, len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

void set_port(sockaddr* addr, int port) {
  if (addr->sa_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(static_cast<uint16_t>(port));
  else
    reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(static_cast<uint16_t>(port));
}

// The peer's IP address as text (an IPv4-mapped IPv6 address as IPv4).
std::string peer_address(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, text, sizeof(text));
    return text;
  }
  const in6_addr& a6 = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&a6)) {
    ::inet_ntop(AF_INET, &a6.s6_addr[12], text, sizeof(text));
    return text;
  }
  ::inet_ntop(AF_INET6, &a6, text, sizeof(text));
  return text;
}

// Why binding failed although check_can_listen passed a moment before (another process took the
// port in between): its one-line explanation when it now fails, else the errno.
Status bind_failure(const std::string& listen, const std::string& flag, int err) {
  Status why = check_can_listen(listen, flag);
  return why.ok() ? Unavailable("cannot listen on " + listen + ": " + std::strerror(err)) : why;
}

}  // namespace

StatusOr<std::unique_ptr<CappedListener>> CappedListener::bind(const std::string& listen,
                                                               ConnectionCaps caps,
                                                               const std::string& flag) {
  if (caps.max_connections < 1)
    return InvalidArgument(flag + ": the connection cap must be at least 1");
  caps.evict_idle = false;
  ATOLL_ASSIGN_OR_RETURN(const HostPort hp, parse_host_port(listen, flag));
  ATOLL_RETURN_IF_ERROR(check_can_listen(listen, flag));
  const std::string& host = hp.host;
  const int port = hp.port;
  std::unique_ptr<CappedListener> l(new CappedListener(caps, flag));
  const bool wildcard = host == "0.0.0.0" || host == "::";
  if (wildcard) {
    // Like gRPC: one dual-stack IPv6 socket, or IPv4 alone on a machine without IPv6.
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    set_port(reinterpret_cast<sockaddr*>(&any6), port);
    int fd = listen_on(reinterpret_cast<sockaddr*>(&any6), sizeof(any6), true);
    if (fd < 0 && host != "::") {
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      set_port(reinterpret_cast<sockaddr*>(&any4), port);
      fd = listen_on(reinterpret_cast<sockaddr*>(&any4), sizeof(any4), false);
    }
    if (fd < 0) return bind_failure(listen, flag, -fd);
    l->listeners_.push_back(fd);
  } else {
    // Every address of the host (localhost: 127.0.0.1 and ::1), on the port of the first.
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
        found == nullptr)
      return InvalidArgument(flag + " " + listen + ": '" + host +
                             "' is not an address or a known host name of this machine");
    int first_err = 0;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      if (l->port_ != 0) set_port(a->ai_addr, l->port_);
      const int fd = listen_on(a->ai_addr, a->ai_addrlen, false);
      if (fd < 0) {
        if (first_err == 0) first_err = -fd;
        continue;
      }
      l->listeners_.push_back(fd);
      if (l->port_ == 0) l->port_ = bound_port(fd);
    }
    ::freeaddrinfo(found);
    if (l->listeners_.empty()) return bind_failure(listen, flag, first_err);
  }
  if (l->port_ == 0) l->port_ = bound_port(l->listeners_.front());
  l->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->wake_fd_ < 0) return Internal(std::string("eventfd: ") + std::strerror(errno));
  return l;
}

void CappedListener::attach(grpc::ServerBuilder& builder,
                            std::shared_ptr<grpc::ServerCredentials> credentials) {
  acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      std::move(credentials));
}

void CappedListener::attach(std::function<void(int fd)> hand_over) {
  hand_over_ = std::move(hand_over);
}

void CappedListener::start() {
  thread_ = std::thread([this] { accept_loop(); });
}

void CappedListener::accept_loop() {
  std::vector<pollfd> fds;
  for (int fd : listeners_) fds.push_back({fd, POLLIN, 0});
  fds.push_back({wake_fd_, POLLIN, 0});
  for (;;) {
    for (auto& p : fds) p.revents = 0;
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds.back().revents != 0) return;  // stop()
    for (size_t i = 0; i + 1 < fds.size(); ++i)
      if (fds[i].revents & POLLIN) accept_one(fds[i].fd);
  }
}

void CappedListener::accept_one(int listener_fd) {
  for (;;) {  // everything pending on this listener
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    // Non-blocking: gRPC's endpoint expects it of a handed-over descriptor.
    const int fd = ::accept4(listener_fd, reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // The process is out of descriptors (or memory): the pending connections stay in the
      // kernel's backlog; wait 100 ms (or for stop(), whose wake-up stays readable for the
      // accept loop) instead of spinning on a listener that stays readable.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pollfd wake{wake_fd_, POLLIN, 0};
        (void)::poll(&wake, 1, 100);
      }
      return;  // else EAGAIN, or an error of one connection (it is gone either way)
    }
    const std::string address = peer_address(peer);
    std::lock_guard<std::mutex> lk(mu_);
    const ConnectionCaps& caps = table_.caps();
    if (table_.size() >= caps.max_connections ||
        (caps.max_per_address != 0 && table_.count(address) >= caps.max_per_address))
      sweep();  // at a cap: count only what gRPC still holds
    const auto admission = table_.admit(address, nullptr);
    if (admission.id == 0) {
      ++refused_;
      say_refused(address);
      ::close(fd);
      continue;
    }
    const int one = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    set_dead_peer_timeouts(fd);
    handed_[admission.id] = {fd, socket_inode(fd)};
    if (hand_over_) {
      hand_over_(fd);  // the bulk lane owns fd from here
      continue;
    }
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
    p.listener_fd = listener_fd;
    p.fd = fd;
    acceptor_->HandleNewConnection(&p);  // gRPC owns fd from here
  }
}

void CappedListener::say_refused(const std::string& address) {
  ++refused_unsaid_;
  if (!refusal_log_) return;
  const auto now = std::chrono::steady_clock::now();
  if (last_refusal_line_ && now - *last_refusal_line_ < std::chrono::seconds(10)) return;
  const ConnectionCaps& caps = table_.caps();
  const bool per_address = table_.size() < caps.max_connections;
  std::string line = "connection from " + address + " to " + flag_ + " closed at accept: ";
  line += per_address ? "the " + std::to_string(caps.max_per_address) +
                            " connections allowed from one address are open (a node holds 2; "
                            "more nodes behind one address need a higher "
                            "--max-connections-per-address)"
                      : "all " + std::to_string(caps.max_connections) +
                            " connections allowed are open (--max-connections)";
  if (last_refusal_line_)
    line += "; " + std::to_string(refused_unsaid_) + " closed so since the last such line";
  refusal_log_(line);
  refused_unsaid_ = 0;
  last_refusal_line_ = now;
}

void CappedListener::sweep() {
  for (auto it = handed_.begin(); it != handed_.end();) {
    if (socket_inode(it->second.fd) != it->second.inode) {
      table_.remove(it->first);
      it = handed_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t CappedListener::open_connections() {
  std::lock_guard<std::mutex> lk(mu_);
  sweep();
  return handed_.size();
}

void CappedListener::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (int fd : listeners_) ::close(fd);
  listeners_.clear();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
}

CappedListener::~CappedListener() {
  stop();
}

}  // namespace atl::transport
