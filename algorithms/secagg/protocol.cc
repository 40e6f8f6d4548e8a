#include "algorithms/secagg/protocol.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace atl::algorithms::secagg {
namespace {

// Sealed share message: from (4) ‖ to (4) ‖ share of s_sk (32) ‖ share of b (32); the AAD binds
// it to the round and the two indices.
constexpr size_t kShareMessageBytes = 4 + 4 + 32 + 32;

std::string share_aad(uint64_t round, uint32_t from, uint32_t to) {
  return "atoll secagg share r=" + std::to_string(round) + " from=" + std::to_string(from) +
         " to=" + std::to_string(to);
}

void put_u32(std::string& s, uint32_t v) {
  for (int k = 0; k < 4; ++k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}
uint32_t get_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) v |= uint32_t{static_cast<uint8_t>(s[at + k])} << (8 * k);
  return v;
}

std::string list_text(const std::vector<uint32_t>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) {
    if (k) s += ',';
    s += std::to_string(v[k]);
  }
  s += ']';
  return s;
}

}  // namespace

std::string share_key_purpose(uint64_t round) {
  return "atoll secagg share key r=" + std::to_string(round);
}
std::string mask_seed_purpose(uint64_t round) {
  return "atoll secagg mask seed r=" + std::to_string(round);
}

Status add_prg(std::span<uint32_t> y, const Key32& seed, int sign) {
  std::vector<uint32_t> stream(y.size());
  ATOLL_RETURN_IF_ERROR(expand_mask(seed, stream));
  if (sign >= 0)
    for (size_t k = 0; k < y.size(); ++k) y[k] += stream[k];
  else
    for (size_t k = 0; k < y.size(); ++k) y[k] -= stream[k];
  return Status::Ok();
}

StatusOr<SiteSession> SiteSession::start(uint64_t round) {
  SiteSession s(round);
  ATOLL_ASSIGN_OR_RETURN(s.cipher_, generate_key_pair());
  ATOLL_ASSIGN_OR_RETURN(s.mask_, generate_key_pair());
  ATOLL_ASSIGN_OR_RETURN(s.self_seed_, random_key());
  s.advertised_ = {s.cipher_.public_key, s.mask_.public_key};
  return s;
}

StatusOr<std::map<uint32_t, std::string>> SiteSession::share_keys(uint32_t self,
                                                                  const Roster& roster,
                                                                  uint32_t threshold) {
  auto me = roster.find(self);
  if (me == roster.end() || me->second.cipher_public != advertised_.cipher_public ||
      me->second.mask_public != advertised_.mask_public)
    return FailedPrecondition("the round's roster does not list this site's keys at index " +
                              std::to_string(self));
  if (roster.empty() || roster.begin()->first < 1 || roster.rbegin()->first > 255)
    return InvalidArgument("roster indices must lie in 1..255");
  if (threshold < 1 || threshold > roster.size())
    return FailedPrecondition("secagg threshold " + std::to_string(threshold) + " exceeds the " +
                              std::to_string(roster.size()) + " sites that advertised keys");
  self_ = self;
  roster_ = roster;
  // Shares at x = 1..max index; only the roster's x are sent.
  const uint32_t count = roster.rbegin()->first;
  ATOLL_ASSIGN_OR_RETURN(std::vector<Share> key_shares,
                         shamir_split(key_bytes(mask_.private_key), threshold, count));
  ATOLL_ASSIGN_OR_RETURN(std::vector<Share> seed_shares,
                         shamir_split(key_bytes(self_seed_), threshold, count));
  std::map<uint32_t, std::string> out;
  for (const auto& [j, keys] : roster) {
    const std::string& key_share = key_shares[j - 1].y;
    const std::string& seed_share = seed_shares[j - 1].y;
    if (j == self) {
      held_key_shares_[self] = key_share;
      held_seed_shares_[self] = seed_share;
      continue;
    }
    std::string plain;
    put_u32(plain, self);
    put_u32(plain, j);
    plain += key_share;
    plain += seed_share;
    ATOLL_ASSIGN_OR_RETURN(Key32 k, agree(cipher_.private_key, keys.cipher_public,
                                          share_key_purpose(round_)));
    ATOLL_ASSIGN_OR_RETURN(out[j], seal(k, plain, share_aad(round_, self, j)));
  }
  return out;
}

