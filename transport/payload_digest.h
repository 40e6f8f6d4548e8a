// The tensor stream's payload check: XXH3-128 of the whole payload (libxxhash), carried in the
// first chunk's header (TensorHeader.payload_xxh3) and recomputed by the receiver as the chunks
// arrive. It guards against bugs and truncation end to end (and what a per-chunk CRC cannot: a
// sender that checksummed already-corrupted data); TLS authenticates the bytes, so the check
// need not be cryptographic. θ's fingerprint, which proves a copy equal to the coordinator's,
// stays SHA-256 (algorithms::params_fingerprint). docs/decisions.md, 2026-12-03.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace atl::transport {

inline constexpr size_t kPayloadDigestBytes = 16;

// Incremental XXH3-128 (seed 0). finish() may be called once.
class PayloadHasher {
 public:
  PayloadHasher();
  ~PayloadHasher();
  PayloadHasher(PayloadHasher&&) noexcept;
  PayloadHasher& operator=(PayloadHasher&&) noexcept;
  void update(const void* data, size_t n);
  // The digest: kPayloadDigestBytes bytes, canonical (big-endian) order.
  std::string finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// XXH3-128 of `bytes`, kPayloadDigestBytes bytes in canonical order.
std::string payload_digest(std::string_view bytes);

}  // namespace atl::transport
