#include "cli/port_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

namespace atl::cli {

Status write_port_file(const std::string& path, const std::string& address) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << address << "\n";
    if (!out.flush()) return IoError("cannot write --port-file " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return IoError("cannot write --port-file " + path + ": " + ec.message());
  return Status::Ok();
}

StatusOr<std::string> wait_for_port_file(const std::string& path, std::chrono::seconds timeout,
                                         const std::function<std::optional<std::string>()>& gone) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::ifstream in(path);
    std::string address;
    if (in && std::getline(in, address) && !address.empty()) return address;
    if (gone)
      if (auto why = gone()) return Unavailable(*why);
    if (std::chrono::steady_clock::now() >= deadline)
      return Status(StatusCode::kDeadlineExceeded,
                    "no address in " + path + " after " + std::to_string(timeout.count()) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace atl::cli
