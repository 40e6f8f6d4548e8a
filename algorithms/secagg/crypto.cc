#include "algorithms/secagg/crypto.h"

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>

namespace atl::algorithms::secagg {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* p) const { EVP_CIPHER_CTX_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

constexpr size_t kNonceBytes = 12;
constexpr size_t kTagBytes = 16;

Status crypto_error(const char* what) {
  return Internal(std::string("OpenSSL failed to ") + what);
}

Pkey private_pkey(const Key32& k) {
  return Pkey(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, k.data(), k.size()));
}

StatusOr<Key32> raw_public(EVP_PKEY* pkey) {
  Key32 pub{};
  size_t len = pub.size();
  if (EVP_PKEY_get_raw_public_key(pkey, pub.data(), &len) != 1 || len != pub.size())
    return crypto_error("read an X25519 public key");
  return pub;
}

}  // namespace

StatusOr<Key32> random_key() {
  Key32 k{};
  if (RAND_bytes(k.data(), static_cast<int>(k.size())) != 1)
    return crypto_error("draw random bytes");
  return k;
}

StatusOr<KeyPair> generate_key_pair() {
  KeyPair kp;
  ATOLL_ASSIGN_OR_RETURN(kp.private_key, random_key());
  ATOLL_ASSIGN_OR_RETURN(kp.public_key, public_key_of(kp.private_key));
  return kp;
}

StatusOr<Key32> public_key_of(const Key32& private_key) {
  Pkey pkey = private_pkey(private_key);
  if (!pkey) return crypto_error("load an X25519 private key");
  return raw_public(pkey.get());
}

StatusOr<Key32> hkdf_sha256(std::span<const uint8_t> ikm, std::string_view purpose) {
  PkeyCtx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  Key32 out{};
  size_t len = out.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), ikm.data(), static_cast<int>(ikm.size())) != 1 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), reinterpret_cast<const unsigned char*>(purpose.data()),
                                  static_cast<int>(purpose.size())) != 1 ||
      EVP_PKEY_derive(ctx.get(), out.data(), &len) != 1 || len != out.size())
    return crypto_error("derive an HKDF-SHA256 key");
  return out;
}

StatusOr<Key32> agree(const Key32& private_key, const Key32& peer_public,
                      std::string_view purpose) {
  Pkey mine = private_pkey(private_key);
  Pkey peer(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_public.data(),
                                        peer_public.size()));
  if (!mine || !peer) return crypto_error("load X25519 keys");
  PkeyCtx ctx(EVP_PKEY_CTX_new(mine.get(), nullptr));
  Key32 shared{};
  size_t len = shared.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 ||
      EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1)
    return crypto_error("set up an X25519 key agreement");
  // OpenSSL refuses a low-order peer key (the shared point would be zero).
  if (EVP_PKEY_derive(ctx.get(), shared.data(), &len) != 1 || len != shared.size())
    return InvalidArgument("X25519 key agreement failed: the peer's public key is not usable");
  return hkdf_sha256(shared, purpose);
}

StatusOr<std::string> seal(const Key32& key, std::string_view plaintext, std::string_view aad) {
  std::string out(kNonceBytes + plaintext.size() + kTagBytes, '\0');
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  if (RAND_bytes(o, static_cast<int>(kNonceBytes)) != 1) return crypto_error("draw a nonce");
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (!ctx ||
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), o) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len,
                        reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), o + kNonceBytes, &len,
                        reinterpret_cast<const unsigned char*>(plaintext.data()),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), o + kNonceBytes + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes),
                          o + kNonceBytes + plaintext.size()) != 1)
    return crypto_error("encrypt with AES-256-GCM");
  return out;
}

StatusOr<std::string> open(const Key32& key, std::string_view sealed, std::string_view aad) {
  if (sealed.size() < kNonceBytes + kTagBytes)
    return DataLoss("sealed message of " + std::to_string(sealed.size()) +
                    " bytes is shorter than a nonce and a tag");
  const auto* s = reinterpret_cast<const unsigned char*>(sealed.data());
  const size_t n = sealed.size() - kNonceBytes - kTagBytes;
  std::string out(n, '\0');
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), s) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len,
                        reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &len,
                        s + kNonceBytes, static_cast<int>(n)) != 1)
    return crypto_error("decrypt with AES-256-GCM");
  std::array<unsigned char, kTagBytes> tag{};
  std::memcpy(tag.data(), s + kNonceBytes + n, kTagBytes);
  if (EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes),
                          tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(out.data()) + len, &len) !=
          1)
    return DataLoss("sealed message failed authentication (altered, or for another key)");
  return out;
}

Status expand_mask(const Key32& seed, std::span<uint32_t> out) {
  if (out.empty()) return Status::Ok();
  std::array<unsigned char, 16> iv{};
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_ctr(), nullptr, seed.data(), iv.data()) != 1)
    return crypto_error("set up AES-256-CTR");
  // The keystream is the encryption of zeros; chunks keep the int length in range.
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  size_t left = out.size_bytes();
  std::memset(bytes, 0, left);
  constexpr size_t kChunk = size_t{1} << 28;
  while (left > 0) {
    const int n = static_cast<int>(std::min(left, kChunk));
    int len = 0;
    if (EVP_EncryptUpdate(ctx.get(), bytes, &len, bytes, n) != 1 || len != n)
      return crypto_error("expand a mask with AES-256-CTR");
    bytes += n;
    left -= static_cast<size_t>(n);
  }
  // Little-endian words on every host.
  if constexpr (std::endian::native == std::endian::big)
    for (uint32_t& w : out) w = __builtin_bswap32(w);
  return Status::Ok();
}

StatusOr<Key32> key_from_bytes(std::string_view bytes, const char* what) {
  Key32 k{};
  if (bytes.size() != k.size())
    return InvalidArgument(std::string(what) + " must be 32 bytes, got " +
                           std::to_string(bytes.size()));
  std::memcpy(k.data(), bytes.data(), k.size());
  return k;
}

}  // namespace atl::algorithms::secagg
