// How θ travels in a pull (diloco.pull_codec). A node names the θ it holds (have_fingerprint);
// when the store still has that version and an encoded delta against it is smaller than θ, the
// pull is the delta (sparse-delta-exact, or also the lossy bf16 sparse-delta with pull_codec =
// "sparse-delta"); otherwise the whole θ in the policy's codec: "none" (raw fp32) or, with
// pull_codec = "bf16", one dense bf16 codec message (half the bytes, lossy) whatever the node
// holds. With pull_codec naming any other codec (compressed broadcast,
// algorithms/compress/outer_update.h), a node holding θ_{r−1} gets round r − 1's encoded outer
// update (codec "outer-update"), and any other node the exact delta or the full θ.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/outer_update.h"
#include "coordinator/store.h"
#include "kernels/core/status.h"
#include "transport/proto/atoll.pb.h"

namespace atl::coordinator {

// diloco.pull_codec, parsed once.
struct PullPolicy {
  // The whole θ: Codec::none() (raw fp32 values) or a dense codec ("bf16").
  algorithms::compress::Codec whole = algorithms::compress::Codec::none();
  bool exact_delta = false;  // sparse-delta-exact against the node's version when smaller
  bool lossy_delta = false;  // also the bf16 sparse-delta when smaller still
  // Compressed broadcast: the codec of the outer updates (none: off). The coordinator's θ is
  // then the compressed-applied θ, and nodes one round behind get the update message.
  algorithms::compress::Codec update = algorithms::compress::Codec::none();
  bool broadcasts_updates() const { return !update.is_none(); }
};
// "exact", "sparse-delta", "full", "bf16" (the whole θ rounded to bf16) or a codec spec other
// than "none"/"fp32" (compressed broadcast; experiment_config.h); InvalidArgument otherwise.
StatusOr<PullPolicy> parse_pull_policy(std::string_view pull_codec);

// What a pull streams: the header (codec, numel, fingerprints, round, base) and the payload.
struct PullPlan {
  atoll_pb::v1::TensorHeader header;
  std::shared_ptr<const void> keep_alive;  // owns the bytes `payload` points to
  std::string_view payload;
  // The stream's payload check (transport::payload_digest, 16 bytes) of `payload`, computed once
  // per θ or cached encoding, not per pull. Empty for a raw θ not hashed yet when the plan was
  // asked for with PullDigest::kIfKnown.
  std::string payload_digest;
  // Held while the payload streams to the node (RoundEngine::pull): the node counts as alive
  // until it is released, because a heartbeat queues behind θ on a slow link.
  std::shared_ptr<const void> in_flight;
};

// Whether a pull's plan must carry its payload's digest. A gRPC stream sends it in the first
// chunk's header (kUpFront: a raw θ is hashed before its first byte goes out, once per θ). The
// bulk lane sends it after the payload and hashes the payload on its way when the plan has none,
// and in-process pulls copy memory (kIfKnown: no pass over θ of its own before the transfer).
enum class PullDigest { kUpFront, kIfKnown };

// Thread-safe; encodings are cached per (base round, round) and shared by every node that asks
// for the same one. Only deltas to the newest θ are kept.
class PullPlanner {
 public:
  // The elements round r's outer update covers (all of θ; Streaming DiLoCo: its fragment).
  using SyncedRange = std::function<algorithms::compress::UpdateRange(uint64_t round)>;
  // `store` (read for θ of base versions and stored updates) must outlive the planner.
  PullPlanner(Store& store, std::string experiment_id, PullPolicy policy, SyncedRange synced)
      : store_(store),
        experiment_id_(std::move(experiment_id)),
        policy_(std::move(policy)),
        synced_(std::move(synced)) {}

  const PullPolicy& policy() const { return policy_; }
  // Whether a node holding another version than the current one may get a delta.
  bool sends_deltas() const { return policy_.exact_delta; }

  // θ of `header.round()` (= theta) for a node that holds θ of base_round (fingerprint
  // base_fingerprint; nullopt: no usable version). `header` comes with round, numel and
  // fingerprints set; the plan sets its codec (and base_fingerprint for a delta or an update,
  // fragment_offset for an update). A base the store has since dropped or cannot read means the
  // whole θ.
  StatusOr<PullPlan> plan(atoll_pb::v1::TensorHeader header,
                          std::shared_ptr<const std::vector<float>> theta,
                          std::optional<uint64_t> base_round, const std::string& base_fingerprint,
                          PullDigest digest);

 private:
  // An encoded θ for a pull.
  struct Encoded {
    // "sparse-delta-exact", "sparse-delta", "outer-update" or the whole-θ codec
    std::string codec;
    std::string bytes;
    std::string digest;  // transport::payload_digest of `bytes`
  };
  static std::shared_ptr<Encoded> make_encoded(std::string codec, std::string bytes);
  // The smallest allowed delta of θ_round (= theta) against θ_base, or nullptr when none is
  // smaller than the full θ.
  StatusOr<std::shared_ptr<const Encoded>> delta(
      uint64_t base_round, uint64_t round, const std::shared_ptr<const std::vector<float>>& theta);
  // Round base_round's outer update message (base_round + 1 = round), or nullptr when the store
  // has none (a skipped round).
  StatusOr<std::shared_ptr<const Encoded>> update(uint64_t base_round, uint64_t round);
  // θ_round as one message of the policy's whole-θ codec, cached under (round, round).
  StatusOr<std::shared_ptr<const Encoded>> whole(
      uint64_t round, const std::shared_ptr<const std::vector<float>>& theta);
  void remember(std::pair<uint64_t, uint64_t> key, std::shared_ptr<const Encoded> value);
  // transport::payload_digest of the raw θ whose SHA-256 fingerprint is `fingerprint`, hashed
  // on the first kUpFront pull of that θ only; with kIfKnown, the cached one or empty.
  std::string raw_theta_digest(const std::string& fingerprint, std::string_view bytes,
                               PullDigest digest);

  Store& store_;
  const std::string experiment_id_;
  const PullPolicy policy_;
  const SyncedRange synced_;
  std::mutex mu_;  // guards cache_ and raw_digest_
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const Encoded>> cache_;
  // The newest raw θ's digest: (its fingerprint, its digest).
  std::pair<std::string, std::string> raw_digest_;
};

}  // namespace atl::coordinator
