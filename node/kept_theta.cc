#include "node/kept_theta.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace atl::node {

namespace al = atl::algorithms;

namespace {

// The extra metadata keys of a kept-θ checkpoint (written as atoll.x.<key>).
constexpr const char* kNodeKey = "kept.node";
constexpr const char* kSourceKey = "kept.source";
constexpr const char* kRoundKey = "kept.round";
constexpr const char* kBpbKey = "kept.site_val_bpb";  // C99 hex float: exact round trip

const char* kind_name(KeptSource::Kind kind) {
  return kind == KeptSource::Kind::kGlobal ? "global" : "personal";
}

}  // namespace

StatusOr<KeepBest> parse_keep_best(std::string_view text) {
  if (text == "auto") return KeepBest::kAuto;
  if (text == "off") return KeepBest::kOff;
  if (text == "global") return KeepBest::kGlobal;
  if (text == "personal") return KeepBest::kPersonal;
  return InvalidArgument("--keep-best '" + std::string(text) +
                         "': use auto, off, global or personal");
}

const char* keep_best_name(KeepBest mode) {
  switch (mode) {
    case KeepBest::kAuto:
      return "auto";
    case KeepBest::kOff:
      return "off";
    case KeepBest::kGlobal:
      return "global";
    case KeepBest::kPersonal:
      return "personal";
  }
  return "?";
}

KeepBest resolve_keep_best(KeepBest asked, bool has_validation, bool fine_tuning) {
  if (asked != KeepBest::kAuto) return asked;
  return has_validation && fine_tuning ? KeepBest::kPersonal : KeepBest::kOff;
}

std::string KeptSource::describe() const {
  return (kind == Kind::kGlobal ? "global θ of round " : "own θ_local of round ") +
         std::to_string(round);
}

bool BestTheta::offer(const KeptSource& source, double site_val_bpb,
                      std::span<const float> params) {
  if (kept_ && !(site_val_bpb < kept_->site_val_bpb)) return false;
  if (!kept_) kept_.emplace();
  kept_->source = source;
  kept_->site_val_bpb = site_val_bpb;
  kept_->params.assign(params.begin(), params.end());
  return true;
}

Status save_kept_theta(const std::string& path, CheckpointMeta meta, const std::string& node_id,
                       const KeptTheta& kept, const al::ParamLayout& layout,
                       const al::ParamSet* lora_base) {
  al::ParamSet theta(layout);
  if (theta.numel() != kept.params.size())
    return InvalidArgument("kept θ has " + std::to_string(kept.params.size()) +
                           " values, the layout " + std::to_string(theta.numel()));
  theta.vec() = kept.params;
  char bpb[64];
  std::snprintf(bpb, sizeof(bpb), "%a", kept.site_val_bpb);
  meta.round = static_cast<int64_t>(kept.source.round);
  meta.extra[kNodeKey] = node_id;
  meta.extra[kSourceKey] = kind_name(kept.source.kind);
  meta.extra[kRoundKey] = std::to_string(kept.source.round);
  meta.extra[kBpbKey] = bpb;
  if (al::lora_enabled(meta.lora)) {
    if (!lora_base) return InvalidArgument("a kept LoRA θ needs its frozen base to be saved");
    return save_checkpoint(path, meta, *lora_base, nullptr, &theta);
  }
  return save_checkpoint(path, meta, theta, nullptr);
}

StatusOr<std::optional<KeptTheta>> load_kept_theta(const std::string& path,
                                                   const std::string& experiment,
                                                   const std::string& node_id, size_t numel) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<KeptTheta>();
  ATOLL_ASSIGN_OR_RETURN(LoadedCheckpoint ck, load_checkpoint(path));
  const auto& x = ck.meta.extra;
  auto get = [&](const char* key) -> std::string {
    auto it = x.find(key);
    return it == x.end() ? std::string() : it->second;
  };
  const std::string owner = get(kNodeKey);
  if (ck.meta.experiment != experiment || owner != node_id)
    return FailedPrecondition("the kept θ in " + path + " belongs to node '" + owner +
                              "' of experiment '" + ck.meta.experiment + "', not to '" + node_id +
                              "' of '" + experiment + "': give this node its own --state-dir");
  const al::ParamSet& theta = al::lora_enabled(ck.meta.lora) ? ck.adapters : ck.params;
  if (theta.numel() != numel)
    return FailedPrecondition("the kept θ in " + path + " has " + std::to_string(theta.numel()) +
                              " values, this experiment's θ " + std::to_string(numel) +
                              ": give this node its own --state-dir");
  KeptTheta kept;
  const std::string source = get(kSourceKey), round = get(kRoundKey), bpb = get(kBpbKey);
  if (source != "global" && source != "personal")
    return InvalidArgument(path + ": metadata " + kSourceKey + " is '" + source +
                           "', not global or personal (not a kept θ?)");
  kept.source.kind = source == "global" ? KeptSource::Kind::kGlobal : KeptSource::Kind::kPersonal;
  char* end = nullptr;
  kept.source.round = std::strtoull(round.c_str(), &end, 10);
  if (round.empty() || *end != '\0')
    return InvalidArgument(path + ": metadata " + kRoundKey + " '" + round + "' is not a round");
  kept.site_val_bpb = std::strtod(bpb.c_str(), &end);
  if (bpb.empty() || *end != '\0')
    return InvalidArgument(path + ": metadata " + kBpbKey + " '" + bpb + "' is not a number");
  kept.params = theta.vec();
  return std::optional<KeptTheta>(std::move(kept));
}

}  // namespace atl::node
