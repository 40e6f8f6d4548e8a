#include "transport/tls/revocation.h"

#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <set>
#include <system_error>

#include "kernels/core/file_io.h"
#include "transport/tls/ca.h"
#include "transport/tls/openssl_util.h"

namespace atl::transport {
namespace {

namespace fs = std::filesystem;
using namespace ossl;

using CrlPtr = std::unique_ptr<X509_CRL, Deleter<X509_CRL_free>>;
using RevokedPtr = std::unique_ptr<X509_REVOKED, Deleter<X509_REVOKED_free>>;

// A list larger than this is not one `ca revoke` wrote (each entry is about 40 bytes).
constexpr uint64_t kMaxCrlBytes = 16u << 20;
// How long a list `ca revoke` signs stays current for tools that check (openssl verify
// -crl_check refuses an expired list): ten years, and never past the CA certificate.
constexpr int64_t kListValiditySeconds = 3650LL * 24 * 3600;

std::string serial_to_hex(const ASN1_INTEGER* serial) {
  BignumPtr bn(ASN1_INTEGER_to_BN(serial, nullptr));
  if (!bn) return "";
  char* hex = BN_bn2hex(bn.get());
  if (hex == nullptr) return "";
  std::string out(hex);
  OPENSSL_free(hex);
  return out;
}

// "1A:2B", "0x1a2b", "serial=1A2B" (what `openssl x509 -serial` prints) -> BIGNUM; the hex as
// CertInfo::serial_hex writes it.
StatusOr<std::string> normalize_serial(const std::string& text) {
  std::string digits = text;
  if (digits.rfind("serial=", 0) == 0) digits = digits.substr(7);
  if (digits.rfind("0x", 0) == 0 || digits.rfind("0X", 0) == 0) digits = digits.substr(2);
  digits.erase(std::remove(digits.begin(), digits.end(), ':'), digits.end());
  const bool hex = !digits.empty() && digits.size() <= 40 &&
                   std::all_of(digits.begin(), digits.end(),
                               [](unsigned char c) { return std::isxdigit(c) != 0; });
  if (!hex)
    return InvalidArgument("--serial '" + text +
                           "' is not a certificate serial number: give its hex digits as `atoll "
                           "ca show --cert FILE` prints them (at most 40)");
  BIGNUM* raw = nullptr;
  if (BN_hex2bn(&raw, digits.c_str()) == 0)
    return InvalidArgument("--serial '" + text + "' is not hex");
  BignumPtr bn(raw);
  char* out = BN_bn2hex(bn.get());
  if (out == nullptr) return Internal("cannot print a serial: " + last_error());
  std::string normalized(out);
  OPENSSL_free(out);
  return normalized;
}

StatusOr<CrlPtr> parse_crl_pem(const std::string& pem, const std::string& what) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return Internal("BIO_new_mem_buf failed");
  CrlPtr crl(PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr));
  if (!crl)
    return InvalidArgument(what + " is not a PEM certificate revocation list (" + last_error() +
                           "); it should begin with -----BEGIN X509 CRL-----, as `atoll ca "
                           "revoke` writes it");
  return crl;
}

// The list's contents once its issuer and signature were checked against `ca`.
StatusOr<RevocationList> read_verified(X509_CRL* crl, X509* ca, const std::string& what) {
  if (X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(ca)) != 0)
    return InvalidArgument(what + " was issued by " + name_oneline(X509_CRL_get_issuer(crl)) +
                           ", not by this experiment's CA (" +
                           name_oneline(X509_get_subject_name(ca)) +
                           "): use the ca.crl of the CA directory that issued the sites' "
                           "certificates");
  if (X509_CRL_verify(crl, X509_get0_pubkey(ca)) != 1) {
    last_error();
    return InvalidArgument(what +
                           " does not verify with the CA's key (altered, or signed by "
                           "another CA of the same name): write it again with `atoll ca "
                           "revoke` in the CA directory");
  }
  RevocationList list;
  ATOLL_ASSIGN_OR_RETURN(list.this_update_unix, time_to_unix(X509_CRL_get0_lastUpdate(crl)));
  if (const ASN1_TIME* next = X509_CRL_get0_nextUpdate(crl); next != nullptr) {
    ATOLL_ASSIGN_OR_RETURN(list.next_update_unix, time_to_unix(next));
  }
  Asn1IntegerPtr number(
      static_cast<ASN1_INTEGER*>(X509_CRL_get_ext_d2i(crl, NID_crl_number, nullptr, nullptr)));
  if (number) {
    uint64_t n = 0;
    if (ASN1_INTEGER_get_uint64(&n, number.get()) == 1) list.number = n;
    last_error();
  }
  const STACK_OF(X509_REVOKED)* entries = X509_CRL_get_REVOKED(crl);
  for (int i = 0; entries != nullptr && i < sk_X509_REVOKED_num(entries); ++i) {
    const X509_REVOKED* entry = sk_X509_REVOKED_value(entries, i);
    const std::string serial = serial_to_hex(X509_REVOKED_get0_serialNumber(entry));
    if (serial.empty()) return InvalidArgument(what + " holds an unreadable serial number");
    auto when = time_to_unix(X509_REVOKED_get0_revocationDate(entry));
    list.revoked[serial] = when.ok() ? *when : 0;
  }
  return list;
}

