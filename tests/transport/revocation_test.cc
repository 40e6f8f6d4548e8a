// The CA's revocation list: what `atoll ca revoke` writes, and how a coordinator reads it
// (RevocationWatch), including the edits it must refuse.
#include "transport/tls/revocation.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <mutex>

#include "kernels/core/file_io.h"
#include "tests/transport/test_cas.h"
#include "tools/temp_dir.h"
#include "transport/tls/ca.h"

namespace atl::transport {
namespace {

using atl::testing::TempDir;
namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

std::string serial_of(const std::string& cert) {
  auto info = inspect_certificate(cert);
  EXPECT_TRUE(info.ok()) << info.status().to_string();
  return info.ok() ? info->serial_hex : "";
}

std::string read(const std::string& path) {
  auto text = read_file(path);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : "";
}

// The test CAs (tests/transport/test_cas.h) and a second node, node-2, with both nodes' serials.
struct Cas {
  TempDir tmp;
  std::string ca = tmp.sub("ca"), other = tmp.sub("other"), serial1, serial2;
  void issue() {
    ASSERT_NO_FATAL_FAILURE(testing::issue_test_cas(ca, other));
    ASSERT_TRUE(ca_issue(ca, "node-2", Role::kNode).ok());
    serial1 = serial_of(cert_path(ca, "node-1"));
    serial2 = serial_of(cert_path(ca, "node-2"));
  }
};

TEST(Revocation, RevokeByNameWritesASignedListAndMovesThePairAside) {
  Cas cas;
  ASSERT_NO_FATAL_FAILURE(cas.issue());
  const std::string &ca = cas.ca, &other = cas.other, &serial1 = cas.serial1,
                    &serial2 = cas.serial2;
  TempDir& tmp = cas.tmp;

  auto first = ca_revoke(ca, {.name = "node-1"});
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->serial_hex, serial1);
  EXPECT_EQ(first->name, "node-1");
  EXPECT_FALSE(first->already);
  EXPECT_EQ(first->number, 1u);
  EXPECT_EQ(first->listed, 1u);
  // The pair moved aside: the name can be issued again, to a new serial.
  EXPECT_FALSE(fs::exists(cert_path(ca, "node-1")));
  EXPECT_TRUE(fs::exists(first->moved_to + ".crt"));
  EXPECT_TRUE(fs::exists(first->moved_to + ".key"));
  struct stat st {};
  ASSERT_EQ(::stat(crl_path(ca).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_TRUE(ca_issue(ca, "node-1", Role::kNode).ok());
  EXPECT_NE(serial_of(cert_path(ca, "node-1")), serial1);

  // By file, then by serial: each a new list number; the same serial twice changes nothing. A
  // copy of the certificate elsewhere leaves the pair in the CA directory as it is; the file in
  // the CA directory itself moves aside as with --name.
  fs::copy_file(cert_path(ca, "node-2"), tmp.path() + "/node-2-copy.crt");
  auto second = ca_revoke(ca, {.cert_file = tmp.path() + "/node-2-copy.crt"});
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->number, 2u);
  EXPECT_EQ(second->listed, 2u);
  EXPECT_TRUE(fs::exists(cert_path(ca, "node-2")));
  EXPECT_TRUE(second->moved_to.empty());
  auto in_dir = ca_revoke(ca, {.cert_file = cert_path(ca, "node-2")});
  ASSERT_TRUE(in_dir.ok()) << in_dir.status().to_string();
  EXPECT_TRUE(in_dir->already);
  EXPECT_FALSE(fs::exists(cert_path(ca, "node-2")));
  const std::string before = read(crl_path(ca));
  auto again = ca_revoke(ca, {.serial_hex = "0x" + serial2});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->already);
  EXPECT_EQ(again->number, 2u);
  EXPECT_EQ(read(crl_path(ca)), before);

