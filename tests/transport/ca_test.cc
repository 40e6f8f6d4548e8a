#include "transport/tls/ca.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <ctime>
#include <filesystem>

#include "tools/temp_dir.h"
#include "transport/tls/credentials.h"

namespace atl::transport {
namespace {

using atl::testing::TempDir;

unsigned file_mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

TEST(Ca, InitCreatesSelfSignedCaAndRefusesToOverwrite) {
  TempDir tmp;
  const std::string dir = tmp.sub("tls");
  ASSERT_TRUE(ca_init(dir).ok());
  EXPECT_EQ(file_mode(ca_key_path(dir)), 0600u);
  auto info = inspect_certificate(ca_cert_path(dir));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_TRUE(info->is_ca);
  EXPECT_EQ(info->subject, info->issuer);
  EXPECT_EQ(info->fingerprint_sha256.size(), 64u);
  EXPECT_GT(info->not_after_unix, std::time(nullptr) + 3000LL * 24 * 3600);

  auto before = inspect_certificate(ca_cert_path(dir));
  Status again = ca_init(dir);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(contains(again.message(), "refusing to overwrite")) << again.message();
  auto after = inspect_certificate(ca_cert_path(dir));
  EXPECT_EQ(before->fingerprint_sha256, after->fingerprint_sha256);
}

TEST(Ca, InitMakesAnExistingWideDirectoryOwnerOnly) {
  TempDir tmp;
  const std::string dir = tmp.sub("tls");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);  // whatever the umask made of it
  ASSERT_EQ(file_mode(dir), 0755u);
  ASSERT_TRUE(ca_init(dir).ok());
  EXPECT_EQ(file_mode(dir), 0700u);
  EXPECT_EQ(file_mode(ca_key_path(dir)), 0600u);
}

// ca issue left a widened directory 0755 and used a 0644 ca.key; a coordinator or node started
// on a key every user could read without a word.
TEST(Ca, IssueNarrowsTheDirectoryAndKeysOpenToOthersAreRefused) {
  TempDir tmp;
  const std::string dir = tmp.sub("tls");
  ASSERT_TRUE(ca_init(dir).ok());
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ASSERT_TRUE(ca_issue(dir, "node-1", Role::kNode).ok());
  EXPECT_EQ(file_mode(dir), 0700u);
  EXPECT_EQ(file_mode(key_path(dir, "node-1")), 0600u);
  ASSERT_TRUE(validate_identity(dir, "node-1", Role::kNode).ok());

  const std::string node_key = key_path(dir, "node-1");
  ASSERT_EQ(::chmod(node_key.c_str(), 0644), 0);
  Status st = validate_identity(dir, "node-1", Role::kNode);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "private key " + node_key +
                              " is open to other users (mode 0644): run `chmod 600 " + node_key +
                              "`, and replace the key if others may have copied it");
  // Group read is what a Kubernetes secret mounted under fsGroup gets: allowed.
  ASSERT_EQ(::chmod(node_key.c_str(), 0440), 0);
  EXPECT_TRUE(validate_identity(dir, "node-1", Role::kNode).ok());

  const std::string ca_key = ca_key_path(dir);
  ASSERT_EQ(::chmod(ca_key.c_str(), 0604), 0);
  st = ca_issue(dir, "node-2", Role::kNode);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(st.message(), "private key " + ca_key + " is open to other users"))
      << st.message();
  EXPECT_FALSE(std::filesystem::exists(key_path(dir, "node-2")));
}