Status SiteSession::receive_shares(const std::map<uint32_t, std::string>& sealed) {
  if (self_ == 0) return FailedPrecondition("receive_shares before share_keys");
  for (const auto& [from, message] : sealed) {
    auto peer = roster_.find(from);
    if (peer == roster_.end() || from == self_)
      return InvalidArgument("shares from site " + std::to_string(from) +
                             ", which is not another member of the round's roster");
    ATOLL_ASSIGN_OR_RETURN(Key32 k, agree(cipher_.private_key, peer->second.cipher_public,
                                          share_key_purpose(round_)));
    auto plain = open(k, message, share_aad(round_, from, self_));
    if (!plain.ok())
      return DataLoss("shares from site " + std::to_string(from) + ": " + plain.status().message());
    if (plain->size() != kShareMessageBytes || get_u32(*plain, 0) != from ||
        get_u32(*plain, 4) != self_)
      return DataLoss("shares from site " + std::to_string(from) + " are malformed");
    held_key_shares_[from] = plain->substr(8, 32);
    held_seed_shares_[from] = plain->substr(40, 32);
  }
  return Status::Ok();
}

std::vector<uint32_t> SiteSession::shared_with() const {
  std::vector<uint32_t> v;
  for (const auto& kv : held_seed_shares_) v.push_back(kv.first);
  return v;
}

Status SiteSession::mask(std::span<uint32_t> q) const {
  if (self_ == 0) return FailedPrecondition("mask before share_keys");
  ATOLL_RETURN_IF_ERROR(add_prg(q, self_seed_, +1));
  for (const auto& [j, share] : held_seed_shares_) {
    if (j == self_) continue;
    ATOLL_ASSIGN_OR_RETURN(Key32 s_ij, agree(mask_.private_key, roster_.at(j).mask_public,
                                             mask_seed_purpose(round_)));
    ATOLL_RETURN_IF_ERROR(add_prg(q, s_ij, j > self_ ? +1 : -1));
  }
  return Status::Ok();
}

StatusOr<Reveal> SiteSession::reveal(const std::vector<uint32_t>& survivors,
                                     const std::vector<uint32_t>& dropped) {
  if (answered_) {
    if (answered_->first != survivors || answered_->second != dropped)
      return FailedPrecondition("refusing to unmask round " + std::to_string(round_) +
                                " a second time with other lists (survivors " +
                                list_text(survivors) + ", dropped " + list_text(dropped) + ")");
  }
  std::set<uint32_t> all;
  for (uint32_t j : survivors) all.insert(j);
  for (uint32_t j : dropped)
    if (!all.insert(j).second)
      return FailedPrecondition("refusing to unmask: site " + std::to_string(j) +
                                " is listed both as survivor and as dropped");
  if (std::find(survivors.begin(), survivors.end(), self_) == survivors.end())
    return FailedPrecondition("refusing to unmask: this site is not among the survivors");
  const std::vector<uint32_t> u2 = shared_with();
  if (std::vector<uint32_t>(all.begin(), all.end()) != u2)
    return FailedPrecondition("refusing to unmask: survivors " + list_text(survivors) +
                              " and dropped " + list_text(dropped) +
                              " are not the sites this site shared keys with " + list_text(u2));
  Reveal r;
  for (uint32_t j : survivors) r.self_seed_shares[j] = held_seed_shares_.at(j);
  for (uint32_t j : dropped) r.mask_key_shares[j] = held_key_shares_.at(j);
  answered_.emplace(survivors, dropped);
  return r;
}

