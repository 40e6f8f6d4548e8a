#include "algorithms/secagg/shamir.h"

#include <openssl/rand.h>

#include <set>

namespace atl::algorithms::secagg {
namespace {

uint8_t gf256_pow(uint8_t a, int e) {
  uint8_t r = 1;
  while (e > 0) {
    if (e & 1) r = gf256_mul(r, a);
    a = gf256_mul(a, a);
    e >>= 1;
  }
  return r;
}

// a⁻¹ = a^254 (the multiplicative group has order 255); a ≠ 0.
uint8_t gf256_inv(uint8_t a) { return gf256_pow(a, 254); }

}  // namespace

uint8_t gf256_mul(uint8_t a, uint8_t b) {
  uint8_t p = 0;
  for (int i = 0; i < 8; ++i) {
    if (b & 1) p ^= a;
    const bool carry = a & 0x80;
    a = static_cast<uint8_t>(a << 1);
    if (carry) a ^= 0x1b;
    b >>= 1;
  }
  return p;
}

StatusOr<std::vector<Share>> shamir_split(std::string_view secret, uint32_t threshold,
                                          uint32_t count) {
  if (threshold < 1 || threshold > count || count > 255)
    return InvalidArgument("Shamir sharing needs 1 <= threshold <= shares <= 255, got threshold " +
                           std::to_string(threshold) + " of " + std::to_string(count));
  // coeffs[b·(t−1) + k]: coefficient of x^(k+1) of byte b's polynomial.
  const size_t degree = threshold - 1;
  std::vector<unsigned char> coeffs(secret.size() * degree);
  if (!coeffs.empty() && RAND_bytes(coeffs.data(), static_cast<int>(coeffs.size())) != 1)
    return Internal("OpenSSL failed to draw random bytes for Shamir coefficients");
  std::vector<Share> shares(count);
  for (uint32_t s = 0; s < count; ++s) {
    const uint8_t x = static_cast<uint8_t>(s + 1);
    shares[s].x = x;
    shares[s].y.resize(secret.size());
    for (size_t b = 0; b < secret.size(); ++b) {
      // Horner from the highest coefficient down to the secret byte.
      uint8_t acc = 0;
      for (size_t k = degree; k > 0; --k) acc = gf256_mul(acc, x) ^ coeffs[b * degree + k - 1];
      acc = gf256_mul(acc, x) ^ static_cast<uint8_t>(secret[b]);
      shares[s].y[b] = static_cast<char>(acc);
    }
  }
  return shares;
}

StatusOr<std::string> shamir_combine(std::span<const Share> shares) {
  if (shares.empty()) return InvalidArgument("Shamir reconstruction needs at least one share");
  std::set<uint8_t> xs;
  for (const Share& s : shares) {
    if (s.x == 0 || !xs.insert(s.x).second)
      return InvalidArgument("Shamir shares need distinct non-zero x, got x = " +
                             std::to_string(s.x) + " twice or zero");
    if (s.y.size() != shares[0].y.size())
      return InvalidArgument("Shamir shares differ in length (" + std::to_string(s.y.size()) +
                             " and " + std::to_string(shares[0].y.size()) + " bytes)");
  }
  // Lagrange basis at 0: l_i = Π_{j≠i} x_j / (x_j − x_i); in GF(2^8) subtraction is XOR.
  std::vector<uint8_t> basis(shares.size());
  for (size_t i = 0; i < shares.size(); ++i) {
    uint8_t num = 1, den = 1;
    for (size_t j = 0; j < shares.size(); ++j) {
      if (j == i) continue;
      num = gf256_mul(num, shares[j].x);
      den = gf256_mul(den, shares[j].x ^ shares[i].x);
    }
    basis[i] = gf256_mul(num, gf256_inv(den));
  }
  std::string secret(shares[0].y.size(), '\0');
  for (size_t b = 0; b < secret.size(); ++b) {
    uint8_t acc = 0;
    for (size_t i = 0; i < shares.size(); ++i)
      acc ^= gf256_mul(basis[i], static_cast<uint8_t>(shares[i].y[b]));
    secret[b] = static_cast<char>(acc);
  }
  return secret;
}

}  // namespace atl::algorithms::secagg
