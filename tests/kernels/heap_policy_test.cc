// kernels/core/heap_policy.h: when a streaming process restarts, applies the thresholds or
// leaves an operator's malloc tunables alone, and that the thresholds keep MiB-sized blocks and
// freed memory on the heap. (That the coordinator really restarts under the policy:
// tests/integration/metrics_process_test.cc reads its environment.)
#include "kernels/core/heap_policy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace atl {
namespace {

TEST(HeapPolicy, RestartsOnceUnlessTheOperatorSetMallocTunables) {
  EXPECT_EQ(heap_policy_step(nullptr, nullptr), HeapPolicyStep::kRestart);
  EXPECT_EQ(heap_policy_step("glibc.rtld.nns=2", nullptr), HeapPolicyStep::kRestart);
  EXPECT_EQ(heap_policy_step("glibc.malloc.trim_threshold=131072", nullptr),
            HeapPolicyStep::kLeaveAlone);
  EXPECT_EQ(heap_policy_step("glibc.rtld.nns=2:glibc.malloc.perturb=0", nullptr),
            HeapPolicyStep::kLeaveAlone);
  // After the restart (and in its children, which see glibc's rewritten variable).
  EXPECT_EQ(heap_policy_step("glibc.malloc.hugetlb=1", "1"), HeapPolicyStep::kApplyThresholds);
  EXPECT_EQ(heap_policy_step("glibc.malloc.hugetlb=1", "0"), HeapPolicyStep::kLeaveAlone);
}

TEST(HeapPolicy, HugePagesComeFirstAndOtherTunablesAreKept) {
  EXPECT_EQ(restart_tunables(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(restart_tunables(""), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(restart_tunables("glibc.rtld.nns=2"), "glibc.malloc.hugetlb=1:glibc.rtld.nns=2");
}

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

}  // namespace
}  // namespace atl
