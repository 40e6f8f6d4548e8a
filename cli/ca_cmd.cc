// `atoll ca init --dir D`, `atoll ca issue --dir D --name N --role node|admin|server`,
// `atoll ca revoke --dir D --name N` and `atoll ca show --cert FILE | --crl FILE`.
// Exit codes: 2 for what the user gave (flags, names, the CA directory and its files), 1 for
// failures of the machine (I/O errors), as exit_code_for sorts them.
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "cli/commands.h"
#include "cli/flags.h"
#include "kernels/core/file_io.h"
#include "transport/tls/ca.h"
#include "transport/tls/revocation.h"

namespace atl::cli {
namespace {

std::string utc_text(int64_t unix_seconds) {
  char text[32] = "?";
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  if (gmtime_r(&t, &tm) != nullptr) std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

int ca_revoke_cmd(const Args& rest) {
  Flags flags("ca revoke",
              {{"dir", true, "the CA's directory (it holds ca.key; ca.crl is written there)", ""},
               {"name", true, "revoke DIR/NAME.crt (moved with its key to DIR/revoked/)", ""},
               {"cert", true, "revoke this certificate file", ""},
               {"serial", true,
                "revoke the certificate with this serial (hex, as `ca show` prints it)", ""}});
  if (Status s = flags.parse(rest); !s.ok()) return fail("ca revoke", s.message(), 2);
  if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
  auto dir = flags.get("dir");
  if (!dir) return fail("ca revoke", "--dir is required (the directory given to `ca init`)", 2);
  transport::RevokeTarget target{flags.get_or("name", ""), flags.get_or("cert", ""),
                                 flags.get_or("serial", "")};
  auto r = transport::ca_revoke(*dir, target);
  if (!r.ok()) return fail("ca revoke", r.status());
  const std::string who = r->name.empty() ? "serial " + r->serial_hex
                                          : "'" + r->name + "' (serial " + r->serial_hex + ")";
  const std::string crl = transport::crl_path(*dir);
  if (r->already)
    std::printf("%s was already revoked; %s is unchanged (list number %" PRIu64 ", %zu listed)\n",
                who.c_str(), crl.c_str(), r->number, r->listed);
  else
    std::printf("revoked %s: %s is list number %" PRIu64 " with %zu certificate(s)\n", who.c_str(),
                crl.c_str(), r->number, r->listed);
  if (!r->moved_to.empty())
    std::printf(
        "moved its certificate and key to %s.crt/.key; `atoll ca issue` can use the name "
        "again\n",
        r->moved_to.c_str());
  std::printf(
      "copy %s to the coordinator's --tls directory (or its --crl file): a running "
      "coordinator reads it within %lld s and drops the site\n",
      crl.c_str(),
      static_cast<long long>(transport::RevocationWatch::kPollInterval.count() / 1000));
  return 0;
}

// "REVOKED on DATE (FILE)" when a ca.crl beside the certificate (or in the CA directory above a
// revoked/ copy), signed by the ca.crt beside it, lists `serial`; "" otherwise.
std::string revocation_note(const std::string& cert_file, const std::string& serial) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::absolute(fs::path(cert_file)).parent_path();
  for (const fs::path& d : {dir, dir.parent_path()}) {
    auto crl = read_file((d / "ca.crl").string());
    auto ca = read_file((d / "ca.crt").string());
    if (!crl.ok() || !ca.ok()) continue;
    auto list = transport::parse_revocation_list(*crl, *ca, (d / "ca.crl").string());
    if (!list.ok()) continue;
    auto it = list->revoked.find(serial);
    if (it != list->revoked.end())
      return "REVOKED on " + utc_text(it->second) + " (" + (d / "ca.crl").string() + ")";
  }
  return "";
}

int ca_show_crl(const std::string& crl, const std::string& ca_flag) {
  const std::string ca =
      ca_flag.empty() ? (std::filesystem::path(crl).parent_path() / "ca.crt").string() : ca_flag;
  auto crl_pem = read_file(crl);
  if (!crl_pem.ok()) return fail("ca show", crl_pem.status());
  auto ca_pem = read_file(ca);
  if (!ca_pem.ok())
    return fail("ca show",
                "cannot read the CA certificate " + ca + " (" + ca_pem.status().message() +
                    ") to check the list's signature: give it with --ca FILE",
                2);
  auto list = transport::parse_revocation_list(*crl_pem, *ca_pem, crl);
  if (!list.ok()) return fail("ca show", list.status());
  std::printf("list number: %" PRIu64
              "\nsigned:     %s (verified with %s)\nnext update: %s\n"
              "revoked:    %zu\n",
              list->number, utc_text(list->this_update_unix).c_str(), ca.c_str(),
              list->next_update_unix ? utc_text(list->next_update_unix).c_str() : "none",
              list->revoked.size());
  for (const auto& [serial, when] : list->revoked)
    std::printf("serial:     %s  revoked %s\n", serial.c_str(), utc_text(when).c_str());
  return 0;
}

}  // namespace

int cmd_ca(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf(
        "usage: atoll ca init --dir DIR [--days N]\n"
        "       atoll ca issue --dir DIR --name NAME [--role node|admin|server] "
        "[--days N] [--san HOST_OR_IP,...]   (--role defaults to node)\n"
        "       atoll ca revoke --dir DIR --name NAME | --cert FILE | --serial HEX\n"
        "       atoll ca show --cert FILE | --crl FILE [--ca FILE]\n");
    return args.empty() ? 2 : 0;
  }
  const std::string sub = args[0];
  Args rest(args.begin() + 1, args.end());
  if (sub == "init") {
    Flags flags("ca init", {{"dir", true, "directory for ca.key and ca.crt", ""},
                            {"days", true, "CA certificate lifetime in days", "3650"}});
    if (Status s = flags.parse(rest); !s.ok()) return fail("ca init", s.message(), 2);
    if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
    auto dir = flags.get("dir");
    if (!dir) return fail("ca init", "--dir is required (where the CA's files go)", 2);
    auto days = flags.get_int("days", 3650, 1, 36500);
    if (!days.ok()) return fail("ca init", days.status().message(), 2);
    transport::CaOptions opt;
    opt.validity_days = static_cast<int>(*days);
    if (Status s = transport::ca_init(*dir, opt); !s.ok()) return fail("ca init", s);
    std::printf("created CA %s and %s\n", transport::ca_cert_path(*dir).c_str(),
                transport::ca_key_path(*dir).c_str());
    return 0;
  }
  if (sub == "issue") {
    Flags flags(
        "ca issue",
        {{"dir", true, "the CA's directory", ""},
         {"name", true, "certificate name (node or admin id, server name)", ""},
         {"role", true, "node, admin or server", "node"},
         {"days", true, "lifetime in days (at most what the CA has left)", "365"},
         {"san", true, "extra server names/IPs, comma-separated (--role server only)", ""}});
    if (Status s = flags.parse(rest); !s.ok()) return fail("ca issue", s.message(), 2);
    if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
    auto dir = flags.get("dir");
    auto name = flags.get("name");
    if (!dir) return fail("ca issue", "--dir is required (the directory given to `ca init`)", 2);
    if (!name) return fail("ca issue", "--name is required (e.g. --name node-1)", 2);
    auto role = transport::parse_role(flags.get_or("role", "node"));
    if (!role.ok()) return fail("ca issue", role.status().message(), 2);
    auto days = flags.get_int("days", 365, 1, 36500);
    if (!days.ok()) return fail("ca issue", days.status().message(), 2);
    transport::IssueOptions opt;
    opt.validity_seconds = *days * 24 * 3600;
    if (auto sans = flags.get("san")) {
      size_t start = 0;
      while (start <= sans->size()) {
        size_t comma = sans->find(',', start);
        std::string item = sans->substr(start, comma == std::string::npos ? std::string::npos
                                                                          : comma - start);
        if (item.empty())
          return fail("ca issue",
                      "--san has an empty name (a comma at an end, or two in a row): separate "
                      "host names and IPs with single commas",
                      2);
        opt.extra_sans.push_back(item);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    if (Status s = transport::ca_issue(*dir, *name, *role, opt); !s.ok())
      return fail("ca issue", s);
    std::printf("issued %s (%s) and %s\n", transport::cert_path(*dir, *name).c_str(),
                transport::role_name(*role), transport::key_path(*dir, *name).c_str());
    return 0;
  }
  if (sub == "revoke") return ca_revoke_cmd(rest);
  if (sub == "show") {
    Flags flags(
        "ca show",
        {{"cert", true, "certificate file (PEM)", ""},
         {"crl", true, "certificate revocation list (PEM, as `ca revoke` writes it)", ""},
         {"ca", true,
          "with --crl: the CA certificate to verify it with (default: ca.crt beside it)", ""}});
    if (Status s = flags.parse(rest); !s.ok()) return fail("ca show", s.message(), 2);
    if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
    auto cert = flags.get("cert");
    auto crl = flags.get("crl");
    if (cert && crl) return fail("ca show", "give --cert FILE or --crl FILE, not both", 2);
    if (cert && flags.get("ca"))
      return fail("ca show", "--ca goes with --crl (the CA that signed the list)", 2);
    if (crl) return ca_show_crl(*crl, flags.get_or("ca", ""));
    if (!cert) return fail("ca show", "--cert FILE or --crl FILE is required", 2);
    auto info = transport::inspect_certificate(*cert);
    if (!info.ok()) return fail("ca show", info.status());
    // Whether it is valid now: an expired or not yet valid certificate is refused in every
    // handshake, which is usually why one is looked at.
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    const std::string revoked = revocation_note(*cert, info->serial_hex);
    const char* validity = !revoked.empty()              ? revoked.c_str()
                           : now < info->not_before_unix ? "NOT YET VALID"
                           : now > info->not_after_unix  ? "EXPIRED"
                                                         : "valid now";
    std::printf(
        "subject:   %s\nissuer:    %s\nrole:      %s\nserial:    %s\nnot-before: %s\n"
        "expires:   %s\nvalidity:  %s\nsha256:    %s\n",
        info->subject.c_str(), info->issuer.c_str(), info->role.c_str(), info->serial_hex.c_str(),
        info->not_before.c_str(), info->not_after.c_str(), validity,
        info->fingerprint_sha256.c_str());
    for (const auto& s : info->sans) std::printf("san:       %s\n", s.c_str());
    return 0;
  }
  return fail("ca", "unknown subcommand '" + sub + "': use init, issue, revoke or show", 2);
}

}  // namespace atl::cli
