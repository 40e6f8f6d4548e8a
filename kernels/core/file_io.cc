#include "kernels/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace atl {
namespace {

// Closes a POSIX file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

std::string errno_text() { return std::strerror(errno); }

// Opens `path` for reading and describes it; the Status says what is wrong in one line.
StatusOr<struct stat> open_for_reading(const std::string& path, Fd& fd) {
  fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const std::string why = "cannot open " + path + ": " + errno_text();
    return errno == ENOENT ? NotFound(why) : IoError(why);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return IoError("cannot stat " + path + ": " + errno_text());
  if (S_ISDIR(st.st_mode)) return InvalidArgument(path + " is a directory, not a file");
  return st;
}

// Appends what `fd` holds from its offset to its end onto `data`.
Status read_to_end(int fd, const std::string& path, std::string& data) {
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot read " + path + ": " + errno_text());
    }
    if (n == 0) return Status::Ok();
    data.append(buffer, static_cast<size_t>(n));
  }
}

// Reads `size` bytes of a regular file into a string of that size.
StatusOr<std::string> read_exactly(int fd, const std::string& path, size_t size) {
  std::string data(size, '\0');
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd, data.data() + got, data.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot read " + path + ": " + errno_text());
    }
    if (n == 0) return DataLoss(path + " shrank while being read");
    got += static_cast<size_t>(n);
  }
  return data;
}

}  // namespace

StatusOr<std::string> read_file(const std::string& path) {
  Fd fd(-1);
  ATOLL_ASSIGN_OR_RETURN(struct stat st, open_for_reading(path, fd));
  if (S_ISREG(st.st_mode)) return read_exactly(fd.get(), path, static_cast<size_t>(st.st_size));
  std::string data;  // a pipe or device: its size is known only at its end
  ATOLL_RETURN_IF_ERROR(read_to_end(fd.get(), path, data));
  return data;
}

StatusOr<std::string> read_file_bounded(const std::string& path, uint64_t max_bytes) {
  Fd fd(-1);
  ATOLL_ASSIGN_OR_RETURN(struct stat st, open_for_reading(path, fd));
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return InvalidArgument(path + " is " + std::to_string(st.st_size) + " bytes, more than the " +
                           std::to_string(max_bytes) + " allowed");
  return read_exactly(fd.get(), path, static_cast<size_t>(st.st_size));
}

Status write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  // Writes and renames tmp; the caller removes tmp when this fails.
  auto write_and_rename = [&]() -> Status {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return IoError("cannot create " + tmp + ": " + errno_text());
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return IoError("cannot write " + tmp + ": " + errno_text());
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd.get()) != 0) return IoError("cannot fsync " + tmp + ": " + errno_text());
    if (::close(fd.release()) != 0) return IoError("cannot close " + tmp + ": " + errno_text());
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      return IoError("cannot rename " + tmp + " to " + path + ": " + errno_text());
    return Status::Ok();
  };
  if (Status s = write_and_rename(); !s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() >= 0) ::fsync(dfd.get());
  return Status::Ok();
}

}  // namespace atl
