// Certificate revocation: the experiment CA's list of withdrawn certificates.
//
// A site whose machine or key is compromised must lose its access without a new CA for every
// other site. `atoll ca revoke` adds the certificate's serial to dir/ca.crl, an X.509 v2
// certificate revocation list (RFC 5280 §5, PEM) signed with ca.key, the format OpenSSL, nginx
// and Kubernetes read (`openssl crl -in ca.crl -text`, `openssl verify -crl_check`). The
// coordinator reads that file (RevocationWatch) and refuses every call made with a listed
// certificate, on gRPC and on the bulk lane alike; it re-reads the file when it changes, so a
// revocation takes effect on a running coordinator within RevocationWatch::kPollInterval.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/status.h"

namespace atl::transport {

// dir/ca.crl: where `ca revoke` writes the list and where the coordinator looks for it in its
// --tls directory.
std::string crl_path(const std::string& dir);
// dir/revoked: where `ca revoke --name N` moves N.crt and N.key, so that the name can be issued
// again (`ca issue` refuses to overwrite a pair).
std::string revoked_dir(const std::string& dir);

struct RevocationList {
  uint64_t number = 0;  // the CRL number extension: one more with every `ca revoke`
  int64_t this_update_unix = 0;
  int64_t next_update_unix = 0;  // 0: none given
  // Serial (upper-case hex, as CertInfo::serial_hex prints it) -> revocation time (unix s).
  std::map<std::string, int64_t> revoked;

  bool contains(const std::string& serial_hex) const { return revoked.count(serial_hex) > 0; }
};

// A PEM CRL checked against the CA certificate `ca_pem`: its issuer must be that CA and its
// signature verify with the CA's key; `what` names the file in messages.
StatusOr<RevocationList> parse_revocation_list(const std::string& crl_pem,
                                               const std::string& ca_pem, const std::string& what);

// The certificate to revoke: exactly one of a name in the CA directory (dir/<name>.crt), a
// certificate file anywhere, or a serial number in hex (for a certificate whose file is gone).
struct RevokeTarget {
  std::string name = {};
  std::string cert_file = {};
  std::string serial_hex = {};
};

struct RevokeResult {
  std::string serial_hex;  // upper-case hex
  std::string name;        // the certificate's CN ("" when revoked by serial alone)
  bool already = false;    // the serial was listed before: the file is unchanged
  uint64_t number = 0;     // the list's CRL number after this call
  size_t listed = 0;       // certificates the list holds after this call
  std::string moved_to;    // where <name>.crt/.key went ("" when they were not in dir)
};

// Adds the target to dir/ca.crl (created on first use; written atomically, mode 0644: a CRL is
// public), signed with dir/ca.key, and a copy to dir/revoked/ca.crl. A certificate the CA did not
// sign, an unreadable target, a ca.crl that this CA did not sign, a serial that is not hex, and a
// missing ca.crl where revoked/ca.crl shows there was one are refused with the fix. The pair
// issued in dir under the certificate's name (--name, or --cert naming it) moves to
// dir/revoked/<name>-<serial>.crt/.key.
StatusOr<RevokeResult> ca_revoke(const std::string& dir, const RevokeTarget& target);

// The list in one file, re-read when the file changes. Thread-safe.
class RevocationWatch {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{2000};

  // `path` may not exist yet (nothing is revoked until it appears); a file that is there must
  // read and verify now. `ca_pem` is the CA certificate the list must be signed by. The watch
  // polls the file every `poll_interval` on a thread of its own until destroyed; `note` (may be
  // empty) gets one line for each new list in force and for each change of the file that was
  // refused.
  static StatusOr<std::shared_ptr<RevocationWatch>> open(
      const std::string& path, const std::string& ca_pem,
      std::function<void(const std::string&)> note = {},
      std::chrono::milliseconds poll_interval = kPollInterval);
  ~RevocationWatch();
  RevocationWatch(const RevocationWatch&) = delete;
  RevocationWatch& operator=(const RevocationWatch&) = delete;

  // OK, or PermissionDenied naming the certificate (`name`, `serial_hex`), when and by which
  // list it was revoked, and how a trusted site gets a new certificate.
  Status check(const std::string& name, const std::string& serial_hex) const;

  // Reads the file again if its size, modification time or inode changed, and calls the
  // listeners with the serials it added. A file that no longer reads or verifies keeps the
  // list as it was (revocations are never dropped by a bad edit) and returns the error, once
  // per change of the file. Called by the poll thread; tests call it directly.
  Status refresh();

  // fn(serials newly revoked) after each refresh that added some, on the poll thread. The
  // returned id removes it (remove_listener) before what fn refers to is destroyed.
  uint64_t add_listener(std::function<void(const std::vector<std::string>&)> fn);
  void remove_listener(uint64_t id);

  const std::string& path() const { return path_; }
  size_t size() const;
  uint64_t number() const;

 private:
  RevocationWatch(std::string path, std::string ca_pem,
                  std::function<void(const std::string&)> note, std::chrono::milliseconds interval)
      : path_(std::move(path)),
        ca_pem_(std::move(ca_pem)),
        note_(std::move(note)),
        poll_interval_(interval) {}
  // The file's identity as stat(2) saw it: a change of any field means "read it again".
  struct FileStamp {
    bool exists = false;
    dev_t device = 0;
    ino_t inode = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };
  FileStamp stamp_now() const;
  void poll_loop();

  const std::string path_;
  const std::string ca_pem_;
  const std::function<void(const std::string&)> note_;
  const std::chrono::milliseconds poll_interval_;
  mutable std::mutex mu_;
  RevocationList list_;
  FileStamp stamp_;
  std::map<uint64_t, std::function<void(const std::vector<std::string>&)>> listeners_;
  uint64_t next_listener_ = 1;
  std::mutex listeners_mu_;  // held while listeners run, so remove_listener waits for them
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread poller_;
};

}  // namespace atl::transport
