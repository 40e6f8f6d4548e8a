#include "node/secure_push.h"

#include <map>
#include <string>
#include <vector>

#include "algorithms/secagg/quantize.h"
#include "transport/tls/ca.h"
#include "transport/tls/signed_statement.h"

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

template <typename T>
void put_le(std::string& out, T v) {
  for (size_t b = 0; b < sizeof(T); ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}

}  // namespace

std::string advertisement_statement(const std::string& experiment_id, uint64_t round,
                                    const std::string& node_id, const std::string& cipher_public,
                                    const std::string& mask_public) {
  static constexpr char kDomain[] = "atoll secagg keys v1";
  std::string out(kDomain, sizeof(kDomain));  // with its NUL
  put_le<uint32_t>(out, static_cast<uint32_t>(experiment_id.size()));
  out += experiment_id;
  put_le<uint64_t>(out, round);
  put_le<uint32_t>(out, static_cast<uint32_t>(node_id.size()));
  out += node_id;
  out += cipher_public;
  out += mask_public;
  return out;
}

Status check_roster_signatures(const transport::ClientIdentity& identity,
                               const std::string& experiment_id, const pb::SecAggRoster& roster,
                               const pb::SecAggKeys& own) {
  const std::string round = "secure aggregation of round " + std::to_string(roster.round());
  std::map<std::string, uint32_t> seen;  // node id → index
  for (const pb::SecAggSite& s : roster.sites()) {
    const std::string site = "site " + std::to_string(s.index()) + " ('" + s.node_id() + "')";
    auto refuse = [&](const std::string& why) {
      return PermissionDenied(round + ": the keys the coordinator forwarded for " + site + " " +
                              why +
                              "; this site derives no key from them and leaves the round's "
                              "secure exchange");
    };
    if (!seen.emplace(s.node_id(), s.index()).second)
      return refuse("name a node that is on the roster twice");
    if (s.index() == roster.self_index() &&
        (s.cipher_public() != own.cipher_public() || s.mask_public() != own.mask_public()))
      return refuse("are not the keys this site advertised");
    const Status st = transport::verify_node_statement(
        identity.ca_pem, s.certificate_pem(), s.node_id(),
        advertisement_statement(experiment_id, roster.round(), s.node_id(), s.cipher_public(),
                                s.mask_public()),
        s.signature());
    if (!st.ok()) return refuse("fail their signature check: " + st.message());
  }
  return Status::Ok();
}

SecurePush::SecurePush(const pb::SecAggSpec& spec, uint64_t rounding_seed,
                       const std::atomic<bool>* stop)
    : spec_(spec), rounding_seed_(rounding_seed), stop_(stop) {}

Status SecurePush::stopped() const {
  if (stop_ && stop_->load())
    return Unavailable("secure aggregation of round " + std::to_string(round_) + " stopped");
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
    const transport::ClientIdentity* identity = link.identity();
    const std::string experiment_id = link.current_experiment_id();
    if (identity) {
      ATOLL_ASSIGN_OR_RETURN(const transport::CertInfo me,
                             transport::inspect_certificate_pem(identity->cert_pem));
      ATOLL_ASSIGN_OR_RETURN(*keys.mutable_signature(),
                             transport::sign_statement(
                                 identity->key_pem, advertisement_statement(
                                                        experiment_id, round_, me.common_name,
                                                        keys.cipher_public(), keys.mask_public())));
    }
    pb::SecAggRoster roster;
    do {
      ATOLL_RETURN_IF_ERROR(stopped());
      ATOLL_ASSIGN_OR_RETURN(roster, link.advertise_keys(keys));
    } while (!roster.complete());
    if (identity)
      ATOLL_RETURN_IF_ERROR(check_roster_signatures(*identity, experiment_id, roster, keys));
    sa::Roster members;
    for (const pb::SecAggSite& s : roster.sites()) {
      ATOLL_ASSIGN_OR_RETURN(sa::Key32 c,
                             sa::key_from_bytes(s.cipher_public(), "cipher public key"));
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
