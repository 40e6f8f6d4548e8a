#include "kernels/core/sha256.h"

#include <openssl/evp.h>

namespace atl {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}
Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Sha256::update(const void* data, size_t n) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n);
}
Sha256Digest Sha256::finish() {
  Sha256Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), d.data(), &len);
  return d;
}

Sha256Digest sha256(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.finish();
}

std::string to_hex(const uint8_t* data, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kHex[data[i] >> 4];
    s[2 * i + 1] = kHex[data[i] & 15];
  }
  return s;
}

}  // namespace atl
