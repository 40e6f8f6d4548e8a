// Replay detection: is a site's update a repeat of its previous accepted one? Pure math over
// two updates of one site (docs/coordinator.md, "Screening and robust aggregation").
//
// The coordinator cannot keep every site's previous Δ (numel fp32 each: 4 GB a site for a 1B
// model), so it keeps a count sketch of it: kReplaySketchBuckets doubles a site (32 KB), and
//   S[b] = Σ_{i : h(i) = b} s(i) · Δ[i]          (h: element → bucket, s: element → ±1)
// where i is the θ element the value belongs to (Hydra: indices[j]; otherwise the position j)
// and h, s are fixed hashes of i. ⟨S(a), S(b)⟩ is an unbiased estimate of ⟨a, b⟩ with a standard
// deviation of at most ‖a‖‖b‖/√buckets, so the sketches' cosine is the updates' cosine within
// ~1/√4096 = 0.016 (one standard deviation). A bit-for-bit repeat has the same sketch, cosine
// 1 to the last bit but rounding; a repeat re-encoded by a lossy codec stays within ~1e-4 of 1.
// Every sum is in double, in element order: the sketch of an update is reproducible bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace atl::algorithms {

inline constexpr size_t kReplaySketchBuckets = 4096;

// The count sketch (kReplaySketchBuckets values) of `values`. `indices`: the θ element of each
// value (same size as values), or empty: value j is element j.
std::vector<double> replay_sketch(std::span<const float> values,
                                  std::span<const uint32_t> indices = {});

// cos(a, b) = ⟨a, b⟩ / (‖a‖‖b‖) of two sketches of the same size; 0 when either is all zero (a
// zero update repeats nothing) or the sizes differ.
double sketch_cosine(std::span<const double> a, std::span<const double> b);

}  // namespace atl::algorithms
