// The coordinator's state of one securely aggregated round (docs/coordinator.md, "Secure
// aggregation"; the math is algorithms/secagg/protocol.h). The round engine owns one per open
// round of an experiment with [secagg] on and calls it under its lock; the long-polls, the
// deadlines and the commit stay the engine's. Stages:
//   kAdvertise  participants send their public keys; closes when every live participant has
//               (or at the round deadline with ≥ t): the roster U1, indices 1.. in node order
//   kShare      roster members send sealed shares for each other; closes when every live member
//               has (or at the deadline with ≥ t): U2
//   kCollect    members of U2 push masked inputs, summed mod 2^32 on arrival (no single input
//               is kept); closes when every live member of U2 has pushed (or at the deadline
//               with ≥ max(t, min_nodes)): U3
//   kUnmask     members of U3 reveal shares; with t reveals the round is ready to commit
// With masking off only kCollect is used (everyone is a member of U2 and U3, nothing to unmask).
// A stage that closes at the deadline (with enough sites) gives the next one a deadline of its
// own (take_deadline_note: the engine sets round_deadline_s from then), so that the sites it
// kept can finish the round. A node whose process restarted advertises new keys: while the
// roster is open they replace its old ones; once it is fixed the node has departed the round
// (its old keys died with the old process), no stage waits for it, and it waits for the next.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "algorithms/secagg/protocol.h"
#include "algorithms/secagg/quantize.h"
#include "coordinator/experiment_config.h"
#include "kernels/core/status.h"
#include "transport/proto/atoll.pb.h"

namespace atl::coordinator {

class SecAggRound {
 public:
  enum class Stage { kAdvertise, kShare, kCollect, kUnmask, kReady };

  // `participants` sorted; numel: θ's element count (the length of every masked input).
  SecAggRound(uint64_t round, std::vector<std::string> participants, const SecAggSection& config,
              uint32_t min_nodes, uint64_t numel);

  Stage stage() const { return stage_; }
  uint64_t round() const { return round_; }
  bool masking() const { return masking_; }
  // t of the round (0 before the roster is fixed).
  uint32_t threshold() const { return threshold_; }

  // Stage calls from `node` (an authenticated participant of the round). Idempotent where a
  // node may call again with the same message (a long-poll that timed out).
  // `certificate_pem`: the certificate `node` presented in its mTLS handshake ("" without
  // mTLS), forwarded in the roster with the advertisement's signature.
  Status advertise(const std::string& node, const atoll_pb::v1::SecAggKeys& keys,
                   const std::string& certificate_pem = "");
  Status share(const std::string& node, const atoll_pb::v1::SecAggShares& shares);
  // Whether `node` restarted after the roster was fixed (advertise): it cannot take part in
  // this round any more; the engine gives it no task until the next.
  bool departed(const std::string& node) const { return departed_.count(node) > 0; }
  // A new process of `node` joined (its keys and shares died with the old one): before the
  // roster is fixed its advertisement is forgotten (the new process advertises again); after,
  // it has departed. Nothing with masking off (there are no keys).
  void process_restarted(const std::string& node);
  // Whether `node` may push its masked input now (a member of U2 in kCollect).
  Status check_push(const std::string& node) const;
  // Adds a pushed input (numel words, little-endian) to the sum; `node` is then in U3.
  Status add_masked(const std::string& node, const std::string& payload);
  Status reveal(const std::string& node, const atoll_pb::v1::SecAggReveal& reveal);

  // Answers of the long-polls once their stage is over.
  void fill_roster(const std::string& node, atoll_pb::v1::SecAggRoster& out) const;
  void fill_shares_for(const std::string& node, atoll_pb::v1::SecAggShares& out) const;
  void fill_unmask_task(const std::string& node, atoll_pb::v1::SecAggUnmaskTask& out) const;

  // Moves to the next stage when the current one is complete. `live` says whether a node is
  // still an active member; `deadline_passed`: the round's deadline is over. Returns a line
  // saying why the round cannot complete (the engine restarts it), or nothing.
  std::optional<std::string> advance(const std::function<bool(const std::string&)>& live,
                                     bool deadline_passed, bool receiving);

  // The line saying which stage the last advance closed at the deadline and without whom
  // (nothing when none did); the engine then gives the next stage a new deadline.
  std::optional<std::string> take_deadline_note();

  // The nodes whose masked inputs are in the sum (U3), sorted.
  std::vector<std::string> pushed() const;
  // kReady: what the commit needs to compute the sum of the quantized inputs (without the
  // engine's lock: the unmasking expands a PRG of numel words per secret).
  struct Result {
    algorithms::secagg::UnmaskInput unmask;  // unmask.masked_sum is the plain sum without masking
    bool masking = true;
    uint64_t sites = 0;  // |U3|: the mean divides the sum by it
  };
  Result take_result();

 private:
  uint32_t index_of(const std::string& node) const;  // 0: not on the roster

  const uint64_t round_;
  const std::vector<std::string> participants_;
  const uint32_t config_threshold_;
  const uint32_t min_nodes_;
  const uint64_t numel_;
  const bool masking_;
  Stage stage_;
  uint32_t threshold_ = 0;
  std::map<std::string, atoll_pb::v1::SecAggKeys> advertised_;
  std::map<std::string, std::string> certificates_;  // node → its mTLS certificate (PEM)
  std::map<std::string, uint32_t> roster_;  // U1: node → index
  // Sealed shares: to → from → message, of the nodes that shared.
  std::map<uint32_t, std::map<uint32_t, std::string>> mailbox_;
  std::set<std::string> shared_;  // nodes that sent their shares
  std::set<std::string> u2_;      // fixed when kShare closes
  std::set<std::string> u3_;      // pushed
  std::vector<uint32_t> sum_;     // Σ masked inputs mod 2^32 (numel)
  std::map<uint32_t, algorithms::secagg::Reveal> reveals_;
  std::set<std::string> departed_;  // restarted after the roster was fixed
  std::optional<std::string> deadline_note_;
};

}  // namespace atl::coordinator
