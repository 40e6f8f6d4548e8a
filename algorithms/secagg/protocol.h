// Secure aggregation of one round (Bonawitz et al. 2017, "Practical Secure Aggregation"; the
// semantics of Flower's SecAgg+ workflow), the math of both ends without any transport. Sites
// have indices 1..255 in the round (their Shamir x). Stages:
//   1. advertise  each site draws two X25519 key pairs (c: encrypts shares, s: mask agreement)
//                 and a self-mask seed b; it sends (c_pk, s_pk). The coordinator fixes the
//                 roster U1 of sites that advertised.
//   2. share      site i splits b_i and s_sk_i into t-of-|U1| Shamir shares and seals share j
//                 for site j with AES-256-GCM under HKDF(X25519(c_sk_i, c_pk_j)). The
//                 coordinator forwards them; U2 = sites that shared.
//   3. masked     site i sends y_i = q_i + PRG(b_i) + Σ_{j∈U2, j>i} PRG(s_ij)
//                 − Σ_{j∈U2, j<i} PRG(s_ij) mod 2^32, s_ij = HKDF(X25519(s_sk_i, s_pk_j)).
//                 The coordinator sums what arrives: U3 ⊆ U2.
//   4. unmask     each responding site of U3 reveals its share of b_j for every j ∈ U3 and of
//                 s_sk_j for every j ∈ U2 \ U3, never both for one j. With t responses the
//                 coordinator removes PRG(b_j) of the survivors and the pairwise masks the
//                 survivors share with the dropped sites: Σ_{i∈U3} q_i remains.
// Pairwise masks between two survivors cancel in the sum. One y_i alone is q_i plus PRG(b_i),
// a one-time pad the coordinator never learns while i survives (it needs t shares of b_i).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algorithms/secagg/crypto.h"
#include "algorithms/secagg/shamir.h"
#include "kernels/core/status.h"

namespace atl::algorithms::secagg {

// The public keys a site advertises for one round.
struct AdvertisedKeys {
  Key32 cipher_public{};  // c_pk: shares sent to this site are sealed for it
  Key32 mask_public{};    // s_pk: pairwise mask seeds
};
// The round's roster, by site index (1..255).
using Roster = std::map<uint32_t, AdvertisedKeys>;

// What one site reveals in the unmask stage, by the index of the site each share belongs to;
// every share is the revealing site's (x = its index).
struct Reveal {
  std::map<uint32_t, std::string> self_seed_shares;  // of b_j, j a survivor
  std::map<uint32_t, std::string> mask_key_shares;   // of s_sk_j, j dropped after sharing
};

// The domain-separation strings of the two key agreements, bound to the round.
std::string share_key_purpose(uint64_t round);
std::string mask_seed_purpose(uint64_t round);

// y ← y + sign · PRG(seed) mod 2^32 (sign ±1).
Status add_prg(std::span<uint32_t> y, const Key32& seed, int sign);

// One site's side of one round. Keys live in memory only, for the round.
class SiteSession {
 public:
  // Fresh key pairs and self-mask seed for `round`.
  static StatusOr<SiteSession> start(uint64_t round);

  const AdvertisedKeys& keys() const { return advertised_; }
  uint64_t round() const { return round_; }

  // Stage 2. `roster` is U1 with this site at `self`; threshold t ≤ |U1|. Returns the sealed
  // message for every other member, by its index.
  StatusOr<std::map<uint32_t, std::string>> share_keys(uint32_t self, const Roster& roster,
                                                       uint32_t threshold);
  // The sealed messages sent to this site by the other members of U2, by sender index: opened
  // and kept; U2 = the senders and this site. Every sender must be on the roster.
  Status receive_shares(const std::map<uint32_t, std::string>& sealed);
  // Stage 3: q (the quantized update) becomes y in place.
  Status mask(std::span<uint32_t> q) const;
  // Stage 4 for the coordinator's lists (U3 and U2 \ U3). Refuses lists that overlap, name a
  // site outside U2, leave one out, or differ from the lists already answered this round.
  StatusOr<Reveal> reveal(const std::vector<uint32_t>& survivors,
                          const std::vector<uint32_t>& dropped);

  // The sites this site exchanged shares with (U2, itself included), ascending.
  std::vector<uint32_t> shared_with() const;

 private:
  explicit SiteSession(uint64_t round) : round_(round) {}

  uint64_t round_ = 0;
  KeyPair cipher_, mask_;
  Key32 self_seed_{};
  AdvertisedKeys advertised_;
  uint32_t self_ = 0;
  Roster roster_;
  // Shares held, by owner index (this site's own shares of its secrets too).
  std::map<uint32_t, std::string> held_seed_shares_, held_key_shares_;
  std::optional<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> answered_;
};

// The coordinator's side of stage 4.
struct UnmaskInput {
  uint64_t round = 0;
  uint32_t threshold = 0;
  std::vector<uint32_t> masked_sum;        // Σ_{i∈U3} y_i mod 2^32
  std::map<uint32_t, Key32> mask_public;   // s_pk of every site of U2
  std::vector<uint32_t> survivors;         // U3
  std::vector<uint32_t> dropped;           // U2 \ U3
  std::map<uint32_t, Reveal> reveals;      // by revealing site (a member of U3)
};
// Σ_{i∈U3} q_i mod 2^32. Needs ≥ threshold reveals; refuses to reconstruct both secrets of
// one site, and a reconstructed mask key whose public key is not the advertised one (a wrong
// share).
StatusOr<std::vector<uint32_t>> unmask(UnmaskInput in);

}  // namespace atl::algorithms::secagg
