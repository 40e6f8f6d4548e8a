// RAII owners for OpenSSL handles and the small helpers the CA and credential code share.
#pragma once

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>
#include <string>

#include "kernels/core/status.h"

namespace atl::transport::ossl {

template <auto Fn>
struct Deleter {
  template <typename T>
  void operator()(T* p) const {
    if (p != nullptr) Fn(p);
  }
};

using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using X509NamePtr = std::unique_ptr<X509_NAME, Deleter<X509_NAME_free>>;
using X509ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using BignumPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using Asn1IntegerPtr = std::unique_ptr<ASN1_INTEGER, Deleter<ASN1_INTEGER_free>>;
using Asn1TimePtr = std::unique_ptr<ASN1_TIME, Deleter<ASN1_TIME_free>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;
using ExtKeyUsagePtr = std::unique_ptr<EXTENDED_KEY_USAGE, Deleter<EXTENDED_KEY_USAGE_free>>;
using X509StorePtr = std::unique_ptr<X509_STORE, Deleter<X509_STORE_free>>;
using X509StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX_free>>;

// The most recent OpenSSL error queue entry as text (and clears the queue); "" when empty.
std::string last_error();

// Writes atomically-enough for key material: creates with `mode`, fails if the file exists.
Status write_new_file(const std::string& path, const std::string& data, unsigned mode);

StatusOr<X509Ptr> parse_certificate_pem(const std::string& pem, const std::string& what);
StatusOr<PkeyPtr> parse_private_key_pem(const std::string& pem, const std::string& what);
StatusOr<std::string> certificate_to_pem(X509* cert);
StatusOr<std::string> private_key_to_pem(EVP_PKEY* key);

// First value of a name entry (e.g. NID_commonName) or "" when absent.
std::string name_entry(const X509_NAME* name, int nid);
// One-line "CN=...,OU=..." rendering of a name.
std::string name_oneline(const X509_NAME* name);
// ASN1_TIME as "YYYY-MM-DD HH:MM:SS UTC"; also as unix seconds.
std::string time_to_string(const ASN1_TIME* t);
StatusOr<int64_t> time_to_unix(const ASN1_TIME* t);
// SHA-256 over the DER encoding, lower-case hex.
StatusOr<std::string> fingerprint_sha256(X509* cert);

}  // namespace atl::transport::ossl
