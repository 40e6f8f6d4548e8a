// The cryptographic primitives of secure aggregation (algorithms/secagg/protocol.h), all from
// OpenSSL's libcrypto:
//   X25519           per-round key pairs; a site has two, one to encrypt the Shamir shares it
//                    sends through the coordinator, one to agree on pairwise mask seeds
//   HKDF-SHA256      turns an X25519 shared point into a 32-byte key, bound to a purpose string
//   AES-256-GCM      authenticated encryption of the shares (random 96-bit nonce per message)
//   AES-256-CTR      the mask PRG: a 32-byte seed expands to a stream of uint32 words
// Keys and seeds are 32 bytes (Key32). Randomness comes from RAND_bytes (the OS CSPRNG).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kernels/core/status.h"

namespace atl::algorithms::secagg {

using Key32 = std::array<uint8_t, 32>;

struct KeyPair {
  Key32 private_key{};
  Key32 public_key{};
};

// 32 bytes from the OS CSPRNG.
StatusOr<Key32> random_key();
// A fresh X25519 key pair.
StatusOr<KeyPair> generate_key_pair();
// The public key of an X25519 private key (a reconstructed one, on the coordinator).
StatusOr<Key32> public_key_of(const Key32& private_key);
// HKDF-SHA256(ikm, salt = "", info = purpose) → 32 bytes.
StatusOr<Key32> hkdf_sha256(std::span<const uint8_t> ikm, std::string_view purpose);
// X25519(private_key, peer_public) then HKDF with `purpose`: both ends get the same key.
// INVALID_ARGUMENT for a peer key of low order (an all-zero shared point).
StatusOr<Key32> agree(const Key32& private_key, const Key32& peer_public, std::string_view purpose);

// AES-256-GCM: nonce (12) ‖ ciphertext ‖ tag (16), authenticated with `aad` too.
StatusOr<std::string> seal(const Key32& key, std::string_view plaintext, std::string_view aad);
// The plaintext, or DATA_LOSS when the message was altered, is for other `aad`, or another key.
StatusOr<std::string> open(const Key32& key, std::string_view sealed, std::string_view aad);

// out[k] ← word k of the AES-256-CTR keystream of `seed` (zero IV), little-endian.
Status expand_mask(const Key32& seed, std::span<uint32_t> out);

// A Key32 from exactly 32 bytes; INVALID_ARGUMENT naming `what` otherwise.
StatusOr<Key32> key_from_bytes(std::string_view bytes, const char* what);
inline std::string key_bytes(const Key32& k) {
  return std::string(reinterpret_cast<const char*>(k.data()), k.size());
}

}  // namespace atl::algorithms::secagg
