// The open connections of one server, by peer address, for its connection caps: at most
// `max_connections` in all and `max_per_address` from one address. A new connection over a cap
// takes the place of the connection that has been idle longest (in that address for the
// per-address cap, anywhere for the total), so that idle connections, which is what a flood
// without credentials holds, cannot lock out a client that sends a request; when nothing is idle
// the new connection is refused. What "idle" means is the server's: the dashboard counts a
// connection idle from accept until its request headers are in, and again between keep-alive
// requests. A server that cannot tell sets `evict_idle` false and only refuses.
// Thread-safe. Admission is O(open connections) when a cap is reached, O(log n) otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace atl::transport {

struct ConnectionCaps {
  uint32_t max_connections = 256;  // ≥ 1
  uint32_t max_per_address = 64;   // 0 = no per-address cap
  bool evict_idle = true;          // false: over a cap, refuse the new connection
};

class ConnectionTable {
 public:
  using Id = uint64_t;  // 0 = not admitted
  // Closes an evicted connection; called outside the table's lock, from admit()'s caller.
  using Close = std::function<void()>;

  struct Admission {
    Id id = 0;                   // 0: refused (every connection under the cap is busy)
    std::vector<Close> evicted;  // run these: the connections this one replaces
  };

  explicit ConnectionTable(ConnectionCaps caps) : caps_(caps) {}

  // A new connection from `address` (an IP address as text), idle until set_idle(id, false).
  // The entries of evicted connections are gone from the table when this returns.
  Admission admit(const std::string& address, Close close);
  // Marks a connection idle (evictable, from now: the longest idle goes first) or busy.
  void set_idle(Id id, bool idle);
  // The connection closed. Unknown ids (evicted, or 0) are ignored.
  void remove(Id id);

  size_t size() const;
  size_t count(const std::string& address) const;
  // Connections evicted and admissions refused since the start.
  uint64_t evictions() const;
  uint64_t refusals() const;
  const ConnectionCaps& caps() const { return caps_; }

 private:
  struct Entry {
    std::string address;
    Close close;
    uint64_t idle_since = 0;  // sequence number when it became idle; 0 = busy
  };
  // The longest idle entry (of `address`, or of any when empty); end() when none is idle.
  std::map<Id, Entry>::iterator oldest_idle_locked(const std::string* address);
  void erase_locked(std::map<Id, Entry>::iterator it);

  const ConnectionCaps caps_;
  mutable std::mutex mu_;
  std::map<Id, Entry> entries_;
  std::map<std::string, uint32_t> per_address_;
  Id next_id_ = 1;
  uint64_t next_idle_seq_ = 1;
  uint64_t evictions_ = 0;
  uint64_t refusals_ = 0;
};

}  // namespace atl::transport
