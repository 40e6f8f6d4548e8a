#include "coordinator/pull_planner.h"

#include <iterator>

#include "algorithms/compress/exact_delta.h"
#include "algorithms/compress/sparse_delta.h"
#include "kernels/cpu/ops.h"
#include "transport/payload_digest.h"

namespace atl::coordinator {

namespace cx = algorithms::compress;

StatusOr<PullPolicy> parse_pull_policy(std::string_view pull_codec) {
  PullPolicy p;
  if (pull_codec == "exact") {
    p.exact_delta = true;
  } else if (pull_codec == "sparse-delta") {
    p.exact_delta = true;
    p.lossy_delta = true;
  } else if (pull_codec == "bf16") {
    ATOLL_ASSIGN_OR_RETURN(p.whole, cx::Codec::create("bf16"));
    p.whole.set_threads(kernels::cpu::num_threads());  // speed only: same bytes for any count
  } else if (pull_codec != "full") {
    auto update = cx::Codec::create(pull_codec);
    if (!update.ok() || update->is_none())
      return InvalidArgument(
          "diloco.pull_codec = \"" + std::string(pull_codec.substr(0, 64)) +
          "\" must be \"exact\", \"sparse-delta\", \"full\", \"bf16\" or a codec spec for "
          "the outer updates such as \"int8\" or \"nvfp4\" (not \"none\" or \"fp32\")");
    p.update = *update;
    p.update.set_threads(kernels::cpu::num_threads());
    p.exact_delta = true;  // nodes further behind: the exact delta when smaller than θ
  }
  return p;
}

StatusOr<PullPlan> PullPlanner::plan(atoll_pb::v1::TensorHeader header,
                                     std::shared_ptr<const std::vector<float>> theta,
                                     std::optional<uint64_t> base_round,
                                     const std::string& base_fingerprint, PullDigest digest) {
  std::shared_ptr<const Encoded> encoded;
  const bool one_behind = base_round && *base_round + 1 == header.round();
  if (!policy_.whole.is_none()) {
    ATOLL_ASSIGN_OR_RETURN(encoded, whole(header.round(), theta));
  } else if (policy_.broadcasts_updates() && one_behind) {
    // One round behind: the update the coordinator applied (cached under (r − 1, r), a key no
    // delta uses in this mode). None stored (a store that lost it) means the full θ.
    auto u = update(*base_round, header.round());
    if (u.ok() && *u) {
      encoded = *u;
      header.set_base_fingerprint(base_fingerprint);
      header.set_fragment_offset(synced_(*base_round).offset);
    }
  } else if (policy_.exact_delta && base_round) {
    // A base the store has since dropped (or cannot read) just means the full θ.
    auto d = delta(*base_round, header.round(), theta);
    if (d.ok() && *d) {
      encoded = *d;
      header.set_base_fingerprint(base_fingerprint);
    }
  }
  PullPlan out;
  if (encoded) {
    header.set_codec(encoded->codec);
    out.payload = encoded->bytes;
    out.payload_digest = encoded->digest;
    out.keep_alive = std::move(encoded);
  } else {
    header.set_codec(std::string(cx::kNoneSpec));  // raw fp32
    out.payload = std::string_view(reinterpret_cast<const char*>(theta->data()),
                                   theta->size() * sizeof(float));
    out.payload_digest = raw_theta_digest(header.params_fingerprint(), out.payload, digest);
    out.keep_alive = std::move(theta);
  }
  out.header = std::move(header);
  return out;
}

StatusOr<std::shared_ptr<const PullPlanner::Encoded>> PullPlanner::delta(
    uint64_t base_round, uint64_t round, const std::shared_ptr<const std::vector<float>>& theta) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = cache_.find({base_round, round});
    if (it != cache_.end()) return it->second;
  }
  ATOLL_ASSIGN_OR_RETURN(std::vector<float> base, store_.load_params(experiment_id_, base_round));
  if (base.size() != theta->size())
    return DataLoss("θ of round " + std::to_string(base_round) + " in the store has " +
                    std::to_string(base.size()) + " values, θ has " +
                    std::to_string(theta->size()));
  // Candidates by actual message size; the full θ is numel·4 bytes.
  const uint64_t full = theta->size() * sizeof(float);
  const cx::exact_delta::Plan exact = cx::exact_delta::plan(*theta, base);
  uint64_t lossy = UINT64_MAX;
  if (policy_.lossy_delta)
    lossy = cx::sparse_delta::message_bytes(theta->size(),
                                            cx::sparse_delta::count_changed(*theta, base));
  std::shared_ptr<Encoded> out;
  if (exact.bytes < full && exact.bytes <= lossy) {
    ATOLL_ASSIGN_OR_RETURN(auto bytes, cx::exact_delta::encode(*theta, base));
    out = make_encoded(cx::exact_delta::kName, std::string(bytes.begin(), bytes.end()));
  } else if (lossy < full) {
    ATOLL_ASSIGN_OR_RETURN(auto bytes, cx::sparse_delta::encode(*theta, base));
    out = make_encoded(cx::sparse_delta::kName, std::string(bytes.begin(), bytes.end()));
  }
  remember({base_round, round}, out);
  return std::shared_ptr<const Encoded>(out);
}

