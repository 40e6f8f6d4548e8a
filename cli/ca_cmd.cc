// `atoll ca init --dir D` and `atoll ca issue --dir D --name N --role node|admin|server`.
// Exit codes: 2 for what the user gave (flags, names, the CA directory and its files), 1 for
// failures of the machine (I/O errors), as exit_code_for sorts them.
#include <cinttypes>
#include <cstdio>
#include <ctime>

#include "cli/commands.h"
#include "cli/flags.h"
#include "transport/tls/ca.h"

namespace atl::cli {

int cmd_ca(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf(
        "usage: atoll ca init --dir DIR [--days N]\n"
        "       atoll ca issue --dir DIR --name NAME [--role node|admin|server] "
        "[--days N] [--san HOST_OR_IP,...]   (--role defaults to node)\n"
        "       atoll ca show --cert FILE\n");
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
  if (sub == "show") {
    Flags flags("ca show", {{"cert", true, "certificate file (PEM)", ""}});
    if (Status s = flags.parse(rest); !s.ok()) return fail("ca show", s.message(), 2);
    if (flags.help_requested()) return std::printf("%s", flags.usage().c_str()), 0;
    auto cert = flags.get("cert");
    if (!cert) return fail("ca show", "--cert is required", 2);
    auto info = transport::inspect_certificate(*cert);
    if (!info.ok()) return fail("ca show", info.status());
    // Whether it is valid now: an expired or not yet valid certificate is refused in every
    // handshake, which is usually why one is looked at.
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    const char* validity = now < info->not_before_unix  ? "NOT YET VALID"
                           : now > info->not_after_unix ? "EXPIRED"
                                                        : "valid now";
    std::printf(
        "subject:   %s\nissuer:    %s\nrole:      %s\nnot-before: %s\nexpires:   %s\n"
        "validity:  %s\nsha256:    %s\n",
        info->subject.c_str(), info->issuer.c_str(), info->role.c_str(), info->not_before.c_str(),
        info->not_after.c_str(), validity, info->fingerprint_sha256.c_str());
    for (const auto& s : info->sans) std::printf("san:       %s\n", s.c_str());
    return 0;
  }
  return fail("ca", "unknown subcommand '" + sub + "': use init, issue or show", 2);
}

}  // namespace atl::cli
