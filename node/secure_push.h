// A site's side of a securely aggregated round (TrainSpec.secagg; algorithms/secagg/protocol.h
// for the math, docs/protocol.md "Secure aggregation" for the calls): Δ is clipped and
// quantized, then
//   push()    advertises the round's public keys, exchanges sealed Shamir shares with the
//             other sites through the coordinator, and pushes the masked integers (codec
//             "secagg"); with masking off it pushes the quantized integers at once
//   unmask()  waits for the coordinator's lists of surviving and dropped sites and reveals this
//             site's shares for them (never both secrets of one site)
// A site that stops between the two (crashed, cut off) does not stop the round: the others'
// shares of its self-mask seed unmask its input.
//
// With an mTLS identity (CoordinatorClient::identity) the advertisement is signed with the
// node's key, and every advertisement of the roster (the caller's own included) is checked
// before any key is derived from it: the certificate the coordinator forwards must be issued
// by the experiment CA to a node named as the roster names the site, and carry the signature of
// advertisement_statement. A check that fails ends the round's secure exchange for this site
// (PERMISSION_DENIED, one line naming the site): a coordinator that substituted a key learns
// nothing from this site. Without an identity (--insecure, in-process sites) nothing is signed
// or checked.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "algorithms/secagg/protocol.h"
#include "kernels/core/status.h"
#include "node/coordinator_client.h"
#include "transport/proto/atoll.pb.h"

namespace atl::node {

// The bytes a site signs for its advertisement, all lengths and integers little-endian:
//   "atoll secagg keys v1" NUL | u32 bytes | experiment id | u64 round | u32 bytes | node id |
//   cipher public key (32 bytes) | mask public key (32 bytes)
std::string advertisement_statement(const std::string& experiment_id, uint64_t round,
                                    const std::string& node_id, const std::string& cipher_public,
                                    const std::string& mask_public);

// Every advertisement of `roster` checked against `identity`'s CA (see above); `own`: the
// keys this site advertised, which its own entry must carry unchanged.
Status check_roster_signatures(const transport::ClientIdentity& identity,
                               const std::string& experiment_id,
                               const atoll_pb::v1::SecAggRoster& roster,
                               const atoll_pb::v1::SecAggKeys& own);

class SecurePush {
 public:
  // `spec` from the Join's TrainSpec (enabled); `rounding_seed` seeds the stochastic rounding of
  // this site in this round; `stop` (may be null) ends the long-polls early (CANCELLED).
  SecurePush(const atoll_pb::v1::SecAggSpec& spec, uint64_t rounding_seed,
             const std::atomic<bool>* stop);

  // Stages 1-3 for `delta` (θ's numel values) with `header` (round, tokens, fingerprints).
  // The payload bytes pushed.
  StatusOr<uint64_t> push(CoordinatorClient& link, const UpdateHeader& header,
                          std::span<const float> delta);
  // Stage 4 after a successful push(); OK also when the round no longer needs this site.
  Status unmask(CoordinatorClient& link);

 private:
  Status stopped() const;

  atoll_pb::v1::SecAggSpec spec_;
  uint64_t rounding_seed_;
  const std::atomic<bool>* stop_;
  uint64_t round_ = 0;
  std::optional<algorithms::secagg::SiteSession> session_;
};

}  // namespace atl::node
