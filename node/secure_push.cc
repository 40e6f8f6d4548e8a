#include "node/secure_push.h"

#include <map>
#include <string>
#include <vector>

#include "algorithms/secagg/quantize.h"

namespace atl::node {
namespace pb = atoll_pb::v1;
namespace sa = algorithms::secagg;

namespace {

// How long one long-poll of a stage may be held by the coordinator.
constexpr uint32_t kStageWaitMs = 10000;

std::string words_bytes(const std::vector<uint32_t>& words) {
  std::string out(words.size() * 4, '\0');
  for (size_t k = 0; k < words.size(); ++k)
    for (int b = 0; b < 4; ++b) out[4 * k + b] = static_cast<char>((words[k] >> (8 * b)) & 0xff);
  return out;
}

}  // namespace

SecurePush::SecurePush(const pb::SecAggSpec& spec, uint64_t rounding_seed,
                       const std::atomic<bool>* stop)
    : spec_(spec), rounding_seed_(rounding_seed), stop_(stop) {}

Status SecurePush::stopped() const {
  if (stop_ && stop_->load()) return Unavailable("secure aggregation of round " + std::to_string(round_) + " stopped");
  return Status::Ok();
}

StatusOr<uint64_t> SecurePush::push(CoordinatorClient& link, const UpdateHeader& header,
                                    std::span<const float> delta) {
  round_ = header.round;
  const sa::QuantizeOptions q_opts{.clip_range = spec_.clip_range(),
                                   .quantization_range = spec_.quantization_range()};
  ATOLL_RETURN_IF_ERROR(sa::check_quantization(q_opts, 1));
  std::vector<uint32_t> words(delta.size());
  sa::quantize(delta, q_opts, rounding_seed_, words);
  if (spec_.masking()) {
    ATOLL_ASSIGN_OR_RETURN(sa::SiteSession session, sa::SiteSession::start(round_));
    session_.emplace(std::move(session));
    // Stage 1: advertise; the roster comes back once every site has advertised.
    pb::SecAggKeys keys;
    keys.set_round(round_);
    keys.set_cipher_public(sa::key_bytes(session_->keys().cipher_public));
    keys.set_mask_public(sa::key_bytes(session_->keys().mask_public));
    keys.set_wait_ms(kStageWaitMs);
    pb::SecAggRoster roster;
    do {
      ATOLL_RETURN_IF_ERROR(stopped());
      ATOLL_ASSIGN_OR_RETURN(roster, link.advertise_keys(keys));
    } while (!roster.complete());
    sa::Roster members;
    for (const pb::SecAggSite& s : roster.sites()) {
      ATOLL_ASSIGN_OR_RETURN(sa::Key32 c, sa::key_from_bytes(s.cipher_public(), "cipher public key"));
      ATOLL_ASSIGN_OR_RETURN(sa::Key32 m, sa::key_from_bytes(s.mask_public(), "mask public key"));
      members[s.index()] = {c, m};
    }
    // Stage 2: sealed shares out, the others' in.
    ATOLL_ASSIGN_OR_RETURN(auto sealed,
                           session_->share_keys(roster.self_index(), members, roster.threshold()));
    pb::SecAggShares out;
    out.set_round(round_);
    out.set_wait_ms(kStageWaitMs);
    for (auto& [to, message] : sealed) {
      pb::SecAggShare* s = out.add_shares();
      s->set_index(to);
      s->set_sealed(std::move(message));
    }
    pb::SecAggShares in;
    do {
      ATOLL_RETURN_IF_ERROR(stopped());
      ATOLL_ASSIGN_OR_RETURN(in, link.share_keys(out));
    } while (!in.complete());
    std::map<uint32_t, std::string> received;
    for (const pb::SecAggShare& s : in.shares()) received[s.index()] = s.sealed();
    ATOLL_RETURN_IF_ERROR(session_->receive_shares(received));
    // Stage 3: the masked input.
    ATOLL_RETURN_IF_ERROR(session_->mask(words));
  }
  return link.push_encoded(header, "secagg", words.size(), words_bytes(words));
}

Status SecurePush::unmask(CoordinatorClient& link) {
  if (!spec_.masking()) return Status::Ok();
  if (!session_) return FailedPrecondition("unmask before a masked push");
  pb::SecAggUnmaskPoll poll;
  poll.set_round(round_);
  poll.set_wait_ms(kStageWaitMs);
  pb::SecAggUnmaskTask task;
  do {
    ATOLL_RETURN_IF_ERROR(stopped());
    ATOLL_ASSIGN_OR_RETURN(task, link.await_unmask(poll));
  } while (!task.ready() && !task.done());
  if (task.done()) return Status::Ok();
  const std::vector<uint32_t> survivors(task.survivors().begin(), task.survivors().end());
  const std::vector<uint32_t> dropped(task.dropped().begin(), task.dropped().end());
  ATOLL_ASSIGN_OR_RETURN(sa::Reveal reveal, session_->reveal(survivors, dropped));
  pb::SecAggReveal req;
  req.set_round(round_);
  for (const auto& [owner, share] : reveal.self_seed_shares) {
    pb::SecAggSecret* s = req.add_self_seed_shares();
    s->set_owner(owner);
    s->set_share(share);
  }
  for (const auto& [owner, share] : reveal.mask_key_shares) {
    pb::SecAggSecret* s = req.add_mask_key_shares();
    s->set_owner(owner);
    s->set_share(share);
  }
  ATOLL_ASSIGN_OR_RETURN(pb::SecAggRevealAck ack, link.reveal_shares(req));
  (void)ack;  // not accepted: the sum was unmasked with the others' shares already
  return Status::Ok();
}

}  // namespace atl::node