TEST(Ca, IssueNodeAndServerCertificates) {
  TempDir tmp;
  const std::string dir = tmp.path();
  CaOptions ca_opts;
  ca_opts.validity_days = 400;  // the certificates' year fits in it
  ASSERT_TRUE(ca_init(dir, ca_opts).ok());
  ASSERT_TRUE(ca_issue(dir, "node-1", Role::kNode).ok());
  IssueOptions server_opts;
  server_opts.extra_sans = {"coord.example.org", "10.1.2.3"};
  ASSERT_TRUE(ca_issue(dir, "coord", Role::kServer, server_opts).ok());
  EXPECT_EQ(file_mode(key_path(dir, "node-1")), 0600u);

  auto ca = inspect_certificate(ca_cert_path(dir));
  auto node = inspect_certificate(cert_path(dir, "node-1"));
  ASSERT_TRUE(node.ok()) << node.status().to_string();
  EXPECT_EQ(node->common_name, "node-1");
  EXPECT_EQ(node->role, "node");
  EXPECT_FALSE(node->is_ca);
  EXPECT_EQ(node->issuer, ca->subject);
  EXPECT_EQ(node->sans, std::vector<std::string>{"DNS:node-1"});
  const int64_t year = 365LL * 24 * 3600;
  EXPECT_NEAR(static_cast<double>(node->not_after_unix - std::time(nullptr)), double(year), 60.0);

  auto server = inspect_certificate(cert_path(dir, "coord"));
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(server->role, "server");
  EXPECT_EQ(server->sans,
            (std::vector<std::string>{"DNS:coord", "DNS:localhost", "IP:127.0.0.1", "IP:::1",
                                      "DNS:coord.example.org", "IP:10.1.2.3"}));

  // Serials are random and distinct.
  ASSERT_TRUE(ca_issue(dir, "node-2", Role::kNode).ok());
  auto node2 = inspect_certificate(cert_path(dir, "node-2"));
  EXPECT_NE(node->serial_hex, node2->serial_hex);
  EXPECT_GE(node->serial_hex.size(), 30u);

  // Same name again: refused, files untouched.
  Status dup = ca_issue(dir, "node-1", Role::kNode);
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(inspect_certificate(cert_path(dir, "node-1"))->fingerprint_sha256,
            node->fingerprint_sha256);

  // Identity checks used before connecting.
  EXPECT_TRUE(validate_identity(dir, "node-1", Role::kNode).ok());
  EXPECT_TRUE(validate_identity(dir, "coord", Role::kServer).ok());
}

TEST(Ca, NameValidation) {
  TempDir tmp;
  ASSERT_TRUE(ca_init(tmp.path()).ok());
  for (const std::string& bad :
       std::vector<std::string>{"../x", "a/b", "", "..", ".", "ca", "x y", "n\n", "é",
                                std::string(65, 'a'), std::string("a\0b", 3)}) {
    Status st = ca_issue(tmp.path(), bad, Role::kNode);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << "one line: " << st.message();
  }
  Status st = ca_issue(tmp.path(), "../x", Role::kNode);
  EXPECT_TRUE(contains(st.message(), "may only contain")) << st.message();
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(tmp.path()).parent_path() / "x.key"));
  EXPECT_TRUE(ca_issue(tmp.path(), std::string(64, 'a'), Role::kNode).ok());
  EXPECT_TRUE(ca_issue(tmp.path(), "Site_3.gpu-a", Role::kAdmin).ok());
  // Bad extra SAN for a server.
  IssueOptions o;
  o.extra_sans = {"a,DNS:evil"};
  EXPECT_EQ(ca_issue(tmp.path(), "srv", Role::kServer, o).code(), StatusCode::kInvalidArgument);
}

TEST(Ca, IssueWithoutCaSaysHowToCreateOne) {
  TempDir tmp;
  Status st = ca_issue(tmp.path(), "node-1", Role::kNode);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(st.message(), "atoll ca init")) << st.message();
}