struct LoadedCa {
  X509Ptr cert;
  PkeyPtr key;
};

StatusOr<LoadedCa> load_ca(const std::string& dir) {
  ATOLL_RETURN_IF_ERROR(check_private_key_mode(ca_key_path(dir)));
  auto ca_pem = read_file(ca_cert_path(dir));
  auto ca_key_pem = read_file(ca_key_path(dir));
  if (!ca_pem.ok() || !ca_key_pem.ok()) {
    if (ca_pem.status().code() == StatusCode::kNotFound ||
        ca_key_pem.status().code() == StatusCode::kNotFound)
      return NotFound("no CA in " + dir +
                      " (ca.crt and ca.key): revoke in the directory where `atoll ca init` "
                      "created the experiment's CA");
    return !ca_pem.ok() ? ca_pem.status() : ca_key_pem.status();
  }
  LoadedCa ca;
  ATOLL_ASSIGN_OR_RETURN(ca.cert, parse_certificate_pem(*ca_pem, ca_cert_path(dir)));
  ATOLL_ASSIGN_OR_RETURN(ca.key, parse_private_key_pem(*ca_key_pem, ca_key_path(dir)));
  if (X509_check_private_key(ca.cert.get(), ca.key.get()) != 1) {
    last_error();
    return InvalidArgument("ca.key in " + dir + " does not match ca.crt");
  }
  return ca;
}

// The certificate a RevokeTarget names (null for a bare serial), checked to be this CA's.
StatusOr<X509Ptr> target_certificate(const std::string& dir, const RevokeTarget& target, X509* ca) {
  const int given = !target.name.empty() + !target.cert_file.empty() + !target.serial_hex.empty();
  if (given != 1)
    return InvalidArgument("give exactly one of --name NAME (a certificate issued in " + dir +
                           "), --cert FILE or --serial HEX");
  if (!target.serial_hex.empty()) return X509Ptr();
  std::string file = target.cert_file;
  if (!target.name.empty()) {
    ATOLL_RETURN_IF_ERROR(validate_cert_name(target.name));
    file = cert_path(dir, target.name);
  }
  auto pem = read_file(file);
  if (!pem.ok()) {
    if (pem.status().code() == StatusCode::kNotFound && !target.name.empty())
      return NotFound("no certificate named '" + target.name + "' in " + dir + " (" + file +
                      "): give the certificate file with --cert, or its serial with --serial");
    return pem.status();
  }
  ATOLL_ASSIGN_OR_RETURN(X509Ptr cert, parse_certificate_pem(*pem, file));
  if (X509_NAME_cmp(X509_get_issuer_name(cert.get()), X509_get_subject_name(ca)) != 0 ||
      X509_verify(cert.get(), X509_get0_pubkey(ca)) != 1) {
    last_error();
    return InvalidArgument(file + " was not issued by the CA in " + dir + " (its issuer is " +
                           name_oneline(X509_get_issuer_name(cert.get())) +
                           "): revoke it in the CA directory that issued it");
  }
  return cert;
}

StatusOr<Asn1IntegerPtr> serial_integer(const std::string& hex) {
  BIGNUM* raw = nullptr;
  if (BN_hex2bn(&raw, hex.c_str()) == 0) return InvalidArgument("bad serial " + hex);
  BignumPtr bn(raw);
  Asn1IntegerPtr out(BN_to_ASN1_INTEGER(bn.get(), nullptr));
  if (!out) return Internal("cannot encode serial " + hex + ": " + last_error());
  return out;
}