  auto list = parse_revocation_list(read(crl_path(ca)), read(ca_cert_path(ca)), "ca.crl");
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  EXPECT_EQ(list->number, 2u);
  EXPECT_TRUE(list->contains(serial1));
  EXPECT_TRUE(list->contains(serial2));
  EXPECT_FALSE(list->contains(serial_of(cert_path(ca, "node-1"))));
  EXPECT_GT(list->next_update_unix, list->this_update_unix);
  // Another CA's certificate is not this list's to check.
  auto foreign = parse_revocation_list(read(crl_path(ca)), read(ca_cert_path(other)), "ca.crl");
  EXPECT_EQ(foreign.status().code(), StatusCode::kInvalidArgument);

  // A ca.crl deleted by mistake is not silently started again (it would un-revoke node-1 and
  // node-2): the copy in revoked/ is named, and restoring it works.
  EXPECT_EQ(read(crl_path(revoked_dir(ca))), read(crl_path(ca)));
  fs::remove(crl_path(ca));
  ASSERT_TRUE(ca_issue(ca, "node-3", Role::kNode).ok());
  Status missing = ca_revoke(ca, {.name = "node-3"}).status();
  EXPECT_EQ(missing.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(missing.message(), "a new list would un-revoke")) << missing.message();
  EXPECT_TRUE(fs::exists(cert_path(ca, "node-3")));
  fs::copy_file(crl_path(revoked_dir(ca)), crl_path(ca));
  auto third = ca_revoke(ca, {.name = "node-3"});
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_EQ(third->number, 3u);
  EXPECT_EQ(third->listed, 3u);
}

TEST(Revocation, RevokeRefusesWhatIsNotThisCasToRevoke) {
  TempDir tmp;
  const std::string ca = tmp.sub("ca"), other = tmp.sub("other");
  ASSERT_NO_FATAL_FAILURE(testing::issue_test_cas(ca, other));
  Status none = ca_revoke(ca, {}).status();
  EXPECT_EQ(none.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(none.message(), "give exactly one of --name")) << none.message();
  Status two = ca_revoke(ca, {.name = "node-1", .serial_hex = "0A"}).status();
  EXPECT_EQ(two.code(), StatusCode::kInvalidArgument);
  Status missing = ca_revoke(ca, {.name = "node-9"}).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(missing.message(), "no certificate named 'node-9'")) << missing.message();
  Status foreign = ca_revoke(ca, {.cert_file = cert_path(other, "node-1")}).status();
  EXPECT_EQ(foreign.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(foreign.message(), "was not issued by the CA in")) << foreign.message();
  Status not_hex = ca_revoke(ca, {.serial_hex = "12-34"}).status();
  EXPECT_EQ(not_hex.code(), StatusCode::kInvalidArgument);
  Status no_ca = ca_revoke(tmp.sub("empty"), {.serial_hex = "0A"}).status();
  EXPECT_EQ(no_ca.code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(crl_path(ca)));  // nothing was written by the refusals

  // A ca.crl another CA signed is refused, and left as it is.
  ASSERT_TRUE(ca_revoke(other, {.name = "node-1"}).ok());
  fs::copy_file(crl_path(other), crl_path(ca));
  Status mixed = ca_revoke(ca, {.name = "node-1"}).status();
  EXPECT_EQ(mixed.code(), StatusCode::kInvalidArgument);
  // Both CAs carry the default name: the signature tells them apart.
  EXPECT_TRUE(contains(mixed.message(), "does not verify with the CA's key")) << mixed.message();
  EXPECT_TRUE(fs::exists(cert_path(ca, "node-1")));
}