TEST(Ca, PreValidationMessages) {
  TempDir tmp;
  const std::string dir = tmp.sub("a"), other = tmp.sub("b");
  ASSERT_TRUE(ca_init(dir).ok());
  ASSERT_TRUE(ca_init(other).ok());
  IssueOptions expired;
  expired.validity_seconds = -3600;
  ASSERT_TRUE(ca_issue(dir, "old", Role::kNode, expired).ok());
  auto old = inspect_certificate(cert_path(dir, "old"));
  EXPECT_LT(old->not_after_unix, std::time(nullptr));

  Status st = validate_identity(dir, "old", Role::kNode);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(st.message(), "certificate old expired on " + old->not_after))
      << st.message();
  EXPECT_TRUE(contains(st.message(), "atoll ca issue --dir " + dir + " --name old --role node"));

  st = validate_identity(dir, "ghost", Role::kNode);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "no certificate for node ghost in " + dir +
                              ": run `atoll ca issue --dir " + dir + " --name ghost --role node`");

  // A certificate from another CA copied into dir.
  ASSERT_TRUE(ca_issue(other, "stranger", Role::kNode).ok());
  std::filesystem::copy_file(cert_path(other, "stranger"), cert_path(dir, "stranger"));
  std::filesystem::copy_file(key_path(other, "stranger"), key_path(dir, "stranger"));
  st = validate_identity(dir, "stranger", Role::kNode);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(contains(st.message(), "certificate stranger was not issued by the CA in " + dir))
      << st.message();

  // Key of another identity.
  ASSERT_TRUE(ca_issue(dir, "n1", Role::kNode).ok());
  ASSERT_TRUE(ca_issue(dir, "n2", Role::kNode).ok());
  std::filesystem::copy_file(key_path(dir, "n2"), key_path(dir, "n1"),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_TRUE(contains(validate_identity(dir, "n1", Role::kNode).message(), "does not belong"));

  // Role mismatch: a node certificate cannot serve, a server certificate cannot be a client.
  ASSERT_TRUE(ca_issue(dir, "srv", Role::kServer).ok());
  ASSERT_TRUE(ca_issue(dir, "n3", Role::kNode).ok());
  st = validate_identity(dir, "n3", Role::kServer);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "cannot be used as a TLS server")) << st.message();
  EXPECT_EQ(validate_identity(dir, "srv", Role::kNode).code(), StatusCode::kInvalidArgument);

  // Missing CA certificate.
  TempDir empty;
  st = validate_identity(empty.path(), "n", Role::kNode);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(st.message(), "ca.crt")) << st.message();

  // Garbage files.
  TempDir junk;
  ASSERT_TRUE(ca_init(junk.path()).ok());
  ASSERT_TRUE(ca_issue(junk.path(), "n", Role::kNode).ok());
  std::filesystem::resize_file(cert_path(junk.path(), "n"), 40);
  EXPECT_EQ(validate_identity(junk.path(), "n", Role::kNode).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(inspect_certificate(cert_path(junk.path(), "n")).status().code(),
            StatusCode::kInvalidArgument);
}

// A node certificate for 365 days from a CA with 10 left was issued without a word, and every
// peer refused it once the CA expired.
TEST(Ca, IssueRefusesACertificateThatOutlivesItsCa) {
  TempDir tmp;
  const std::string dir = tmp.path();
  CaOptions short_lived;
  short_lived.validity_days = 10;
  ASSERT_TRUE(ca_init(dir, short_lived).ok());
  const auto ca = inspect_certificate(ca_cert_path(dir));
  ASSERT_TRUE(ca.ok());

  IssueOptions year;  // 365 days by default
  const int64_t before = std::time(nullptr);
  Status st = ca_issue(dir, "node-1", Role::kNode, year);
  const int64_t after = std::time(nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  // 10 whole days are left when the CA was made in the same second, else 9.
  auto refusal = [&](int64_t now) {
    return "a certificate valid for 365 days would outlive the CA certificate in " + dir +
           ", which expires on " + ca->not_after + ": give --days " +
           std::to_string((ca->not_after_unix - now) / (24 * 3600)) +
           " or less, or create a new CA (`atoll ca init --dir NEW_DIR`) and issue every "
           "certificate from it";
  };
  EXPECT_TRUE(st.message() == refusal(before) || st.message() == refusal(after)) << st.message();
  EXPECT_FALSE(std::filesystem::exists(key_path(dir, "node-1")));
  EXPECT_FALSE(std::filesystem::exists(cert_path(dir, "node-1")));

  // The largest --days the message names fits, and ends before the CA does.
  IssueOptions fits;
  fits.validity_seconds = 9LL * 24 * 3600;
  ASSERT_TRUE(ca_issue(dir, "node-1", Role::kNode, fits).ok());
  const auto node = inspect_certificate(cert_path(dir, "node-1"));
  ASSERT_TRUE(node.ok());
  EXPECT_LE(node->not_after_unix, ca->not_after_unix);
  EXPECT_TRUE(validate_identity(dir, "node-1", Role::kNode).ok());
}

// `--san a,a` listed DNS:a twice in the certificate (and `ca show` printed it twice).
TEST(Ca, SubjectAltNamesAreGivenOnce) {
  TempDir tmp;
  const std::string dir = tmp.path();
  ASSERT_TRUE(ca_init(dir).ok());
  struct Case {
    std::vector<std::string> sans;
    Role role;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"a", "a"}, Role::kServer, "--san names 'a' twice: give each host name or IP once"},
      // DNS names are case-insensitive; one IPv6 address has several spellings.
      {{"Coord.example.org", "coord.EXAMPLE.org"},
       Role::kServer,
       "--san names 'coord.EXAMPLE.org' twice: give each host name or IP once"},
      {{"10.0.0.1", "::1"},
       Role::kServer,
       "--san '::1' is in every server certificate already (its name 'srv', localhost, "
       "127.0.0.1 and ::1): leave it out of --san"},
      {{"0:0::1"},
       Role::kServer,
       "--san '0:0::1' is in every server certificate already (its name 'srv', localhost, "
       "127.0.0.1 and ::1): leave it out of --san"},
      {{"SRV"},
       Role::kServer,
       "--san 'SRV' is in every server certificate already (its name 'srv', localhost, "
       "127.0.0.1 and ::1): leave it out of --san"},
      {{"a"},
       Role::kNode,
       "--san is for server certificates (--role server); a node certificate carries its name "
       "only: leave --san out"},
  };
  for (const Case& c : cases) {
    IssueOptions o;
    o.extra_sans = c.sans;
    Status st = ca_issue(dir, "srv", c.role, o);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(st.message(), c.message);
    EXPECT_FALSE(std::filesystem::exists(cert_path(dir, "srv"))) << c.message;
  }
  IssueOptions distinct;
  distinct.extra_sans = {"a", "b", "10.0.0.1"};
  ASSERT_TRUE(ca_issue(dir, "srv", Role::kServer, distinct).ok());
  EXPECT_EQ(inspect_certificate(cert_path(dir, "srv"))->sans,
            (std::vector<std::string>{"DNS:srv", "DNS:localhost", "IP:127.0.0.1", "IP:::1", "DNS:a",
                                      "DNS:b", "IP:10.0.0.1"}));
}

