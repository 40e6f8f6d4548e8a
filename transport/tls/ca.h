// Experiment certificate authority: `atoll ca init` / `atoll ca issue` (EC P-256, OpenSSL 3).
//
// A TLS directory holds ca.key (0600) + ca.crt and one <name>.key (0600) + <name>.crt per
// issued identity. The role is written into the certificate twice, as the subject's OU (what
// Atoll reads back) and as the extended key usage (what TLS enforces): nodes and admins are
// TLS clients, the coordinator is a TLS server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/status.h"

namespace atl::transport {

enum class Role { kNode, kAdmin, kServer };

const char* role_name(Role role);  // "node", "admin", "server"
StatusOr<Role> parse_role(const std::string& text);

struct CaOptions {
  std::string common_name = "Atoll experiment CA";
  int validity_days = 3650;  // CA certificate lifetime
};

struct IssueOptions {
  // Lifetime in seconds from now. Negative values produce a certificate that is already
  // expired (not_before = now + 2·validity, not_after = now + validity), which tests use.
  int64_t validity_seconds = 365LL * 24 * 3600;
  // Extra subject alternative names for server certificates: IP literals become IP SANs, all
  // else DNS SANs. Each once, none of the certificate's own (its name, localhost, 127.0.0.1,
  // ::1); refused for other roles.
  std::vector<std::string> extra_sans;
};

struct CertInfo {
  std::string common_name;
  std::string role;  // OU of the subject ("node", "admin", "server") or "" if absent
  bool is_ca = false;
  std::string subject;
  std::string issuer;
  std::string serial_hex;
  int64_t not_before_unix = 0;
  int64_t not_after_unix = 0;
  std::string not_before;          // "YYYY-MM-DD HH:MM:SS UTC"
  std::string not_after;           // "YYYY-MM-DD HH:MM:SS UTC"
  std::string fingerprint_sha256;  // of the DER encoding, hex
  std::vector<std::string> sans;   // "DNS:x", "IP:1.2.3.4"
};

// Paths inside a TLS directory.
std::string ca_cert_path(const std::string& dir);
std::string ca_key_path(const std::string& dir);
std::string cert_path(const std::string& dir, const std::string& name);
std::string key_path(const std::string& dir, const std::string& name);

// A private key file that other users can read or write (mode & 0007) is refused, with the chmod
// that fixes it: such a key may already have been copied (ssh refuses one the same way). Group
// access is allowed: Kubernetes adds the group's read bit to a mounted secret under fsGroup.
Status check_private_key_mode(const std::string& path);

// Certificate names: 1..64 characters of [A-Za-z0-9._-], not "." / "..", not "ca".
Status validate_cert_name(const std::string& name);

// Creates dir (if needed), dir/ca.key (0600) and dir/ca.crt (self-signed). Refuses to touch an
// existing CA (AlreadyExists).
Status ca_init(const std::string& dir, const CaOptions& options = {});

// Issues dir/<name>.key (0600) and dir/<name>.crt signed by the CA in dir, making dir owner-only
// (0700) again if it was wider, as ca_init does. Refuses to overwrite an existing certificate of
// that name (AlreadyExists), a ca.key others can read (check_private_key_mode), a validity that
// ends after the CA certificate's (naming its expiry and the most --days that fit) and bad or
// repeated SANs (InvalidArgument).
Status ca_issue(const std::string& dir, const std::string& name, Role role,
                const IssueOptions& options = {});

// How to get dir/<name>.crt and .key (re-)issued, as the clause of a message ("run `atoll ca
// issue --dir D --name N --role R`"). A TLS directory holding ca.key is the CA's: issue there.
// Any other (a site's, which holds ca.crt and its own pair) is told to issue where ca.key is
// kept and copy the pair in. `replace`: a pair of that name is there already (ca issue refuses
// to overwrite it), so the clause says to remove it first.
std::string issue_instructions(const std::string& dir, const std::string& name, Role role,
                               bool replace);

StatusOr<CertInfo> inspect_certificate(const std::string& path);
StatusOr<CertInfo> inspect_certificate_pem(const std::string& pem);

}  // namespace atl::transport
