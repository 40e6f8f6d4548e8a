#include "kernels/core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace atl {

namespace {

void advise_interior(void* data, size_t bytes, int advice) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

}  // namespace

void advise_huge_pages(void* data, size_t bytes) { advise_interior(data, bytes, MADV_HUGEPAGE); }
void advise_small_pages(void* data, size_t bytes) { advise_interior(data, bytes, MADV_NOHUGEPAGE); }

}  // namespace atl
