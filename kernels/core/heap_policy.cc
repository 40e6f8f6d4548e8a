#include "kernels/core/heap_policy.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace atl {

HeapPolicyStep heap_policy_step(const char* tunables, const char* marker) {
  if (marker != nullptr && std::strcmp(marker, "1") == 0) return HeapPolicyStep::kApplyThresholds;
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr)
    return HeapPolicyStep::kLeaveAlone;
  return HeapPolicyStep::kRestart;
}

std::string restart_tunables(const char* tunables) {
  std::string out = "glibc.malloc.hugetlb=1";
  if (tunables != nullptr && *tunables != '\0') out += std::string(":") + tunables;
  return out;
}

bool keep_stream_buffers_on_heap() {
#if defined(__GLIBC__)
  constexpr int kMmapThresholdBytes = 32 << 20;
  constexpr int kTrimThresholdBytes = 256 << 20;
  return ::mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) == 1 &&
         ::mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) == 1;
#else
  return false;
#endif
}

void use_stream_heap_policy(char** argv) {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  switch (heap_policy_step(tunables, std::getenv(kStreamHeapMarker))) {
    case HeapPolicyStep::kLeaveAlone:
      return;
    case HeapPolicyStep::kApplyThresholds:
      keep_stream_buffers_on_heap();
      return;
    case HeapPolicyStep::kRestart:
      break;
  }
  const std::string saved = tunables == nullptr ? std::string() : std::string(tunables);
  const std::string wanted = restart_tunables(tunables);
  ::setenv("GLIBC_TUNABLES", wanted.c_str(), 1);
  ::setenv(kStreamHeapMarker, "1", 1);
  ::execv("/proc/self/exe", argv);
  std::fprintf(stderr,
               "atoll: restarting with GLIBC_TUNABLES=%s failed (%s); going on without "
               "transparent huge pages (slower commits)\n",
               wanted.c_str(), std::strerror(errno));
  if (saved.empty())
    ::unsetenv("GLIBC_TUNABLES");
  else
    ::setenv("GLIBC_TUNABLES", saved.c_str(), 1);
  ::unsetenv(kStreamHeapMarker);
  keep_stream_buffers_on_heap();
#else
  (void)argv;
#endif
}

}  // namespace atl
