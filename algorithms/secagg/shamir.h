// Shamir secret sharing, t of n, bytewise over GF(2^8) (the AES field, polynomial x⁸+x⁴+x³+x+1).
// Each byte of the secret is the constant term of its own random polynomial of degree t − 1;
// share x (1..255) holds every polynomial's value at x. Any t shares give the secret back by
// Lagrange interpolation at 0; t − 1 shares give a value independent of it (a wrong secret),
// since every candidate secret is equally consistent with them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/status.h"

namespace atl::algorithms::secagg {

struct Share {
  uint8_t x = 0;  // the evaluation point, 1..255 (the holder's index in the round)
  std::string y;  // one byte per secret byte
};

// Multiplication in GF(2^8).
uint8_t gf256_mul(uint8_t a, uint8_t b);

// Shares of `secret` at x = 1..count, any `threshold` of which reconstruct it. Needs
// 1 ≤ threshold ≤ count ≤ 255. Coefficients from the OS CSPRNG.
StatusOr<std::vector<Share>> shamir_split(std::string_view secret, uint32_t threshold,
                                          uint32_t count);
// The secret from `shares` (distinct x ≠ 0, equal lengths). With fewer shares than the
// threshold the result is a wrong secret: the caller must hold at least `threshold`.
StatusOr<std::string> shamir_combine(std::span<const Share> shares);

}  // namespace atl::algorithms::secagg