StatusOr<std::vector<uint32_t>> unmask(UnmaskInput in) {
  const std::string round = "round " + std::to_string(in.round);
  std::set<uint32_t> dropped(in.dropped.begin(), in.dropped.end());
  for (uint32_t s : in.survivors)
    if (dropped.count(s))
      return FailedPrecondition(round + ": refusing to reconstruct both secrets of site " +
                                std::to_string(s) + " (listed as survivor and dropped)");
  if (in.reveals.size() < in.threshold)
    return FailedPrecondition(round + ": " + std::to_string(in.reveals.size()) +
                              " sites revealed shares, the threshold is " +
                              std::to_string(in.threshold));
  for (const auto& [from, r] : in.reveals)
    for (const auto& kv : r.self_seed_shares)
      if (r.mask_key_shares.count(kv.first))
        return FailedPrecondition(round + ": site " + std::to_string(from) +
                                  " revealed both secrets' shares of site " +
                                  std::to_string(kv.first) + "; refusing them");
  // The first `threshold` revealing sites (ascending index) reconstruct each secret.
  auto shares_of = [&](uint32_t owner, bool seed) -> StatusOr<std::vector<Share>> {
    std::vector<Share> shares;
    for (const auto& [from, r] : in.reveals) {
      const auto& m = seed ? r.self_seed_shares : r.mask_key_shares;
      auto it = m.find(owner);
      if (it == m.end() || it->second.size() != 32) continue;
      shares.push_back({static_cast<uint8_t>(from), it->second});
      if (shares.size() == in.threshold) return shares;
    }
    return FailedPrecondition(round + ": only " + std::to_string(shares.size()) + " shares of " +
                              (seed ? "the self-mask seed" : "the mask key") + " of site " +
                              std::to_string(owner) + ", the threshold is " +
                              std::to_string(in.threshold));
  };
  std::vector<uint32_t> sum = std::move(in.masked_sum);
  for (uint32_t s : in.survivors) {
    ATOLL_ASSIGN_OR_RETURN(std::vector<Share> shares, shares_of(s, true));
    ATOLL_ASSIGN_OR_RETURN(std::string b, shamir_combine(shares));
    ATOLL_ASSIGN_OR_RETURN(Key32 seed, key_from_bytes(b, "self-mask seed"));
    ATOLL_RETURN_IF_ERROR(add_prg(sum, seed, -1));
  }
  for (uint32_t d : in.dropped) {
    ATOLL_ASSIGN_OR_RETURN(std::vector<Share> shares, shares_of(d, false));
    ATOLL_ASSIGN_OR_RETURN(std::string sk_bytes, shamir_combine(shares));
    ATOLL_ASSIGN_OR_RETURN(Key32 sk, key_from_bytes(sk_bytes, "mask key"));
    ATOLL_ASSIGN_OR_RETURN(Key32 pk, public_key_of(sk));
    auto advertised = in.mask_public.find(d);
    if (advertised == in.mask_public.end() || advertised->second != pk)
      return DataLoss(round + ": the mask key reconstructed for dropped site " +
                      std::to_string(d) + " does not match its advertised public key (a wrong share)");
    for (uint32_t s : in.survivors) {
      auto pk_s = in.mask_public.find(s);
      if (pk_s == in.mask_public.end())
        return InvalidArgument(round + ": no mask public key for survivor " + std::to_string(s));
      ATOLL_ASSIGN_OR_RETURN(Key32 seed, agree(sk, pk_s->second, mask_seed_purpose(in.round)));
      // Survivor s added +PRG(s_sd) when d > s and −PRG(s_sd) when d < s: take it back out.
      ATOLL_RETURN_IF_ERROR(add_prg(sum, seed, d > s ? -1 : +1));
    }
  }
  return sum;
}

}  // namespace atl::algorithms::secagg