TEST(Revocation, AWatchRefusesListedCertificatesAndFollowsTheFile) {
  Cas cas;
  ASSERT_NO_FATAL_FAILURE(cas.issue());
  const std::string &ca = cas.ca, &other = cas.other, &serial1 = cas.serial1,
                    &serial2 = cas.serial2;
  std::mutex mu;
  std::vector<std::string> notes, heard;
  auto watch = RevocationWatch::open(
      crl_path(ca), read(ca_cert_path(ca)),
      [&](const std::string& line) {
        std::lock_guard<std::mutex> lk(mu);
        notes.push_back(line);
      },
      std::chrono::hours(1));  // refreshed by hand below
  ASSERT_TRUE(watch.ok()) << watch.status().to_string();
  RevocationWatch& w = **watch;
  const uint64_t id = w.add_listener([&](const std::vector<std::string>& serials) {
    std::lock_guard<std::mutex> lk(mu);
    heard.insert(heard.end(), serials.begin(), serials.end());
  });
  EXPECT_TRUE(w.check("node-1", serial1).ok());  // no list yet: nothing is revoked
  EXPECT_TRUE(w.refresh().ok());

  ASSERT_TRUE(ca_revoke(ca, {.cert_file = cert_path(ca, "node-1")}).ok());
  ASSERT_TRUE(w.refresh().ok());
  Status refused = w.check("node-1", serial1);
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(contains(refused.message(),
                       "the certificate of 'node-1' (serial " + serial1 + ") was revoked on "))
      << refused.message();
  EXPECT_TRUE(contains(refused.message(), "atoll ca issue --dir CA_DIR --name node-1"));
  EXPECT_TRUE(w.check("node-2", serial2).ok());
  EXPECT_EQ(w.number(), 1u);
  {
    std::lock_guard<std::mutex> lk(mu);
    EXPECT_EQ(heard, std::vector<std::string>{serial1});
  }

  // A bad edit (garbage, another CA's list, an older copy, removal) keeps what is in force.
  const std::string list1 = read(crl_path(ca));
  ASSERT_TRUE(ca_revoke(ca, {.cert_file = cert_path(ca, "node-2")}).ok());
  ASSERT_TRUE(w.refresh().ok());
  EXPECT_EQ(w.number(), 2u);
  ASSERT_TRUE(write_file_atomic(crl_path(ca), "not a list").ok());
  EXPECT_EQ(w.refresh().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.refresh().ok());  // the same file again: one error per change
  ASSERT_TRUE(ca_revoke(other, {.name = "node-1"}).ok());
  fs::copy_file(crl_path(other), crl_path(ca), fs::copy_options::overwrite_existing);
  EXPECT_EQ(w.refresh().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(write_file_atomic(crl_path(ca), list1).ok());
  Status older = w.refresh();
  EXPECT_EQ(older.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(older.message(), "older than number 2")) << older.message();
  fs::remove(crl_path(ca));
  EXPECT_EQ(w.refresh().code(), StatusCode::kNotFound);
  EXPECT_EQ(w.check("node-1", serial1).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(w.check("node-2", serial2).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(w.size(), 2u);

  w.remove_listener(id);
  std::lock_guard<std::mutex> lk(mu);
  EXPECT_EQ(heard, (std::vector<std::string>{serial1, serial2}));
  ASSERT_EQ(notes.size(), 2u);  // one line per list put in force (the errors are returned)
  EXPECT_TRUE(
      contains(notes[1], "list number 2 in force, 2 certificate(s) revoked; new: " + serial2))
      << notes[1];
}

TEST(Revocation, AWatchRefusesToStartOnAListItCannotTrust) {
  TempDir tmp;
  const std::string ca = tmp.sub("ca"), other = tmp.sub("other");
  ASSERT_NO_FATAL_FAILURE(testing::issue_test_cas(ca, other));
  ASSERT_TRUE(ca_revoke(other, {.name = "node-1"}).ok());
  auto foreign = RevocationWatch::open(crl_path(other), read(ca_cert_path(ca)));
  EXPECT_EQ(foreign.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(foreign.status().message(), "does not verify with the CA's key"))
      << foreign.status().message();
  ASSERT_TRUE(write_file_atomic(crl_path(ca), "garbage").ok());
  auto garbage = RevocationWatch::open(crl_path(ca), read(ca_cert_path(ca)));
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(garbage.status().message(), "-----BEGIN X509 CRL-----"))
      << garbage.status().message();
}

}  // namespace
}  // namespace atl::transport
