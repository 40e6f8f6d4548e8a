#include "transport/tls/ca.h"

#include <arpa/inet.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>
#include <system_error>

#include "kernels/core/file_io.h"
#include "transport/tls/openssl_util.h"

namespace atl::transport {
namespace {

namespace fs = std::filesystem;
using namespace ossl;

// Tolerated clock skew between the issuing machine and the sites: certificates are valid from
// five minutes in the past.
constexpr long kBackdateSeconds = 300;
constexpr size_t kMaxNameLength = 64;

StatusOr<PkeyPtr> generate_p256() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return Internal("EC P-256 key generation failed: " + last_error());
  return key;
}

// 159 random bits: positive, at most 20 octets (RFC 5280 §4.1.2.2), unpredictable.
Status set_random_serial(X509* cert) {
  BignumPtr bn(BN_new());
  if (!bn || BN_rand(bn.get(), 159, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1) {
    return Internal("cannot draw a random serial: " + last_error());
  }
  Asn1IntegerPtr serial(BN_to_ASN1_INTEGER(bn.get(), nullptr));
  if (!serial || X509_set_serialNumber(cert, serial.get()) != 1) {
    return Internal("cannot set serial: " + last_error());
  }
  return Status::Ok();
}

Status add_name_entry(X509_NAME* name, const char* field, const std::string& value) {
  if (X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(value.c_str()),
                                 static_cast<int>(value.size()), -1, 0) != 1) {
    return Internal(std::string("cannot set ") + field + ": " + last_error());
  }
  return Status::Ok();
}

// Adds an extension from a constant OpenSSL config string (never user input).
Status add_conf_ext(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  X509ExtPtr ext(X509V3_EXT_conf_nid(nullptr, ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return Internal(std::string("cannot add extension ") + OBJ_nid2sn(nid) + "=" + value + ": " +
                    last_error());
  }
  return Status::Ok();
}

bool is_ip_literal(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

bool valid_dns_san(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '*';
    if (!ok) return false;
  }
  return true;
}

// What a subject alternative name means, for finding repeats: an IP literal's address bytes
// ("::1" and "0:0::1" are one address), a DNS name in lower case (DNS names are case-insensitive).
std::string san_identity(const std::string& s) {
  unsigned char buf[16];
  if (inet_pton(AF_INET, s.c_str(), buf) == 1)
    return "IP4:" + std::string(reinterpret_cast<char*>(buf), 4);
  if (inet_pton(AF_INET6, s.c_str(), buf) == 1)
    return "IP6:" + std::string(reinterpret_cast<char*>(buf), 16);
  std::string lower = s;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return "DNS:" + lower;
}

// The subject alternative names of a certificate: its name, a server's built-in local names
// (localhost, 127.0.0.1, ::1), then --san's. A --san name must be a host name or an IP, given
// once and not one the certificate has already; --san is for server certificates only (a node
// or admin is a TLS client, whose names no peer checks).
StatusOr<std::vector<std::string>> subject_alt_names(const std::string& name, Role role,
                                                     const std::vector<std::string>& extra) {
  std::vector<std::string> sans = {name};
  if (role != Role::kServer) {
    if (!extra.empty())
      return InvalidArgument(std::string("--san is for server certificates (--role server); a ") +
                             role_name(role) +
                             " certificate carries its name only: leave --san out");
    return sans;
  }
  std::set<std::string> seen = {san_identity(name)};
  for (const char* s : {"localhost", "127.0.0.1", "::1"}) {
    if (seen.insert(san_identity(s)).second) sans.emplace_back(s);
  }
  const std::set<std::string> built_in = seen;
  for (const std::string& s : extra) {
    if (!is_ip_literal(s) && !valid_dns_san(s)) {
      return InvalidArgument("subject alternative name '" + s +
                             "' is neither an IP address nor a DNS name");
    }
    const std::string id = san_identity(s);
    if (built_in.count(id) != 0)
      return InvalidArgument("--san '" + s +
                             "' is in every server certificate already (its name '" + name +
                             "', localhost, 127.0.0.1 and ::1): leave it out of --san");
    if (!seen.insert(id).second)
      return InvalidArgument("--san names '" + s + "' twice: give each host name or IP once");
    sans.push_back(s);
  }
  return sans;
}

// Builds the subjectAltName from (already validated) names, without going through OpenSSL's
// config-string parser, so no name can smuggle in another entry.
Status add_sans(X509* cert, const std::vector<std::string>& names) {
  GeneralNamesPtr gens(GENERAL_NAMES_new());
  if (!gens) return Internal("GENERAL_NAMES_new failed");
  for (const std::string& n : names) {
    GENERAL_NAME* gen = nullptr;
    if (is_ip_literal(n)) {
      ASN1_OCTET_STRING* ip = a2i_IPADDRESS(n.c_str());
      if (ip == nullptr) return InvalidArgument("bad IP address in SAN: " + n);
      gen = GENERAL_NAME_new();
      if (gen == nullptr) {
        ASN1_OCTET_STRING_free(ip);
        return Internal("GENERAL_NAME_new failed");
      }
      GENERAL_NAME_set0_value(gen, GEN_IPADD, ip);
    } else {
      ASN1_IA5STRING* dns = ASN1_IA5STRING_new();
      if (dns == nullptr || ASN1_STRING_set(dns, n.data(), static_cast<int>(n.size())) != 1) {
        ASN1_IA5STRING_free(dns);
        return Internal("cannot encode DNS SAN " + n);
      }
      gen = GENERAL_NAME_new();
      if (gen == nullptr) {
        ASN1_IA5STRING_free(dns);
        return Internal("GENERAL_NAME_new failed");
      }
      GENERAL_NAME_set0_value(gen, GEN_DNS, dns);
    }
    if (sk_GENERAL_NAME_push(gens.get(), gen) == 0) {
      GENERAL_NAME_free(gen);
      return Internal("cannot append SAN");
    }
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, gens.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return Internal("cannot add subjectAltName: " + last_error());
  }
  return Status::Ok();
}

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// Writes key (0600) then certificate (0644); removes the key again if the certificate fails,
// so a failed issue leaves nothing half-done behind.
Status write_pair(const std::string& key_file, const std::string& cert_file, EVP_PKEY* key,
                  X509* cert) {
  ATOLL_ASSIGN_OR_RETURN(std::string key_pem, private_key_to_pem(key));
  ATOLL_ASSIGN_OR_RETURN(std::string cert_pem, certificate_to_pem(cert));
  ATOLL_RETURN_IF_ERROR(write_new_file(key_file, key_pem, 0600));
  Status st = write_new_file(cert_file, cert_pem, 0644);
  if (!st.ok()) {
    std::error_code ec;
    fs::remove(key_file, ec);
  }
  return st;
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::kNode:
      return "node";
    case Role::kAdmin:
      return "admin";
    case Role::kServer:
      return "server";
  }
  return "?";
}

StatusOr<Role> parse_role(const std::string& text) {
  if (text == "node") return Role::kNode;
  if (text == "admin") return Role::kAdmin;
  if (text == "server") return Role::kServer;
  return InvalidArgument("unknown role '" + text + "': expected node, admin or server");
}

std::string ca_cert_path(const std::string& dir) {
  return (fs::path(dir) / "ca.crt").string();
}
std::string ca_key_path(const std::string& dir) {
  return (fs::path(dir) / "ca.key").string();
}
std::string cert_path(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / (name + ".crt")).string();
}
std::string key_path(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / (name + ".key")).string();
}

