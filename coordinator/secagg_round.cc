#include "coordinator/secagg_round.h"

#include <algorithm>
#include <utility>

namespace atl::coordinator {
namespace pb = atoll_pb::v1;
namespace sa = algorithms::secagg;

namespace {

constexpr size_t kKeyBytes = 32;
// A sealed share message: nonce 12 + from/to 8 + two 32-byte shares + tag 16 = 100 bytes.
constexpr size_t kMaxSealedBytes = 256;

std::string round_text(uint64_t r) { return "round " + std::to_string(r); }

}  // namespace

SecAggRound::SecAggRound(uint64_t round, std::vector<std::string> participants,
                         const SecAggSection& config, uint32_t min_nodes, uint64_t numel)
    : round_(round),
      participants_(std::move(participants)),
      config_threshold_(config.threshold),
      min_nodes_(min_nodes),
      numel_(numel),
      masking_(config.masking),
      stage_(config.masking ? Stage::kAdvertise : Stage::kCollect),
      sum_(numel, 0) {
  if (!masking_) {
    // Everyone may push; nothing is masked, so nothing is shared or revealed.
    for (size_t k = 0; k < participants_.size(); ++k) {
      roster_[participants_[k]] = static_cast<uint32_t>(k + 1);
      u2_.insert(participants_[k]);
    }
  }
}

uint32_t SecAggRound::index_of(const std::string& node) const {
  auto it = roster_.find(node);
  return it == roster_.end() ? 0 : it->second;
}

Status SecAggRound::advertise(const std::string& node, const pb::SecAggKeys& keys,
                              const std::string& certificate_pem) {
  if (!masking_)
    return FailedPrecondition("secagg.masking is off in this experiment: push the quantized "
                              "update without advertising keys");
  if (keys.cipher_public().size() != kKeyBytes || keys.mask_public().size() != kKeyBytes)
    return InvalidArgument("secagg keys must be 32-byte X25519 public keys");
  if (keys.cipher_public() == keys.mask_public())
    return InvalidArgument("secagg keys: the cipher and mask public keys must differ");
  auto it = advertised_.find(node);
  if (it != advertised_.end()) {
    if (it->second.cipher_public() == keys.cipher_public() &&
        it->second.mask_public() == keys.mask_public())
      return Status::Ok();  // a repeated call
    // Other keys from an authenticated participant: its process restarted, and the old keys
    // died with the old process. Nobody has used them before the roster is fixed.
    if (stage_ == Stage::kAdvertise) {
      it->second = keys;
      certificates_[node] = certificate_pem;
      return Status::Ok();
    }
    departed_.insert(node);
    return FailedPrecondition(round_text(round_) + ": secure aggregation goes on with the keys '" +
                              node +
                              "' advertised before it restarted; it takes part again from "
                              "the next round");
  }
  if (stage_ != Stage::kAdvertise)
    return FailedPrecondition(round_text(round_) +
                              ": the secagg roster is already fixed without '" + node + "'");
  advertised_[node] = keys;
  certificates_[node] = certificate_pem;
  return Status::Ok();
}

void SecAggRound::process_restarted(const std::string& node) {
  if (!masking_) return;
  if (stage_ == Stage::kAdvertise) {
    advertised_.erase(node);
    certificates_.erase(node);
  } else {
    departed_.insert(node);
  }
}

Status SecAggRound::share(const std::string& node, const pb::SecAggShares& shares) {
  const uint32_t self = index_of(node);
  if (self == 0 || stage_ == Stage::kAdvertise)
    return FailedPrecondition(round_text(round_) + ": '" + node +
                              "' is not on the secagg roster (advertise keys first)");
  if (shared_.count(node)) return Status::Ok();  // a repeated long-poll
  if (stage_ != Stage::kShare)
    return FailedPrecondition(round_text(round_) + ": secagg key sharing closed without '" +
                              node + "'");
  std::map<uint32_t, std::string> by_to;
  for (const pb::SecAggShare& s : shares.shares()) {
    if (s.sealed().size() > kMaxSealedBytes)
      return InvalidArgument("a sealed share of " + std::to_string(s.sealed().size()) +
                             " bytes is over the " + std::to_string(kMaxSealedBytes) +
                             "-byte limit");
    if (s.index() == self || !by_to.emplace(s.index(), s.sealed()).second)
      return InvalidArgument("secagg shares: index " + std::to_string(s.index()) +
                             " is this site's own or appears twice");
  }
  for (const auto& [member, index] : roster_)
    if (index != self && !by_to.count(index))
      return InvalidArgument("secagg shares: none for site " + std::to_string(index) + " ('" +
                             member + "'); send one sealed share per other roster member");
  if (by_to.size() != roster_.size() - 1)
    return InvalidArgument("secagg shares: an index not on the roster");
  for (auto& [to, sealed] : by_to) mailbox_[to][self] = std::move(sealed);
  shared_.insert(node);
  return Status::Ok();
}

Status SecAggRound::check_push(const std::string& node) const {
  if (stage_ != Stage::kCollect || !u2_.count(node))
    return FailedPrecondition(
        round_text(round_) + ": '" + node + "' cannot push a masked input now (" +
        (stage_ < Stage::kCollect ? std::string("key sharing is not over")
         : u2_.count(node)        ? std::string("masked inputs are closed")
                                  : std::string("it did not share keys in time")) +
        ")");
  if (u3_.count(node))
    return AlreadyExists("replay: a masked input from '" + node + "' for " + round_text(round_) +
                         " was already added");
  return Status::Ok();
}

Status SecAggRound::add_masked(const std::string& node, const std::string& payload) {
  ATOLL_RETURN_IF_ERROR(check_push(node));
  if (payload.size() != numel_ * 4)
    return InvalidArgument("wrong shape: a secagg payload of " + std::to_string(numel_) +
                           " elements is " + std::to_string(numel_ * 4) + " bytes, got " +
                           std::to_string(payload.size()));
  const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
  for (uint64_t k = 0; k < numel_; ++k) {
    const uint32_t w = uint32_t{p[4 * k]} | uint32_t{p[4 * k + 1]} << 8 |
                       uint32_t{p[4 * k + 2]} << 16 | uint32_t{p[4 * k + 3]} << 24;
    sum_[k] += w;  // mod 2^32
  }
  u3_.insert(node);
  return Status::Ok();
}

Status SecAggRound::reveal(const std::string& node, const pb::SecAggReveal& r) {
  const uint32_t self = index_of(node);
  if (stage_ != Stage::kUnmask || !u3_.count(node))
    return FailedPrecondition(round_text(round_) + ": '" + node +
                              "' has no shares to reveal now (not unmasking, or not a survivor)");
  if (reveals_.count(self)) return Status::Ok();
  sa::Reveal out;
  auto take = [&](const auto& list, std::map<uint32_t, std::string>& into,
                  const std::set<uint32_t>& want, const char* what) -> Status {
    for (const pb::SecAggSecret& s : list) {
      if (s.share().size() != kKeyBytes || !want.count(s.owner()) ||
          !into.emplace(s.owner(), s.share()).second)
        return InvalidArgument(std::string("secagg reveal: a bad share of the ") + what +
                               " of site " + std::to_string(s.owner()));
    }
    if (into.size() != want.size())
      return InvalidArgument(std::string("secagg reveal: ") + std::to_string(into.size()) +
                             " shares of " + what + "s, " + std::to_string(want.size()) +
                             " wanted");
    return Status::Ok();
  };
  std::set<uint32_t> survivors, dropped;
  for (const auto& [member, index] : roster_) {
    if (u3_.count(member))
      survivors.insert(index);
    else if (u2_.count(member))
      dropped.insert(index);
  }
  ATOLL_RETURN_IF_ERROR(
      take(r.self_seed_shares(), out.self_seed_shares, survivors, "self-mask seed"));
  ATOLL_RETURN_IF_ERROR(take(r.mask_key_shares(), out.mask_key_shares, dropped, "mask key"));
  reveals_[self] = std::move(out);
  return Status::Ok();
}

void SecAggRound::fill_roster(const std::string& node, pb::SecAggRoster& out) const {
  out.set_round(round_);
  out.set_complete(stage_ != Stage::kAdvertise);
  if (!out.complete()) return;
  out.set_self_index(index_of(node));
  out.set_threshold(threshold_);
  for (const auto& [member, index] : roster_) {
    const pb::SecAggKeys& k = advertised_.at(member);
    pb::SecAggSite* s = out.add_sites();
    s->set_index(index);
    s->set_cipher_public(k.cipher_public());
    s->set_mask_public(k.mask_public());
    s->set_node_id(member);
    s->set_certificate_pem(certificates_.at(member));
    s->set_signature(k.signature());
  }
  // Ascending index: roster_ is by node name, indices follow that order.
}

void SecAggRound::fill_shares_for(const std::string& node, pb::SecAggShares& out) const {
  out.set_round(round_);
  out.set_complete(stage_ != Stage::kAdvertise && stage_ != Stage::kShare);
  if (!out.complete()) return;
  auto box = mailbox_.find(index_of(node));
  if (box == mailbox_.end()) return;
  for (const auto& [from, sealed] : box->second) {
    pb::SecAggShare* s = out.add_shares();
    s->set_index(from);
    s->set_sealed(sealed);
  }
}

void SecAggRound::fill_unmask_task(const std::string& node, pb::SecAggUnmaskTask& out) const {
  out.set_round(round_);
  if (stage_ == Stage::kReady || (stage_ == Stage::kUnmask && !u3_.count(node))) {
    out.set_done(true);
    out.set_reason(stage_ == Stage::kReady ? "the sum is unmasked"
                                           : "this site's masked input is not in the sum");
    return;
  }
  if (stage_ != Stage::kUnmask) return;  // still collecting
  out.set_ready(true);
  for (const auto& [member, index] : roster_) {
    if (u3_.count(member))
      out.add_survivors(index);
    else if (u2_.count(member))
      out.add_dropped(index);
  }
}

std::optional<std::string> SecAggRound::advance(const std::function<bool(const std::string&)>& live,
                                                bool deadline_passed, bool receiving) {
  const std::string r = round_text(round_);
  // The live nodes of `nodes` that are not done, in node order.
  auto waiting_for = [&](const std::vector<std::string>& nodes, auto&& done) {
    std::vector<std::string> out;
    for (const auto& n : nodes)
      if (!done(n) && live(n) && !departed_.count(n)) out.push_back(n);
    return out;
  };
  // Whether the stage may close: everyone live is done, or the deadline passed. A stage closed
  // at the deadline leaves a note and the next stage its own deadline (deadline_passed false).
  auto may_close = [&](const char* what, const std::vector<std::string>& missing) {
    if (missing.empty()) return true;
    if (!deadline_passed) return false;
    std::string who;
    for (const auto& n : missing) who += (who.empty() ? "" : ", ") + n;
    deadline_note_ = r + ": " + what + " closed at the deadline without " + who +
                     "; the rest of the round has a new deadline";
    deadline_passed = false;
    return true;
  };
  if (stage_ == Stage::kAdvertise) {
    if (!may_close("secagg key advertising", waiting_for(participants_, [&](const std::string& n) {
                     return advertised_.count(n);
                   })))
      return std::nullopt;
    const uint32_t n = static_cast<uint32_t>(advertised_.size());
    threshold_ = std::max(config_threshold_, n / 2 + 1);
    if (n < std::max(threshold_, min_nodes_))
      return r + ": only " + std::to_string(n) + " sites advertised secagg keys, " +
             std::to_string(std::max(threshold_, min_nodes_)) + " needed";
    uint32_t index = 0;
    for (const auto& kv : advertised_) roster_[kv.first] = ++index;  // node order
    stage_ = Stage::kShare;
  }
  if (stage_ == Stage::kShare) {
    std::vector<std::string> members;
    for (const auto& kv : roster_) members.push_back(kv.first);
    if (!may_close("secagg key sharing",
                   waiting_for(members, [&](const std::string& n) { return shared_.count(n); })))
      return std::nullopt;
    if (shared_.size() < std::max(threshold_, min_nodes_))
      return r + ": only " + std::to_string(shared_.size()) + " sites shared secagg keys, " +
             std::to_string(std::max(threshold_, min_nodes_)) + " needed";
    u2_ = shared_;
    // Shares from sites outside U2 never reach anyone: drop what the others sent them too.
    for (auto& [to, from_map] : mailbox_)
      for (auto it = from_map.begin(); it != from_map.end();)
        it = std::any_of(u2_.begin(), u2_.end(),
                         [&](const std::string& m) { return roster_.at(m) == it->first; })
                 ? std::next(it)
                 : from_map.erase(it);
    stage_ = Stage::kCollect;
  }
  if (stage_ == Stage::kCollect) {
    const std::vector<std::string> members(u2_.begin(), u2_.end());
    const auto missing = waiting_for(members, [&](const std::string& n) { return u3_.count(n); });
    if (missing.empty() && receiving && !deadline_passed) return std::nullopt;
    if (!may_close("the masked inputs", missing)) return std::nullopt;
    const uint32_t need = std::max(masking_ ? threshold_ : 1u, min_nodes_);
    if (u3_.size() < need)
      return r + ": only " + std::to_string(u3_.size()) + " masked inputs arrived, " +
             std::to_string(need) + " needed";
    stage_ = masking_ ? Stage::kUnmask : Stage::kReady;
  }
  if (stage_ == Stage::kUnmask) {
    if (reveals_.size() >= threshold_) {
      stage_ = Stage::kReady;
    } else if (deadline_passed) {
      return r + ": only " + std::to_string(reveals_.size()) +
             " sites revealed secagg shares, the threshold is " + std::to_string(threshold_);
    }
  }
  return std::nullopt;
}

std::optional<std::string> SecAggRound::take_deadline_note() {
  return std::exchange(deadline_note_, std::nullopt);
}

std::vector<std::string> SecAggRound::pushed() const { return {u3_.begin(), u3_.end()}; }

SecAggRound::Result SecAggRound::take_result() {
  Result res;
  res.masking = masking_;
  res.sites = u3_.size();
  sa::UnmaskInput& in = res.unmask;
  in.round = round_;
  in.threshold = threshold_;
  in.masked_sum = std::move(sum_);
  for (const auto& [member, index] : roster_) {
    if (!u2_.count(member)) continue;
    if (masking_) {
      auto keys = sa::key_from_bytes(advertised_.at(member).mask_public(), "mask key");
      if (keys.ok()) in.mask_public[index] = *keys;
    }
    if (u3_.count(member))
      in.survivors.push_back(index);
    else
      in.dropped.push_back(index);
  }
  in.reveals = std::move(reveals_);
  return res;
}

}  // namespace atl::coordinator
