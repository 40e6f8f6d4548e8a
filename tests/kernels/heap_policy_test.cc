// kernels/core/heap_policy.h: the thresholds keep MiB-sized blocks and freed memory on the heap,
// large C++ allocations are advised to use huge pages once the policy is on (and not before),
// and an operator's glibc.malloc tunables leave the policy off.
#include "kernels/core/heap_policy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/tools/vm_flags.h"

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
    set_huge_page_advice(false);
  }

 private:
  std::optional<std::string> saved_;
};

using testing::advised_huge;
using testing::vm_flags_of;

#if defined(__GLIBC__)
TEST(HeapPolicy, ThresholdsKeepStreamSizedBlocksAndFreedMemoryOnTheHeap) {
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

TEST(HeapPolicy, LargeAllocationsAreAdvisedHugePagesOnceThePolicyIsOn) {
  if (!testing::kernel_has_huge_pages())
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  ScopedTunables none("");
  constexpr size_t kFloats = (size_t{64} << 20) / sizeof(float);  // a 64 MiB θ-sized buffer
  {
    std::vector<float> before(kFloats);
    EXPECT_FALSE(advised_huge(before.data() + kFloats / 2)) << vm_flags_of(before.data());
  }
  ASSERT_TRUE(use_stream_heap_policy());
  EXPECT_TRUE(huge_page_advice());
  std::vector<float> large(kFloats);
  EXPECT_TRUE(advised_huge(large.data() + kFloats / 2)) << vm_flags_of(large.data());
  // Small blocks are left alone (they live in the heap, shared with others).
  auto small = std::make_unique<char[]>(4096);
  EXPECT_FALSE(advised_huge(small.get())) << vm_flags_of(small.get());
}

TEST(HeapPolicy, AnOperatorsMallocTunablesLeaveEverythingAsItWas) {
  ScopedTunables set("glibc.malloc.trim_threshold=131072");
  EXPECT_FALSE(use_stream_heap_policy());
  EXPECT_FALSE(huge_page_advice());  // so `new` advises nothing (checked in the test above)
}

}  // namespace
}  // namespace atl