// Signs `list` (numbered list.number) as an X.509 v2 CRL of `ca`, in PEM.
StatusOr<std::string> sign_list(const RevocationList& list, const LoadedCa& ca, time_t now) {
  CrlPtr crl(X509_CRL_new());
  if (!crl || X509_CRL_set_version(crl.get(), X509_CRL_VERSION_2) != 1 ||
      X509_CRL_set_issuer_name(crl.get(), X509_get_subject_name(ca.cert.get())) != 1)
    return Internal("cannot start a revocation list: " + last_error());
  ATOLL_ASSIGN_OR_RETURN(int64_t ca_not_after, time_to_unix(X509_get0_notAfter(ca.cert.get())));
  const time_t next = static_cast<time_t>(std::max<int64_t>(
      static_cast<int64_t>(now) + 1,
      std::min<int64_t>(static_cast<int64_t>(now) + kListValiditySeconds, ca_not_after)));
  Asn1TimePtr this_update(ASN1_TIME_set(nullptr, now));
  Asn1TimePtr next_update(ASN1_TIME_set(nullptr, next));
  if (!this_update || !next_update || X509_CRL_set1_lastUpdate(crl.get(), this_update.get()) != 1 ||
      X509_CRL_set1_nextUpdate(crl.get(), next_update.get()) != 1)
    return Internal("cannot date the revocation list: " + last_error());
  for (const auto& [serial, when] : list.revoked) {
    RevokedPtr entry(X509_REVOKED_new());
    ATOLL_ASSIGN_OR_RETURN(Asn1IntegerPtr number, serial_integer(serial));
    Asn1TimePtr date(ASN1_TIME_set(nullptr, static_cast<time_t>(when)));
    if (!entry || !date || X509_REVOKED_set_serialNumber(entry.get(), number.get()) != 1 ||
        X509_REVOKED_set_revocationDate(entry.get(), date.get()) != 1 ||
        X509_CRL_add0_revoked(crl.get(), entry.get()) != 1)
      return Internal("cannot list serial " + serial + ": " + last_error());
    (void)entry.release();  // owned by the list now
  }
  Asn1IntegerPtr number(ASN1_INTEGER_new());
  if (!number || ASN1_INTEGER_set_uint64(number.get(), list.number) != 1 ||
      X509_CRL_add1_ext_i2d(crl.get(), NID_crl_number, number.get(), 0, 0) != 1)
    return Internal("cannot number the revocation list: " + last_error());
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, ca.cert.get(), nullptr, nullptr, crl.get(), 0);
  X509ExtPtr aki(X509V3_EXT_conf_nid(nullptr, &ctx, NID_authority_key_identifier, "keyid:always"));
  if (!aki || X509_CRL_add_ext(crl.get(), aki.get(), -1) != 1)
    return Internal("cannot add the CA's key identifier to the list: " + last_error());
  if (X509_CRL_sort(crl.get()) != 1 || X509_CRL_sign(crl.get(), ca.key.get(), EVP_sha256()) <= 0)
    return Internal("cannot sign the revocation list: " + last_error());
  BioPtr out(BIO_new(BIO_s_mem()));
  if (!out || PEM_write_bio_X509_CRL(out.get(), crl.get()) != 1)
    return Internal("cannot write the revocation list: " + last_error());
  char* data = nullptr;
  const long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// Moves dir/<name>.crt and .key aside to dir/revoked/<name>-<serial>.*; returns the new stem.
StatusOr<std::string> move_revoked_pair(const std::string& dir, const std::string& name,
                                        const std::string& serial) {
  std::error_code ec;
  fs::create_directories(revoked_dir(dir), ec);
  if (ec) return IoError("cannot create " + revoked_dir(dir) + ": " + ec.message());
  fs::permissions(revoked_dir(dir), fs::perms::owner_all, fs::perm_options::replace, ec);
  const std::string stem = (fs::path(revoked_dir(dir)) / (name + "-" + serial)).string();
  for (const auto& [from, to] : {std::pair{cert_path(dir, name), stem + ".crt"},
                                 std::pair{key_path(dir, name), stem + ".key"}}) {
    if (!fs::exists(from, ec)) continue;
    fs::rename(from, to, ec);
    if (ec) return IoError("cannot move " + from + " to " + to + ": " + ec.message());
  }
  return stem;
}

}  // namespace

