// kernels/core/heap_policy.h: a streaming process keeps MiB-sized blocks on the heap and freed
// memory for reuse, unless the operator set glibc's malloc tunables.
#include "kernels/core/heap_policy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace atl {
namespace {

// Sets GLIBC_TUNABLES for one test (unset when `value` is empty) and restores it after.
class ScopedTunables {
 public:
  explicit ScopedTunables(const std::string& value) {
    if (const char* old = std::getenv("GLIBC_TUNABLES")) saved_ = old;
    if (value.empty())
      ::unsetenv("GLIBC_TUNABLES");
    else
      ::setenv("GLIBC_TUNABLES", value.c_str(), 1);
  }
  ~ScopedTunables() {
    if (saved_)
      ::setenv("GLIBC_TUNABLES", saved_->c_str(), 1);
    else
      ::unsetenv("GLIBC_TUNABLES");
  }

 private:
  std::optional<std::string> saved_;
};

#if defined(__GLIBC__)
TEST(HeapPolicy, KeepsStreamSizedBlocksAndFreedMemoryOnTheHeap) {
  ScopedTunables none("");
  ASSERT_TRUE(keep_stream_buffers_on_heap());
  // 8 MiB blocks (a gRPC read is up to a few MiB): glibc's default would mmap each one.
  constexpr size_t kBlock = size_t{8} << 20;
  const size_t mapped_before = ::mallinfo2().hblks;
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) {
    blocks.push_back(std::malloc(kBlock));
    ASSERT_NE(blocks.back(), nullptr);
    std::memset(blocks.back(), i, kBlock);  // resident, as a received slice is
  }
  EXPECT_EQ(::mallinfo2().hblks, mapped_before) << "8 MiB blocks were mmap'ed, not heap blocks";
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
  // 128 MiB now free at the top of the heap: under the 256 MiB trim threshold, so kept for the
  // next stream rather than returned to the kernel (the default would trim it).
  EXPECT_GE(::mallinfo2().keepcost, 16 * kBlock);
}
#endif

TEST(HeapPolicy, LeavesTheAllocatorAloneWhenTheOperatorSetMallocTunables) {
  ScopedTunables set("glibc.malloc.trim_threshold=131072");
  EXPECT_FALSE(keep_stream_buffers_on_heap());
}

}  // namespace
}  // namespace atl