StatusOr<std::shared_ptr<const PullPlanner::Encoded>> PullPlanner::update(uint64_t base_round,
                                                                          uint64_t round) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = cache_.find({base_round, round});
    if (it != cache_.end()) return it->second;
  }
  auto bytes = store_.load_broadcast_update(experiment_id_, base_round);
  std::shared_ptr<const Encoded> out;
  if (bytes.ok())
    out = make_encoded(std::string(cx::kOuterUpdateName), std::move(bytes).value());
  else if (bytes.status().code() != StatusCode::kNotFound)
    return bytes.status();
  remember({base_round, round}, out);
  return out;
}

StatusOr<std::shared_ptr<const PullPlanner::Encoded>> PullPlanner::whole(
    uint64_t round, const std::shared_ptr<const std::vector<float>>& theta) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = cache_.find({round, round});
    if (it != cache_.end()) return it->second;
  }
  ATOLL_ASSIGN_OR_RETURN(auto bytes, policy_.whole.encode(*theta));
  std::shared_ptr<const Encoded> out =
      make_encoded(policy_.whole.spec().to_string(), std::string(bytes.begin(), bytes.end()));
  remember({round, round}, out);
  return out;
}

std::shared_ptr<PullPlanner::Encoded> PullPlanner::make_encoded(std::string codec,
                                                               std::string bytes) {
  std::string digest = transport::payload_digest(bytes);
  return std::make_shared<Encoded>(Encoded{std::move(codec), std::move(bytes), std::move(digest)});
}

std::string PullPlanner::raw_theta_digest(const std::string& fingerprint, std::string_view bytes,
                                          PullDigest digest) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (raw_digest_.first == fingerprint) return raw_digest_.second;
  }
  if (digest == PullDigest::kIfKnown) return {};
  // Outside the lock: other pulls go on while θ is hashed (several first pulls of a new θ may
  // each hash it once; they agree).
  std::string computed = transport::payload_digest(bytes);
  std::lock_guard<std::mutex> lk(mu_);
  raw_digest_ = {fingerprint, computed};
  return computed;
}

void PullPlanner::remember(std::pair<uint64_t, uint64_t> key,
                           std::shared_ptr<const Encoded> value) {
  std::lock_guard<std::mutex> lk(mu_);
  // Only encodings of the current θ are asked for again: drop those of older rounds.
  for (auto it = cache_.begin(); it != cache_.end();)
    it = it->first.second < key.second ? cache_.erase(it) : std::next(it);
  cache_[key] = std::move(value);
}

}  // namespace atl::coordinator