std::string crl_path(const std::string& dir) {
  return (fs::path(dir) / "ca.crl").string();
}
std::string revoked_dir(const std::string& dir) {
  return (fs::path(dir) / "revoked").string();
}

StatusOr<RevocationList> parse_revocation_list(const std::string& crl_pem,
                                               const std::string& ca_pem, const std::string& what) {
  ATOLL_ASSIGN_OR_RETURN(X509Ptr ca, parse_certificate_pem(ca_pem, "the CA certificate"));
  ATOLL_ASSIGN_OR_RETURN(CrlPtr crl, parse_crl_pem(crl_pem, what));
  return read_verified(crl.get(), ca.get(), what);
}

StatusOr<RevokeResult> ca_revoke(const std::string& dir, const RevokeTarget& target) {
  if (dir.empty()) return InvalidArgument("--dir is empty");
  ATOLL_ASSIGN_OR_RETURN(LoadedCa ca, load_ca(dir));
  ATOLL_ASSIGN_OR_RETURN(X509Ptr cert, target_certificate(dir, target, ca.cert.get()));
  RevokeResult result;
  if (cert) {
    result.serial_hex = serial_to_hex(X509_get0_serialNumber(cert.get()));
    result.name = name_entry(X509_get_subject_name(cert.get()), NID_commonName);
  } else {
    ATOLL_ASSIGN_OR_RETURN(result.serial_hex, normalize_serial(target.serial_hex));
  }
  if (result.serial_hex.empty()) return InvalidArgument("the certificate has no readable serial");

  RevocationList list;
  const std::string file = crl_path(dir);
  const std::string backup = crl_path(revoked_dir(dir));
  auto existing = read_file_bounded(file, kMaxCrlBytes);
  if (existing.ok()) {
    auto ca_pem = certificate_to_pem(ca.cert.get());
    if (!ca_pem.ok()) return ca_pem.status();
    ATOLL_ASSIGN_OR_RETURN(list, parse_revocation_list(*existing, *ca_pem, file));
  } else if (existing.status().code() != StatusCode::kNotFound) {
    return existing.status();
  } else if (fs::exists(backup)) {
    // A list was written here before: starting a new one would let its certificates back in
    // (a coordinator that read the old one keeps it, one started afresh would not).
    return FailedPrecondition(file + " is missing, but " + backup +
                              " shows a list was written here before: restore it (`cp " + backup +
                              " " + file +
                              "`) and revoke again; a new list would un-revoke "
                              "every certificate it holds");
  }
  const time_t now = std::time(nullptr);
  result.already = list.contains(result.serial_hex);
  if (!result.already) {
    list.revoked[result.serial_hex] = static_cast<int64_t>(now);
    list.number += 1;
    ATOLL_ASSIGN_OR_RETURN(std::string pem, sign_list(list, ca, now));
    ATOLL_RETURN_IF_ERROR(write_file_atomic(file, pem));
    std::error_code ec;
    fs::permissions(file,
                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                        fs::perms::others_read,
                    fs::perm_options::replace, ec);
    // A copy in revoked/: a ca.crl deleted by mistake is then noticed (above) and restored.
    fs::create_directories(revoked_dir(dir), ec);
    fs::permissions(revoked_dir(dir), fs::perms::owner_all, fs::perm_options::replace, ec);
    ATOLL_RETURN_IF_ERROR(write_file_atomic(backup, pem));
  }
  result.number = list.number;
  result.listed = list.revoked.size();
  // The pair issued here under that name (--name, or --cert naming the file in dir) moves aside.
  std::error_code ec;
  const bool pair_here =
      !target.name.empty() ||
      (!target.cert_file.empty() && !result.name.empty() && validate_cert_name(result.name).ok() &&
       fs::equivalent(target.cert_file, cert_path(dir, result.name), ec));
  if (pair_here) {
    ATOLL_ASSIGN_OR_RETURN(
        result.moved_to,
        move_revoked_pair(dir, target.name.empty() ? result.name : target.name, result.serial_hex));
  }
  return result;
}

// ---------------------------------------------------------------------------------------------

