// Byzantine virtual sites (`atoll simulate --byzantine K --attack NAME`, bench/robust): a site
// that trains as an honest one does, then changes what it sends. The change is made below the
// node's client, on the PushUpdate message itself (header and encoded payload), so the round
// engine receives exactly the bytes a hostile node would put on the wire; the site's own state
// (θ_local, optimizer, error feedback) stays the honest one's.
//
// The attacks, on the update Δ (numel values) the site would have sent in round r:
//   sign-flip  Δ' = −10 Δ
//   gaussian   Δ' = N(0, σ² I) with σ = 10 ‖Δ‖₂ / √numel: noise of 10× the honest norm
//              (draws keyed by (seed, round): reproducible)
//   scale      Δ' = 10⁶ Δ
//   tokens     Δ unchanged, the token claim 2⁶³ − 1; when the coordinator refuses it, the
//              update is sent again with the honest claim (as a hostile node that still wants
//              its update counted would), so the round does not wait for it
//   replay     a wire replay: the payload it pushed in its previous round, byte for byte, with
//              the current round's header (so from the second round on, the first round's
//              update again and again); the first round, and a round whose update has another
//              size or codec (a streaming fragment of another length), send the honest Δ and
//              replay that one from then on
//   stale      Δ' = the site's honest Δ of the previous round it trained (one round late: the
//              coordinator never saw it before); the first round, and a round whose Δ has
//              another size, send the honest Δ
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/status.h"
#include "node/forwarding_calls.h"

namespace atl::simulate {

enum class Attack { kNone, kSignFlip, kGaussian, kScale, kTokens, kReplay, kStale };

inline constexpr double kSignFlipFactor = -10.0;
inline constexpr double kNoiseNormMultiple = 10.0;
inline constexpr double kScaleFactor = 1e6;
inline constexpr uint64_t kInflatedTokenClaim = 9223372036854775807ull;  // 2⁶³ − 1

// "none", "sign-flip", "gaussian", "scale", "tokens", "replay", "stale".
const char* attack_name(Attack attack);
// The names above but "none"; InvalidArgument naming the choices otherwise.
StatusOr<Attack> parse_attack(const std::string& name);
// "sign-flip, gaussian, scale, tokens, replay, stale".
std::string attack_names();

// The values a Byzantine site sends instead of `honest` (its Δ of round `round`, numel values).
// `previous`: its honest Δ of the previous round it trained (empty: none). `seed` keys the
// gaussian attack's draws (with `round`). kTokens, kReplay (which acts on the payload bytes,
// ByzantineCalls) and kNone return `honest` unchanged.
std::vector<float> attacked_values(Attack attack, std::span<const float> honest,
                                   std::span<const float> previous, uint64_t seed,
                                   uint64_t round);

// A site's calls with its pushes attacked; every other call goes to `inner` unchanged.
// Thread-compatible, as one site's calls are (one worker thread pushes).
class ByzantineCalls final : public node::ForwardingCalls {
 public:
  // attack: not kNone. seed: the gaussian draws' key (each site its own).
  ByzantineCalls(std::unique_ptr<node::CoordinatorCalls> inner, Attack attack, uint64_t seed);

  // Decodes the payload (codec "none": raw fp32; any other: its codec message), applies the
  // attack, and encodes the result with the same codec. An update it cannot decode is an error
  // (the honest node made it: a bug), never sent. Secure aggregation's stages and every other
  // call pass through (the attacks act on the push).
  Status push_update(const atoll_pb::v1::TensorHeader& header, std::string_view payload,
                     atoll_pb::v1::PushUpdateResponse* resp) override;

 private:
  Status push_tokens_claim(const atoll_pb::v1::TensorHeader& header, std::string_view payload,
                           atoll_pb::v1::PushUpdateResponse* resp);
  Status push_replay(const atoll_pb::v1::TensorHeader& header, std::string_view payload,
                     atoll_pb::v1::PushUpdateResponse* resp);

  const Attack attack_;
  const uint64_t seed_;
  // replay: the payload it replays, and the numel and codec it was pushed with
  std::string replayed_payload_;
  uint64_t replayed_numel_ = 0;
  std::string replayed_codec_;
  bool has_replayed_ = false;
  // stale: the honest Δ of the round pushed last (current_) and of the one before (previous_)
  std::vector<float> previous_, current_;
  uint64_t current_round_ = 0;
  bool has_current_ = false;
};

// The payload's values: codec "none" is raw little-endian fp32, any other a codec message.
StatusOr<std::vector<float>> decode_update_payload(const atoll_pb::v1::TensorHeader& header,
                                                   std::string_view payload);
// `values` as the payload of an update whose codec is header.codec().
StatusOr<std::string> encode_update_payload(const atoll_pb::v1::TensorHeader& header,
                                            std::span<const float> values);

}  // namespace atl::simulate
