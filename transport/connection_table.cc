#include "transport/connection_table.h"

namespace atl::transport {

std::map<ConnectionTable::Id, ConnectionTable::Entry>::iterator ConnectionTable::oldest_idle_locked(
    const std::string* address) {
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.idle_since == 0) continue;
    if (address && it->second.address != *address) continue;
    if (best == entries_.end() || it->second.idle_since < best->second.idle_since) best = it;
  }
  return best;
}

void ConnectionTable::erase_locked(std::map<Id, Entry>::iterator it) {
  auto a = per_address_.find(it->second.address);
  if (a != per_address_.end() && --a->second == 0) per_address_.erase(a);
  entries_.erase(it);
}

ConnectionTable::Admission ConnectionTable::admit(const std::string& address, Close close) {
  Admission out;
  std::lock_guard<std::mutex> lk(mu_);
  // Each cap either has room, or frees one place by evicting; otherwise the newcomer is refused
  // and nothing is evicted.
  auto over_address = [&] {
    if (caps_.max_per_address == 0) return false;
    auto a = per_address_.find(address);
    return a != per_address_.end() && a->second >= caps_.max_per_address;
  };
  std::vector<std::map<Id, Entry>::iterator> victims;
  if (over_address()) {
    auto v = caps_.evict_idle ? oldest_idle_locked(&address) : entries_.end();
    if (v == entries_.end()) {
      ++refusals_;
      return out;
    }
    victims.push_back(v);
  }
  if (entries_.size() - victims.size() >= caps_.max_connections) {
    // Over the total cap (and nothing freed by the per-address cap): the longest idle anywhere.
    auto v = caps_.evict_idle ? oldest_idle_locked(nullptr) : entries_.end();
    if (v == entries_.end()) {
      ++refusals_;
      return out;
    }
    victims.push_back(v);
  }
  for (auto v : victims) {
    out.evicted.push_back(std::move(v->second.close));
    erase_locked(v);
    ++evictions_;
  }
  out.id = next_id_++;
  entries_.emplace(out.id, Entry{address, std::move(close), next_idle_seq_++});
  ++per_address_[address];
  return out;
}

void ConnectionTable::set_idle(Id id, bool idle) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.idle_since = idle ? next_idle_seq_++ : 0;
}

void ConnectionTable::remove(Id id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(id);
  if (it != entries_.end()) erase_locked(it);
}

size_t ConnectionTable::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return entries_.size();
}

size_t ConnectionTable::count(const std::string& address) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto a = per_address_.find(address);
  return a == per_address_.end() ? 0 : a->second;
}

uint64_t ConnectionTable::evictions() const {
  std::lock_guard<std::mutex> lk(mu_);
  return evictions_;
}

uint64_t ConnectionTable::refusals() const {
  std::lock_guard<std::mutex> lk(mu_);
  return refusals_;
}

}  // namespace atl::transport
