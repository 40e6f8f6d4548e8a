// A fresh directory under the system temp dir, removed with everything in it on destruction: the
// one temporary directory of every test layer.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace atl::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "atoll-test-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` inside it (also written `dir / name`).
  std::string sub(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }
  std::string operator/(const std::string& name) const { return sub(name); }

 private:
  std::string path_;
};

}  // namespace atl::testing