// The hints said `atoll ca issue --dir <TLS dir>` also for a site's TLS directory, which holds
// ca.crt and the site's pair but no ca.key (deploy/: /etc/atoll/tls, the Helm secret), where
// that command can only say there is no CA.
TEST(Ca, HintsSayToIssueWhereTheCaKeyIsKept) {
  TempDir tmp;
  const std::string ca_dir = tmp.sub("ca"), site = tmp.sub("site");
  ASSERT_TRUE(ca_init(ca_dir).ok());
  IssueOptions expired;
  expired.validity_seconds = -3600;
  ASSERT_TRUE(ca_issue(ca_dir, "old", Role::kNode, expired).ok());
  std::filesystem::create_directories(site);
  for (const std::string& f :
       {std::string("ca.crt"), std::string("old.crt"), std::string("old.key")})
    std::filesystem::copy_file(std::filesystem::path(ca_dir) / f, std::filesystem::path(site) / f);
  const auto old = inspect_certificate(cert_path(site, "old"));
  ASSERT_TRUE(old.ok());

  Status st = validate_identity(site, "ghost", Role::kNode);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(),
            "no certificate for node ghost in " + site +
                ": run `atoll ca issue --dir CA_DIR --name ghost --role node` where the "
                "experiment's CA (ca.key) is kept, then copy ghost.crt and ghost.key into " +
                site);
  st = validate_identity(site, "old", Role::kNode);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "certificate old expired on " + old->not_after +
                              ": where the experiment's CA (ca.key) is kept, remove old.crt and "
                              "old.key and run `atoll ca issue --dir CA_DIR --name old --role "
                              "node`; then copy the new old.crt and old.key into " +
                              site);
  // In the CA's own directory the command is run right there.
  st = validate_identity(ca_dir, "old", Role::kNode);
  EXPECT_EQ(st.message(), "certificate old expired on " + old->not_after + ": remove old.crt and " +
                              "old.key from " + ca_dir + ", then run `atoll ca issue --dir " +
                              ca_dir + " --name old --role node`");
}

TEST(Ca, RoleParsing) {
  EXPECT_EQ(*parse_role("node"), Role::kNode);
  EXPECT_EQ(*parse_role("admin"), Role::kAdmin);
  EXPECT_EQ(*parse_role("server"), Role::kServer);
  EXPECT_EQ(parse_role("root").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace atl::transport
