// Central differential privacy of the outer step (docs/coordinator.md, "Differential privacy"):
// the coordinator clips each site's pseudo-gradient, averages the clipped updates with equal
// weights and adds Gaussian noise to the average, as Flower's
// DifferentialPrivacyServerSideFixedClipping and NVFlare's filters do. Pure math:
//
// Mechanism of one round, n sites aggregated, clip norm C, noise multiplier z:
//   Δ̃ᵢ = Δᵢ · min(1, C / ‖Δᵢ‖₂)                   (every ‖Δ̃ᵢ‖₂ ≤ C)
//   Δ  = (1/n) Σ Δ̃ᵢ + N(0, (z·C/n)² I)
// Sensitivity: adding or removing one site changes the sum S = Σ Δ̃ᵢ by at most C in L2, so
// S + N(0, (zC)² I) is the Gaussian mechanism with noise multiplier z; Δ is that sum divided by
// n, which (as in Flower) is treated as public (the round's participants), i.e. post-processing.
// The weights must be equal: a token-weighted mean lets one site's weight scale its
// contribution beyond C/n.
//
// Accountant (Rényi DP, Mironov 2017): with every site in every round (sampling rate q = 1) the
// Gaussian mechanism is (α, α/(2z²))-RDP for every order α > 1, and T rounds compose to
// T·α/(2z²). The (ε, δ) reported is Balle et al. 2020's conversion (Opacus's get_privacy_spent)
//   ε = min_α  T·α/(2z²) + log((α−1)/α) − (log δ + log α)/(α−1)
// over Opacus's default orders α ∈ {1.1, 1.2, …, 10.9} ∪ {12, 13, …, 63}; the classic
// conversion ε = min_α T·α/(2z²) + log(1/δ)/(α−1) is kept for comparison (it is never smaller).
// Sub-sampling of sites (q < 1) is not implemented.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace atl::algorithms {

struct PrivacyOptions {
  double clip_norm = 0.0;         // C ≥ 0; 0 = no differential privacy
  double noise_multiplier = 0.0;  // z ≥ 0; 0 = clipping only (ε = +inf)
  double delta = 1e-5;            // δ in (0, 1)
  double target_epsilon = 0.0;    // ≥ 0; 0 = no budget
  bool enabled() const { return clip_norm > 0; }
};

// Scales v to L2 norm ≤ clip_norm (each element rounded to fp32 once) when its norm `norm`
// (‖v‖₂, computed by the caller) is above it. Returns whether it scaled.
bool clip_to_norm(std::span<float> v, double norm, double clip_norm);

// out[i] += stddev · N(0, 1), the normal draw number first_index + i of the stream keyed by
// (seed, round): the same (seed, round, index) gives the same bits on every run and restart.
// A streaming round passes its fragment's offset so every θ element has its own draw.
void add_privacy_noise(std::span<float> out, double stddev, uint64_t seed, uint64_t round,
                       uint64_t first_index);

// The noise's standard deviation on the mean of `sites` clipped updates: z·C/n.
double privacy_noise_stddev(const PrivacyOptions& options, uint64_t sites);

// RDP of order α of one round of the Gaussian mechanism with noise multiplier z (q = 1).
double gaussian_rdp(double alpha, double noise_multiplier);
// The orders the accountant minimizes over (Opacus's DEFAULT_ALPHAS).
const std::vector<double>& rdp_orders();
// ε after `rounds` rounds at δ: Balle et al. 2020 (reported) and the classic conversion.
// +inf when z = 0 and rounds > 0; 0 when rounds = 0.
double epsilon_after_rounds(uint64_t rounds, double noise_multiplier, double delta);
double epsilon_after_rounds_classic(uint64_t rounds, double noise_multiplier, double delta);

// The largest round count whose ε is ≤ target (0 when even one round exceeds it), searched up
// to `max_rounds`; and the smallest noise multiplier (to 3 significant digits, rounded up)
// whose ε after `rounds` rounds is ≤ target, +inf when none up to 1e9 is: the RDP-to-(ε, δ)
// conversion has a floor that no noise goes below (0.1029 at δ = 1e-5, see
// epsilon_floor), and a smaller target once searched for ever.
uint64_t max_rounds_within(double target_epsilon, double noise_multiplier, double delta,
                           uint64_t max_rounds);
double min_noise_multiplier_within(double target_epsilon, uint64_t rounds, double delta);
// The smallest ε any noise multiplier reaches at `delta` (ε with z = 1e9): the conversion's own
// term, whatever the rounds.
double epsilon_floor(double delta);

}  // namespace atl::algorithms