Status validate_cert_name(const std::string& raw) {
  // Echo the name back safely: control bytes and non-ASCII as \xNN, long names cut short.
  std::string name;
  for (size_t i = 0; i < raw.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(raw[i]);
    if (c >= 0x20 && c < 0x7f) {
      name += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      name += buf;
    }
  }
  if (raw.size() > 80) name += "...";
  if (raw.empty() || raw.size() > kMaxNameLength) {
    return InvalidArgument("certificate name '" + name + "' must be 1 to " +
                           std::to_string(kMaxNameLength) + " characters long");
  }
  for (char c : raw) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      return InvalidArgument("certificate name '" + name +
                             "' may only contain letters, digits, '.', '_' and '-'");
    }
  }
  if (raw == "." || raw == ".." || raw == "ca") {
    return InvalidArgument("certificate name '" + name + "' is reserved");
  }
  return Status::Ok();
}

namespace {

// The CA's private key lives in dir, and every certificate's key after it: the directory is
// owner-only (0700) even when it existed with a wider mode.
Status make_owner_only(const std::string& dir) {
  std::error_code ec;
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec)
    return IoError("cannot make " + dir + " owner-only (mode 0700): " + ec.message() +
                   "; choose a directory you own with --dir");
  return Status::Ok();
}

