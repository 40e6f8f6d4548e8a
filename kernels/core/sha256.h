// SHA-256 fingerprints (parameters per round, global batches). OpenSSL EVP underneath.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace atl {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  Sha256Digest finish();

 private:
  void* ctx_;  // EVP_MD_CTX*
};

Sha256Digest sha256(const void* data, size_t n);
std::string to_hex(const uint8_t* data, size_t n);
inline std::string to_hex(const Sha256Digest& d) { return to_hex(d.data(), d.size()); }
inline std::string sha256_hex(const void* data, size_t n) { return to_hex(sha256(data, n)); }

}  // namespace atl
