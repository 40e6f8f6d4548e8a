// The kernel's view of a mapping, for tests of memory advice: the VmFlags line of
// /proc/self/smaps for the mapping that holds an address ("hg" = MADV_HUGEPAGE, "nh" =
// MADV_NOHUGEPAGE).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace atl::testing {

// The VmFlags line of the mapping that holds `p`, or "" when none does.
inline std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = at >= begin && at < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

inline bool advised_huge(const void* p) { return vm_flags_of(p).find(" hg") != std::string::npos; }
inline bool advised_small(const void* p) { return vm_flags_of(p).find(" nh") != std::string::npos; }

// A kernel built without transparent huge pages refuses both pieces of advice (and has no such
// folder).
inline bool kernel_has_huge_pages() {
  return std::filesystem::exists("/sys/kernel/mm/transparent_hugepage");
}

}  // namespace atl::testing
