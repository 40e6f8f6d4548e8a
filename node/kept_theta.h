// What a site ends an experiment with (issue 21, "early stopping on each site's validation"):
// the best θ it has seen, scored on its own validation data, rather than whatever the last round
// left. The candidates are the global θ every round starts from (round 0: the experiment's
// initial θ, e.g. the imported base model; round N after the last round: the final θ) and, with
// kPersonal, the site's own θ_local after each round's inner steps (the global θ fine-tuned on
// its data, which never leaves the site: FedAvg + local fine-tuning).
//
// Keeping never changes what a site pushes or what the coordinator commits: the experiment's θ
// fingerprints are the same whatever each site keeps. Only the θ the site exports at the end
// (its checkpoint) differs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"
#include "node/checkpoint.h"

namespace atl::node {

// `atoll node --keep-best` / `atoll simulate --keep-best`.
//  kAuto:     kPersonal in a fine-tuning experiment (Hydra subnetworks or LoRA adapters of a base
//             model) when the site has validation data of its own (--val-split held-out or
//             --val-data); kOff otherwise (the default; docs/decisions.md). A plain DiLoCo
//             experiment does not say whether it started from a checkpoint: there a site asks.
//  kOff:      the site ends with the last global θ.
//  kGlobal:   the best of the global θ of every round.
//  kPersonal: the best of those and of the site's θ_local after every round.
enum class KeepBest { kAuto, kOff, kGlobal, kPersonal };
StatusOr<KeepBest> parse_keep_best(std::string_view text);  // auto, off, global, personal
const char* keep_best_name(KeepBest mode);
// What kAuto means for a site with (or without) validation data of its own, in a fine-tuning
// experiment or not; other modes as they are.
KeepBest resolve_keep_best(KeepBest asked, bool has_validation, bool fine_tuning);

// Where a candidate θ comes from.
struct KeptSource {
  enum class Kind { kGlobal, kPersonal };
  Kind kind = Kind::kGlobal;
  // kGlobal: the round this θ starts (0: the experiment's initial θ; after the last of N rounds,
  // N). kPersonal: the round whose inner steps produced θ_local.
  uint64_t round = 0;
  // "global θ of round 3", "own θ_local of round 2".
  std::string describe() const;
  bool operator==(const KeptSource&) const = default;
};

struct KeptTheta {
  KeptSource source;
  double site_val_bpb = 0;    // its bits per byte on the site's validation data
  std::vector<float> params;  // θ (a LoRA experiment: the adapters)
};

// The best candidate offered so far: lower bpb wins; a tie keeps the earlier one, so offering the
// same θ again (a round redone after a restart) changes nothing.
class BestTheta {
 public:
  // Returns whether the candidate became the kept θ.
  bool offer(const KeptSource& source, double site_val_bpb, std::span<const float> params);
  const std::optional<KeptTheta>& kept() const { return kept_; }
  void restore(KeptTheta kept) { kept_ = std::move(kept); }

 private:
  std::optional<KeptTheta> kept_;
};

// The kept θ on disk: a checkpoint (node/checkpoint.h) the site can export as is, whose metadata
// (atoll.kept.*) names the node, where θ came from and its score (as exact decimal), so that a
// restarted node goes on from it. `meta` gives the model, tokenizer, experiment and seed; a LoRA
// experiment (meta.lora enabled) stores the frozen base `lora_base` with the kept adapters.
Status save_kept_theta(const std::string& path, CheckpointMeta meta, const std::string& node_id,
                       const KeptTheta& kept, const algorithms::ParamLayout& layout,
                       const algorithms::ParamSet* lora_base);

// Reads a kept θ written by save_kept_theta for this experiment and node, with `numel` values.
// nullopt when there is no file; FAILED_PRECONDITION when it belongs to another experiment, node
// or model (the fix: another --state-dir).
StatusOr<std::optional<KeptTheta>> load_kept_theta(const std::string& path,
                                                   const std::string& experiment,
                                                   const std::string& node_id, size_t numel);

}  // namespace atl::node
