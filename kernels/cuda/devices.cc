#include "kernels/cuda/devices.h"

#include <algorithm>
#include <string>

namespace atl::kernels::cuda {

namespace {
Status bad(std::string_view spec, std::string_view why) {
  std::string m = "--devices '";
  m.append(spec).append("': ").append(why);
  m += "; expected a comma-separated list such as cuda:0,cuda:1";
  return InvalidArgument(std::move(m));
}
// "'<item>' <rest>" without operator+ chains (GCC 12 warns falsely on those).
std::string quoted(std::string_view item, std::string_view rest) {
  std::string m = "'";
  m.append(item).append("' ").append(rest);
  return m;
}
}  // namespace

StatusOr<std::vector<int>> parse_devices(std::string_view spec) {
  if (spec.empty()) return bad(spec, "empty device list");
  std::vector<int> ids;
  size_t pos = 0;
  while (true) {
    const size_t comma = spec.find(',', pos);
    const std::string_view item =
        spec.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    constexpr std::string_view kPrefix = "cuda:";
    if (item.substr(0, kPrefix.size()) != kPrefix) {
      return bad(spec, quoted(item, "is not of the form cuda:<index>"));
    }
    const std::string_view num = item.substr(kPrefix.size());
    if (num.empty() || num.size() > 4 ||
        !std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return bad(spec, quoted(item, "has no valid device index"));
    }
    const int id = std::stoi(std::string(num));
    if (id >= 1024) return bad(spec, "device index " + std::to_string(id) + " is too large");
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
      return bad(spec, "cuda:" + std::to_string(id) + " is listed twice");
    }
    ids.push_back(id);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return ids;
}

Status validate_devices(const std::vector<int>& ids, int available) {
  for (int id : ids) {
    if (id >= available) {
      return InvalidArgument("--devices: cuda:" + std::to_string(id) + " does not exist, this " +
                             "machine has " + std::to_string(available) + " CUDA device(s)" +
                             (available > 0
                                  ? " (cuda:0 .. cuda:" + std::to_string(available - 1) + ")"
                                  : std::string()));
    }
  }
  return Status::Ok();
}

}  // namespace atl::kernels::cuda
