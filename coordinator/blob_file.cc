#include "coordinator/blob_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "kernels/core/sha256.h"

namespace atl::coordinator {

static_assert(std::endian::native == std::endian::little, "blobs are little-endian fp32");

namespace {

constexpr char kBlobMagic[4] = {'A', 'T', 'B', '1'};
constexpr size_t kBlobHeader = 4 + 8 + 32;

// Closes the descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Writes all of [data, data + n) (write() may write less, or be interrupted).
int write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

// Reads exactly n bytes; EIO when the file ends first.
int read_all(int fd, char* data, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, data, std::min<size_t>(n, size_t{1} << 30));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return EIO;
    data += r;
    n -= static_cast<size_t>(r);
  }
  return 0;
}

// Header fields: numel, or an error naming what is wrong with them against `bytes` in all.
StatusOr<uint64_t> header_numel(const char* header, uint64_t bytes, const std::string& what) {
  if (bytes < kBlobHeader || std::memcmp(header, kBlobMagic, 4) != 0)
    return DataLoss("store: " + what + " is corrupt (bad header, " + std::to_string(bytes) +
                    " bytes)");
  uint64_t n = 0;
  std::memcpy(&n, header + 4, 8);
  if (n > (bytes - kBlobHeader) / 4 || bytes - kBlobHeader != n * 4)
    return DataLoss("store: " + what + " is corrupt (header says " + std::to_string(n) +
                    " floats, value holds " + std::to_string(bytes - kBlobHeader) + " bytes)");
  return n;
}

Status check_digest(const std::vector<float>& v, const char* header, const std::string& what) {
  const Sha256Digest d = sha256(v.data(), v.size() * 4);
  if (std::memcmp(d.data(), header + 12, 32) != 0)
    return DataLoss("store: " + what + " is corrupt (SHA-256 mismatch)");
  return Status::Ok();
}

}  // namespace

std::string blob_header(std::span<const float> v) {
  std::string out(kBlobHeader, '\0');
  std::memcpy(out.data(), kBlobMagic, 4);
  const uint64_t n = v.size();
  std::memcpy(out.data() + 4, &n, 8);
  const Sha256Digest d = sha256(v.data(), v.size_bytes());
  std::memcpy(out.data() + 12, d.data(), 32);
  return out;
}

StatusOr<std::vector<float>> decode_blob(std::string_view blob, const std::string& what) {
  ATOLL_ASSIGN_OR_RETURN(const uint64_t n, header_numel(blob.data(), blob.size(), what));
  std::vector<float> v(n);
  if (n) std::memcpy(v.data(), blob.data() + kBlobHeader, n * 4);
  ATOLL_RETURN_IF_ERROR(check_digest(v, blob.data(), what));
  return v;
}

BlobWriteError write_blob_file(const std::string& path, std::span<const float> v, bool sync,
                               const std::string& what) {
  const std::string header = blob_header(v);
  int err = 0;
  {
    Fd f{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
    if (f.fd < 0) {
      err = errno;
    } else {
      err = write_all(f.fd, header.data(), header.size());
      if (err == 0)
        err = write_all(f.fd, reinterpret_cast<const char*>(v.data()), v.size_bytes());
      if (err == 0 && sync && ::fdatasync(f.fd) != 0) err = errno;
      if (::close(f.fd) != 0 && err == 0) err = errno;
      f.fd = -1;
    }
  }
  if (err == 0) return {};
  ::unlink(path.c_str());
  return {IoError(what + ": " + path + ": " + std::strerror(err)),
          err == ENOSPC || err == EDQUOT};
}

StatusOr<std::vector<float>> read_blob_file(const std::string& path, const std::string& what) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound("store: " + what + ": file " + path + " is missing");
    return IoError("store: " + what + ": cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    return IoError("store: " + what + ": cannot stat " + path + ": " + std::strerror(errno));
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  char header[kBlobHeader] = {};
  if (bytes >= kBlobHeader) {
    if (int err = read_all(f.fd, header, kBlobHeader); err != 0)
      return IoError("store: " + what + ": cannot read " + path + ": " + std::strerror(err));
  }
  ATOLL_ASSIGN_OR_RETURN(const uint64_t n, header_numel(header, bytes, what));
  std::vector<float> v(n);
  if (int err = read_all(f.fd, reinterpret_cast<char*>(v.data()), n * 4); err != 0)
    return IoError("store: " + what + ": cannot read " + path + ": " + std::strerror(err));
  ATOLL_RETURN_IF_ERROR(check_digest(v, header, what));
  return v;
}

Status sync_directory(const std::string& dir) {
  Fd f{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (f.fd < 0 || ::fsync(f.fd) != 0)
    return IoError("cannot sync directory " + dir + ": " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace atl::coordinator