// A certificate must not outlive the CA certificate that signs it: past the CA's expiry every
// peer refuses it anyway, at a date nobody was told of. `validity_seconds` < 0 (an already
// expired certificate, for tests) is always within.
Status check_within_ca_lifetime(const std::string& dir, const X509* ca_cert,
                                int64_t validity_seconds, int64_t now) {
  ATOLL_ASSIGN_OR_RETURN(int64_t ca_not_after, time_to_unix(X509_get0_notAfter(ca_cert)));
  if (validity_seconds < 0 || now + validity_seconds <= ca_not_after) return Status::Ok();
  constexpr int64_t kDay = 24 * 3600;
  const std::string ca_expiry = time_to_string(X509_get0_notAfter(ca_cert));
  const std::string new_ca =
      "create a new CA (`atoll ca init --dir NEW_DIR`) and issue every "
      "certificate from it";
  const int64_t days_left = (ca_not_after - now) / kDay;  // whole days that still fit
  if (days_left < 1)
    return InvalidArgument(
        "the CA certificate in " + dir + " expires on " + ca_expiry +
        ", in less than a day, so no certificate it signs can last a day: " + new_ca);
  const std::string asked = validity_seconds % kDay == 0
                                ? std::to_string(validity_seconds / kDay) + " days"
                                : std::to_string(validity_seconds) + " seconds";
  return InvalidArgument("a certificate valid for " + asked +
                         " would outlive the CA certificate in " + dir + ", which expires on " +
                         ca_expiry + ": give --days " + std::to_string(days_left) +
                         " or less, or " + new_ca);
}

}  // namespace

std::string issue_instructions(const std::string& dir, const std::string& name, Role role,
                               bool replace) {
  const std::string pair = name + ".crt and " + name + ".key";
  const bool ca_here = exists(ca_key_path(dir));
  const std::string command = std::string("`atoll ca issue --dir ") + (ca_here ? dir : "CA_DIR") +
                              " --name " + name + " --role " + role_name(role) + "`";
  if (ca_here)
    return replace ? "remove " + pair + " from " + dir + ", then run " + command : "run " + command;
  // A site's TLS directory: ca.crt and its own pair, never ca.key.
  if (replace)
    return "where the experiment's CA (ca.key) is kept, remove " + pair + " and run " + command +
           "; then copy the new " + pair + " into " + dir;
  return "run " + command + " where the experiment's CA (ca.key) is kept, then copy " + pair +
         " into " + dir;
}

Status check_private_key_mode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::Ok();  // reading it says what is wrong
  if ((st.st_mode & 0007) == 0) return Status::Ok();
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return FailedPrecondition("private key " + path + " is open to other users (mode " + mode +
                            "): run `chmod 600 " + path +
                            "`, and replace the key if others may have copied it");
}

