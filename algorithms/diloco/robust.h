// Screening and robust aggregation of pseudo-gradients: pure math over the updates of one round
// (docs/coordinator.md, "Screening and robust aggregation"). The coordinator screens every
// round's updates, then aggregates them with the experiment's aggregator:
//
// Screening. nᵢ = ‖Δᵢ‖₂ (in double, element order). The round's limit is
//   L = min(norm_multiple × med(n), max_norm)      (max_norm = 0: no absolute bound)
// and an update with nᵢ > L is clipped (Δᵢ ← Δᵢ · L/nᵢ) or dropped. med is the LOWER median
// (element ⌈k/2⌉ of the sorted norms) of the non-zero norms: with two updates, one of them alone
// cannot raise the limit above 10× the other (with the mean of the two middle norms a single
// huge update would always be under 10× the median), and zero updates (which cannot be too
// large) do not pull the limit down to 0. Updates at or under L are left bit for bit untouched, so
// screening costs an honest run nothing but the norms.
//
// Aggregators (all deterministic: updates sorted by node id, per-element sums in double in a
// fixed order; the coordinate-wise ones sort each column by value, which is order-free):
//   mean          Δ = Σ wᵢΔᵢ / Σ wᵢ, wᵢ = tokens (aggregate_pseudo_gradients, outer.h)
//   clipped-mean  each Δᵢ scaled to at most clip_multiple × med(n), then the weighted mean
//   trimmed-mean  per element, the c = ⌊β·k⌋ smallest and c largest of the k values dropped, the
//                 mean of the k − 2c others (Flower's FedTrimmedAvg; unweighted)
//   median        per element, the median of the k values (Flower's FedMedian; unweighted; an
//                 even count takes the mean of the two middle values)
//   krum          sᵢ = Σ of the k − f − 2 smallest squared distances ‖Δᵢ − Δⱼ‖² (j ≠ i, at
//                 least 1, at most k − 1); the update with the smallest score (Krum), or the
//                 token-weighted mean of the m smallest (Multi-Krum). Ties go to the lower node
//                 id. Costs k(k−1)/2 distance passes over numel elements.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "algorithms/diloco/outer.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

enum class AggregatorKind { kMean, kClippedMean, kTrimmedMean, kMedian, kKrum };
// "mean", "clipped-mean", "trimmed-mean", "median", "krum".
const char* aggregator_name(AggregatorKind kind);
StatusOr<AggregatorKind> parse_aggregator(const std::string& name);

struct AggregatorOptions {
  AggregatorKind kind = AggregatorKind::kMean;
  double clip_multiple = 1.0;   // clipped-mean: > 0
  double trim_fraction = 0.2;   // trimmed-mean: β in [0, 0.5) (Flower's default)
  uint32_t krum_byzantine = 1;  // krum: f, the Byzantine sites it tolerates
  uint32_t krum_keep = 1;       // krum: m ≥ 1 (1 = Krum, > 1 = Multi-Krum)
};

enum class ScreenMode { kOff, kClip, kDrop };
// "off", "clip", "drop".
const char* screen_mode_name(ScreenMode mode);
StatusOr<ScreenMode> parse_screen_mode(const std::string& name);

// The defaults (drop above 5 × the median norm) leave honest runs untouched (their norms are
// within ~1.1× of each other in the demo) and leave out the benchmark's attacks, which are ≥ 10×
// (docs/decisions.md, "Attack benchmark (issue 15, item 4)").
struct ScreenOptions {
  ScreenMode mode = ScreenMode::kDrop;
  double norm_multiple = 5.0;  // ≥ 1
  double max_norm = 0.0;        // ≥ 0; 0 = no absolute bound
};

// ‖v‖₂, summed in double in element order (finite for any finite fp32 input).
double l2_norm(std::span<const float> v);
// The lower median of `values`: element ⌈k/2⌉ (1-based) of the sorted values, i.e. the middle
// one for an odd count and the smaller middle one for an even count; 0 when empty.
double lower_median_of(std::vector<double> values);

// The round's reference norm: the lower median of the non-zero finite norms (0 when none).
// Screening and clipped-mean measure updates against it.
double reference_norm(const std::vector<double>& norms);

// What screening decided for one update.
enum class ScreenAction { kKept, kClipped, kDropped };
const char* screen_action_name(ScreenAction action);  // "kept", "clipped", "dropped"

struct ScreenDecision {
  double median_norm = 0.0;           // lower median of the non-zero norms (0: none)
  double limit = 0.0;                 // L; +inf when screening is off
  std::vector<ScreenAction> actions;  // one per norm, in the same order
};
// The screening verdicts for updates of norms `norms` (one per update, any order).
ScreenDecision screen_norms(const std::vector<double>& norms, const ScreenOptions& options);

// v ← v · factor, each element rounded to fp32 once.
void scale_values(std::span<float> v, double factor);

// out (numel) ← the aggregate of `updates` (sorted by node id, strictly ascending, each with
// out.size() elements and tokens > 0). Values are not checked for finiteness here.
Status aggregate_robust(const std::vector<Update>& sorted_by_node_id,
                        const AggregatorOptions& options, std::span<float> out);

// The coordinate-wise rules on one column of values (reordered in place): trimmed mean with
// c = ⌊β·k⌋ cut at each end, and the median. Columns are never empty.
float trimmed_mean_of(std::span<float> column, double trim_fraction);
float median_value_of(std::span<float> column);

}  // namespace atl::algorithms