StatusOr<std::shared_ptr<RevocationWatch>> RevocationWatch::open(
    const std::string& path, const std::string& ca_pem,
    std::function<void(const std::string&)> note, std::chrono::milliseconds poll_interval) {
  ATOLL_RETURN_IF_ERROR(parse_certificate_pem(ca_pem, "the CA certificate").status());
  std::shared_ptr<RevocationWatch> watch(
      new RevocationWatch(path, ca_pem, std::move(note), poll_interval));
  watch->stamp_ = watch->stamp_now();
  if (watch->stamp_.exists) {
    ATOLL_ASSIGN_OR_RETURN(std::string pem, read_file_bounded(path, kMaxCrlBytes));
    ATOLL_ASSIGN_OR_RETURN(watch->list_, parse_revocation_list(pem, ca_pem, path));
  }
  watch->poller_ = std::thread([w = watch.get()] { w->poll_loop(); });
  return watch;
}

RevocationWatch::~RevocationWatch() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

RevocationWatch::FileStamp RevocationWatch::stamp_now() const {
  struct stat st {};
  FileStamp s;
  if (::stat(path_.c_str(), &st) != 0) return s;
  s.exists = true;
  s.device = st.st_dev;
  s.inode = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return s;
}

Status RevocationWatch::check(const std::string& name, const std::string& serial_hex) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = list_.revoked.find(serial_hex);
  if (it == list_.revoked.end()) return Status::Ok();
  char date[32] = "an unknown date";
  const time_t when = static_cast<time_t>(it->second);
  struct tm tm {};
  if (it->second > 0 && gmtime_r(&when, &tm) != nullptr)
    std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return PermissionDenied("the certificate of '" + name + "' (serial " + serial_hex +
                          ") was revoked on " + date + " (" + path_ + ", list number " +
                          std::to_string(list_.number) +
                          "): its calls are refused. If the site is trusted again, issue it a "
                          "new certificate (`atoll ca issue --dir CA_DIR --name " +
                          name + " --role node`) and restart it with the new pair");
}

Status RevocationWatch::refresh() {
  const FileStamp now = stamp_now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (now == stamp_) return Status::Ok();
    stamp_ = now;
  }
  if (!now.exists)
    return NotFound(path_ +
                    " was removed; the certificates it listed stay revoked until the "
                    "coordinator restarts");
  ATOLL_ASSIGN_OR_RETURN(std::string pem, read_file_bounded(path_, kMaxCrlBytes));
  auto fresh = parse_revocation_list(pem, ca_pem_, path_);
  if (!fresh.ok())
    return Status(fresh.status().code(),
                  fresh.status().message() + "; the list read before stays in force");
  std::vector<std::string> added;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (fresh->number < list_.number)
      return FailedPrecondition(path_ + " now holds list number " + std::to_string(fresh->number) +
                                ", older than number " + std::to_string(list_.number) +
                                " in force (an old copy?); the newer list stays in force");
    for (const auto& [serial, when] : fresh->revoked)
      if (!list_.contains(serial)) added.push_back(serial);
    list_ = std::move(*fresh);
    if (note_) {
      std::string line = path_ + ": list number " + std::to_string(list_.number) + " in force, " +
                         std::to_string(list_.revoked.size()) + " certificate(s) revoked";
      for (size_t i = 0; i < added.size(); ++i) line += (i == 0 ? "; new: " : ", ") + added[i];
      note_(line);
    }
  }
  if (!added.empty()) {
    std::lock_guard<std::mutex> lk(listeners_mu_);
    for (const auto& [id, fn] : listeners_) fn(added);
  }
  return Status::Ok();
}

uint64_t RevocationWatch::add_listener(std::function<void(const std::vector<std::string>&)> fn) {
  std::lock_guard<std::mutex> lk(listeners_mu_);
  listeners_[next_listener_] = std::move(fn);
  return next_listener_++;
}

void RevocationWatch::remove_listener(uint64_t id) {
  std::lock_guard<std::mutex> lk(listeners_mu_);
  listeners_.erase(id);
}

size_t RevocationWatch::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return list_.revoked.size();
}

uint64_t RevocationWatch::number() const {
  std::lock_guard<std::mutex> lk(mu_);
  return list_.number;
}

void RevocationWatch::poll_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_cv_.wait_for(lk, poll_interval_, [this] { return stopping_; })) {
    lk.unlock();
    const Status st = refresh();
    if (!st.ok() && note_) note_(st.message());
    lk.lock();
  }
}

}  // namespace atl::transport
