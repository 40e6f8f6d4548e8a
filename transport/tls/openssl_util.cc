#include "transport/tls/openssl_util.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "kernels/core/sha256.h"

namespace atl::transport::ossl {

std::string last_error() {
  unsigned long code = ERR_get_error();
  std::string out;
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    out = buf;
  }
  ERR_clear_error();
  return out;
}

Status write_new_file(const std::string& path, const std::string& data, unsigned mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) return AlreadyExists(path + " already exists");
    return IoError("cannot create " + path + ": " + std::strerror(errno));
  }
  // The umask may have narrowed `mode`; key files must be exactly 0600, so set it explicitly.
  ::fchmod(fd, mode);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(path.c_str());
      return IoError("cannot write " + path + ": " + err);
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    const int err = !synced ? sync_errno : errno;
    ::unlink(path.c_str());
    return IoError("cannot write " + path + ": " + std::strerror(err));
  }
  return Status::Ok();
}

StatusOr<X509Ptr> parse_certificate_pem(const std::string& pem, const std::string& what) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return Internal("BIO_new_mem_buf failed");
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return InvalidArgument(what + " is not a PEM certificate (" + last_error() + ")");
  return cert;
}

StatusOr<PkeyPtr> parse_private_key_pem(const std::string& pem, const std::string& what) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return Internal("BIO_new_mem_buf failed");
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return InvalidArgument(what + " is not a PEM private key (" + last_error() + ")");
  return key;
}

namespace {
std::string bio_contents(BIO* bio) {
  BUF_MEM* mem = nullptr;
  BIO_get_mem_ptr(bio, &mem);
  return mem != nullptr ? std::string(mem->data, mem->length) : std::string();
}
}  // namespace

StatusOr<std::string> certificate_to_pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) {
    return Internal("cannot encode certificate: " + last_error());
  }
  return bio_contents(bio.get());
}

StatusOr<std::string> private_key_to_pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  // PKCS#8, unencrypted: the file mode (0600) protects it, as for ssh host keys.
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Internal("cannot encode private key: " + last_error());
  }
  return bio_contents(bio.get());
}

std::string name_entry(const X509_NAME* name, int nid) {
  if (name == nullptr) return "";
  int idx = X509_NAME_get_index_by_NID(name, nid, -1);
  if (idx < 0) return "";
  const X509_NAME_ENTRY* entry = X509_NAME_get_entry(name, idx);
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(entry);
  unsigned char* utf8 = nullptr;
  int len = ASN1_STRING_to_UTF8(&utf8, data);
  if (len < 0) return "";
  std::string out(reinterpret_cast<char*>(utf8), static_cast<size_t>(len));
  OPENSSL_free(utf8);
  return out;
}

std::string name_oneline(const X509_NAME* name) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || name == nullptr) return "";
  X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253);
  return bio_contents(bio.get());
}

std::string time_to_string(const ASN1_TIME* t) {
  struct tm tm {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return "(invalid time)";
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

StatusOr<int64_t> time_to_unix(const ASN1_TIME* t) {
  struct tm tm {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return InvalidArgument("invalid ASN.1 time");
  return static_cast<int64_t>(timegm(&tm));
}

StatusOr<std::string> fingerprint_sha256(X509* cert) {
  unsigned char* der = nullptr;
  int len = i2d_X509(cert, &der);
  if (len <= 0) return Internal("cannot DER-encode certificate: " + last_error());
  std::string hex = sha256_hex(der, static_cast<size_t>(len));
  OPENSSL_free(der);
  return hex;
}

}  // namespace atl::transport::ossl
