#include "simulate/byzantine.h"

#include <cmath>
#include <cstring>

#include "algorithms/compress/codec.h"
#include "algorithms/diloco/robust.h"
#include "kernels/core/philox.h"

namespace atl::simulate {
namespace pb = atoll_pb::v1;
namespace compress = algorithms::compress;

namespace {
constexpr Attack kAttacks[] = {Attack::kSignFlip, Attack::kGaussian, Attack::kScale,
                               Attack::kTokens,   Attack::kReplay,   Attack::kStale};

std::vector<float> scaled(std::span<const float> v, double factor) {
  std::vector<float> out(v.begin(), v.end());
  algorithms::scale_values(out, factor);
  return out;
}
}  // namespace

const char* attack_name(Attack attack) {
  switch (attack) {
    case Attack::kNone: return "none";
    case Attack::kSignFlip: return "sign-flip";
    case Attack::kGaussian: return "gaussian";
    case Attack::kScale: return "scale";
    case Attack::kTokens: return "tokens";
    case Attack::kReplay: return "replay";
    case Attack::kStale:
      return "stale";
  }
  return "?";
}

std::string attack_names() {
  std::string names;
  for (Attack a : kAttacks) names += std::string(names.empty() ? "" : ", ") + attack_name(a);
  return names;
}

StatusOr<Attack> parse_attack(const std::string& name) {
  for (Attack a : kAttacks)
    if (name == attack_name(a)) return a;
  return InvalidArgument("--attack " + name.substr(0, 64) + " is not an attack: use one of " +
                         attack_names());
}

std::vector<float> attacked_values(Attack attack, std::span<const float> honest,
                                   std::span<const float> previous, uint64_t seed,
                                   uint64_t round) {
  switch (attack) {
    case Attack::kSignFlip: return scaled(honest, kSignFlipFactor);
    case Attack::kScale: return scaled(honest, kScaleFactor);
    case Attack::kGaussian: {
      std::vector<float> noise(honest.size());
      if (honest.empty()) return noise;
      const double sigma = kNoiseNormMultiple * algorithms::l2_norm(honest) /
                           std::sqrt(static_cast<double>(honest.size()));
      const Philox rng(seed, round);
      for (size_t i = 0; i < noise.size(); ++i)
        noise[i] = static_cast<float>(sigma * rng.normal(i));
      return noise;
    }
    case Attack::kStale:
      if (!previous.empty() && previous.size() == honest.size())
        return {previous.begin(), previous.end()};
      return {honest.begin(), honest.end()};
    case Attack::kNone:
    case Attack::kReplay:
    case Attack::kTokens: break;
  }
  return {honest.begin(), honest.end()};
}

StatusOr<std::vector<float>> decode_update_payload(const pb::TensorHeader& header,
                                                   std::string_view payload) {
  if (header.codec() == compress::kNoneSpec) {
    if (payload.size() != header.numel() * sizeof(float))
      return InvalidArgument("update payload holds " + std::to_string(payload.size()) +
                             " bytes, numel " + std::to_string(header.numel()) + " needs " +
                             std::to_string(header.numel() * sizeof(float)));
    std::vector<float> values(header.numel());
    std::memcpy(values.data(), payload.data(), payload.size());
    return values;
  }
  return compress::decode({reinterpret_cast<const uint8_t*>(payload.data()), payload.size()},
                          header.numel());
}

StatusOr<std::string> encode_update_payload(const pb::TensorHeader& header,
                                            std::span<const float> values) {
  if (header.codec() == compress::kNoneSpec)
    return std::string(reinterpret_cast<const char*>(values.data()), values.size_bytes());
  ATOLL_ASSIGN_OR_RETURN(const compress::Codec codec, compress::Codec::create(header.codec()));
  ATOLL_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, codec.encode(values));
  return std::string(bytes.begin(), bytes.end());
}

ByzantineCalls::ByzantineCalls(std::unique_ptr<node::CoordinatorCalls> inner, Attack attack,
                               uint64_t seed)
    : ForwardingCalls(std::move(inner)), attack_(attack), seed_(seed) {}

Status ByzantineCalls::push_tokens_claim(const pb::TensorHeader& header,
                                         std::string_view payload,
                                         pb::PushUpdateResponse* resp) {
  pb::TensorHeader inflated = header;
  inflated.set_tokens(kInflatedTokenClaim);
  Status st = inner().push_update(inflated, payload, resp);
  if (st.ok() && resp->accepted()) return st;  // the claim went through: nothing to retry
  *resp = pb::PushUpdateResponse{};
  return inner().push_update(header, payload, resp);
}

Status ByzantineCalls::push_replay(const pb::TensorHeader& header, std::string_view payload,
                                   pb::PushUpdateResponse* resp) {
  if (!has_replayed_ || replayed_numel_ != header.numel() || replayed_codec_ != header.codec()) {
    replayed_payload_ = payload;
    replayed_numel_ = header.numel();
    replayed_codec_ = header.codec();
    has_replayed_ = true;
  }
  return inner().push_update(header, replayed_payload_, resp);
}

Status ByzantineCalls::push_update(const pb::TensorHeader& header, std::string_view payload,
                                   pb::PushUpdateResponse* resp) {
  if (attack_ == Attack::kTokens) return push_tokens_claim(header, payload, resp);
  if (attack_ == Attack::kReplay) return push_replay(header, payload, resp);
  auto honest = decode_update_payload(header, payload);
  if (!honest.ok())
    return Internal("Byzantine site: cannot decode its own update to attack it: " +
                    honest.status().message());
  // A push retried within the same round keeps the previous round's Δ for the stale attack.
  if (!has_current_ || header.round() != current_round_) {
    previous_ = std::move(current_);
    current_ = *honest;
    current_round_ = header.round();
    has_current_ = true;
  }
  const std::vector<float> sent =
      attacked_values(attack_, *honest, previous_, seed_, header.round());
  auto bytes = encode_update_payload(header, sent);
  if (!bytes.ok())
    return Internal("Byzantine site: cannot encode the attacked update: " +
                    bytes.status().message());
  return inner().push_update(header, *bytes, resp);
}

}  // namespace atl::simulate
