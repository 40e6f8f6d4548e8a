#include "kernels/core/heap_policy.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "kernels/core/huge_pages.h"

namespace atl {
namespace {

std::atomic<bool> g_huge_page_advice{false};

}  // namespace

bool keep_stream_buffers_on_heap() {
#if defined(__GLIBC__)
  constexpr int kTrimThresholdBytes = 256 << 20;
  return ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(kLargeBlockBytes)) == 1 &&
         ::mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) == 1;
#else
  return false;
#endif
}

void set_huge_page_advice(bool on) { g_huge_page_advice.store(on, std::memory_order_relaxed); }
bool huge_page_advice() { return g_huge_page_advice.load(std::memory_order_relaxed); }

bool use_stream_heap_policy() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return false;
  const bool thresholds = keep_stream_buffers_on_heap();
  set_huge_page_advice(true);
  return thresholds;
}

}  // namespace atl

// The replaceable global allocation function (every other form of `new` but the aligned ones
// ends here in libstdc++, and its `delete` is free()): malloc, plus the huge-page advice for
// large blocks once the policy is on.
void* operator new(std::size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  if (bytes >= atl::kLargeBlockBytes && atl::huge_page_advice()) atl::advise_huge_pages(p, bytes);
  return p;
}