Status ca_init(const std::string& dir, const CaOptions& options) {
  if (dir.empty()) return InvalidArgument("ca init: --dir is empty");
  if (options.validity_days <= 0) {
    return InvalidArgument("ca init: validity must be at least one day");
  }
  if (exists(ca_key_path(dir)) || exists(ca_cert_path(dir))) {
    return AlreadyExists("a CA already exists in " + dir +
                         " (ca.crt/ca.key); refusing to overwrite it: choose another --dir");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir + ": " + ec.message());
  ATOLL_RETURN_IF_ERROR(make_owner_only(dir));

  ATOLL_ASSIGN_OR_RETURN(PkeyPtr key, generate_p256());
  X509Ptr cert(X509_new());
  if (!cert) return Internal("X509_new failed");
  X509_set_version(cert.get(), X509_VERSION_3);
  ATOLL_RETURN_IF_ERROR(set_random_serial(cert.get()));
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdateSeconds) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), long{options.validity_days} * 24 * 3600) ==
          nullptr) {
    return InvalidArgument("ca init: validity of " + std::to_string(options.validity_days) +
                           " days is out of range");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  ATOLL_RETURN_IF_ERROR(add_name_entry(name, "O", "Atoll"));
  ATOLL_RETURN_IF_ERROR(add_name_entry(name, "CN", options.common_name));
  X509_set_issuer_name(cert.get(), name);
  X509_set_pubkey(cert.get(), key.get());

  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  ATOLL_RETURN_IF_ERROR(
      add_conf_ext(cert.get(), &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  ATOLL_RETURN_IF_ERROR(
      add_conf_ext(cert.get(), &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
  ATOLL_RETURN_IF_ERROR(add_conf_ext(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  ATOLL_RETURN_IF_ERROR(
      add_conf_ext(cert.get(), &ctx, NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0) {
    return Internal("cannot sign CA certificate: " + last_error());
  }
  return write_pair(ca_key_path(dir), ca_cert_path(dir), key.get(), cert.get());
}

Status ca_issue(const std::string& dir, const std::string& name, Role role,
                const IssueOptions& options) {
  ATOLL_RETURN_IF_ERROR(validate_cert_name(name));
  if (options.validity_seconds == 0) return InvalidArgument("ca issue: validity must not be 0");
  // Beyond ±100 years is a typo, and keeps the arithmetic below far from overflow.
  constexpr int64_t kMaxValidity = 100LL * 366 * 24 * 3600;
  if (options.validity_seconds > kMaxValidity || options.validity_seconds < -kMaxValidity) {
    return InvalidArgument("ca issue: validity of " + std::to_string(options.validity_seconds) +
                           " seconds is out of range");
  }
  ATOLL_ASSIGN_OR_RETURN(std::vector<std::string> sans,
                         subject_alt_names(name, role, options.extra_sans));
  ATOLL_RETURN_IF_ERROR(check_private_key_mode(ca_key_path(dir)));
  auto ca_pem = read_file(ca_cert_path(dir));
  auto ca_key_pem = read_file(ca_key_path(dir));
  if (!ca_pem.ok() || !ca_key_pem.ok()) {
    if (ca_pem.status().code() == StatusCode::kNotFound ||
        ca_key_pem.status().code() == StatusCode::kNotFound) {
      return NotFound("no CA in " + dir + ": run `atoll ca init --dir " + dir + "` first");
    }
    return !ca_pem.ok() ? ca_pem.status() : ca_key_pem.status();
  }
  ATOLL_ASSIGN_OR_RETURN(X509Ptr ca_cert, parse_certificate_pem(*ca_pem, ca_cert_path(dir)));
  ATOLL_ASSIGN_OR_RETURN(PkeyPtr ca_key, parse_private_key_pem(*ca_key_pem, ca_key_path(dir)));
  if (X509_check_private_key(ca_cert.get(), ca_key.get()) != 1) {
    last_error();
    return InvalidArgument("ca.key in " + dir + " does not match ca.crt");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(ca_cert.get())) < 0) {
    return FailedPrecondition("the CA in " + dir + " expired on " +
                              time_to_string(X509_get0_notAfter(ca_cert.get())) +
                              ": create a new one with `atoll ca init`");
  }
  // One clock reading for the check and both validity bounds.
  time_t now = std::time(nullptr);
  ATOLL_RETURN_IF_ERROR(check_within_ca_lifetime(dir, ca_cert.get(), options.validity_seconds,
                                                 static_cast<int64_t>(now)));
  if (exists(key_path(dir, name)) || exists(cert_path(dir, name))) {
    return AlreadyExists("a certificate named '" + name + "' already exists in " + dir +
                         "; remove " + name + ".crt and " + name + ".key to re-issue it");
  }
  ATOLL_RETURN_IF_ERROR(make_owner_only(dir));

  ATOLL_ASSIGN_OR_RETURN(PkeyPtr key, generate_p256());
  X509Ptr cert(X509_new());
  if (!cert) return Internal("X509_new failed");
  X509_set_version(cert.get(), X509_VERSION_3);
  ATOLL_RETURN_IF_ERROR(set_random_serial(cert.get()));
  const long v = static_cast<long>(options.validity_seconds);
  // Already expired when negative: a window entirely in the past.
  const long from = v > 0 ? -kBackdateSeconds : 2 * v;
  if (X509_time_adj_ex(X509_getm_notBefore(cert.get()), 0, from, &now) == nullptr ||
      X509_time_adj_ex(X509_getm_notAfter(cert.get()), 0, v, &now) == nullptr) {
    return InvalidArgument("ca issue: validity is out of range");
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  ATOLL_RETURN_IF_ERROR(add_name_entry(subject, "O", "Atoll"));
  ATOLL_RETURN_IF_ERROR(add_name_entry(subject, "OU", role_name(role)));
  ATOLL_RETURN_IF_ERROR(add_name_entry(subject, "CN", name));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get()));
  X509_set_pubkey(cert.get(), key.get());

  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, ca_cert.get(), cert.get(), nullptr, nullptr, 0);
  ATOLL_RETURN_IF_ERROR(add_conf_ext(cert.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE"));
  ATOLL_RETURN_IF_ERROR(add_conf_ext(cert.get(), &ctx, NID_key_usage, "critical,digitalSignature"));
  ATOLL_RETURN_IF_ERROR(add_conf_ext(cert.get(), &ctx, NID_ext_key_usage,
                                     role == Role::kServer ? "serverAuth" : "clientAuth"));
  ATOLL_RETURN_IF_ERROR(add_conf_ext(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  ATOLL_RETURN_IF_ERROR(add_conf_ext(cert.get(), &ctx, NID_authority_key_identifier, "keyid"));
  ATOLL_RETURN_IF_ERROR(add_sans(cert.get(), sans));
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) <= 0) {
    return Internal("cannot sign certificate: " + last_error());
  }
  return write_pair(key_path(dir, name), cert_path(dir, name), key.get(), cert.get());
}

StatusOr<CertInfo> inspect_certificate_pem(const std::string& pem) {
  ATOLL_ASSIGN_OR_RETURN(X509Ptr cert, parse_certificate_pem(pem, "certificate"));
  CertInfo info;
  const X509_NAME* subject = X509_get_subject_name(cert.get());
  info.common_name = name_entry(subject, NID_commonName);
  info.role = name_entry(subject, NID_organizationalUnitName);
  info.is_ca = (X509_get_extension_flags(cert.get()) & EXFLAG_CA) != 0;
  info.subject = name_oneline(subject);
  info.issuer = name_oneline(X509_get_issuer_name(cert.get()));
  {
    BignumPtr bn(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert.get()), nullptr));
    if (bn) {
      char* hex = BN_bn2hex(bn.get());
      if (hex != nullptr) {
        info.serial_hex = hex;
        OPENSSL_free(hex);
      }
    }
  }
  ATOLL_ASSIGN_OR_RETURN(info.not_before_unix, time_to_unix(X509_get0_notBefore(cert.get())));
  ATOLL_ASSIGN_OR_RETURN(info.not_after_unix, time_to_unix(X509_get0_notAfter(cert.get())));
  info.not_before = time_to_string(X509_get0_notBefore(cert.get()));
  info.not_after = time_to_string(X509_get0_notAfter(cert.get()));
  ATOLL_ASSIGN_OR_RETURN(info.fingerprint_sha256, fingerprint_sha256(cert.get()));
  GeneralNamesPtr gens(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens.get()); ++i) {
    const GENERAL_NAME* gen = sk_GENERAL_NAME_value(gens.get(), i);
    if (gen->type == GEN_DNS) {
      const ASN1_IA5STRING* s = gen->d.dNSName;
      info.sans.push_back("DNS:" +
                          std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                      static_cast<size_t>(ASN1_STRING_length(s))));
    } else if (gen->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = gen->d.iPAddress;
      char buf[INET6_ADDRSTRLEN] = {};
      int len = ASN1_STRING_length(ip);
      int family = len == 4 ? AF_INET : len == 16 ? AF_INET6 : -1;
      if (family != -1 && inet_ntop(family, ASN1_STRING_get0_data(ip), buf, sizeof(buf))) {
        info.sans.push_back(std::string("IP:") + buf);
      }
    }
  }
  return info;
}

StatusOr<CertInfo> inspect_certificate(const std::string& path) {
  ATOLL_ASSIGN_OR_RETURN(std::string pem, read_file(path));
  auto info = inspect_certificate_pem(pem);
  if (!info.ok()) return Status(info.status().code(), path + ": " + info.status().message());
  return info;
}

}  // namespace atl::transport
