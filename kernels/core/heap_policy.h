// Process-wide heap policy for the processes that stream θ and updates and commit rounds (the
// coordinator, nodes, the demo, the simulation). Two costs of glibc's defaults dominated them on
// a virtualised host, where every 4 KiB page fault costs microseconds (docs/decisions.md,
// "Transport: keep freed stream buffers for reuse" and "Commits: transparent huge pages for
// θ-sized buffers"):
//   - gRPC reads a stream into slices of up to a few MiB that it allocates and frees as the
//     bytes pass; glibc serves such blocks from fresh mmap'ed pages (its dynamic mmap threshold
//     starts at 128 KiB) and returns freed heap tops to the kernel, so nearly every received MiB
//     was faulted in again (an fp32 push ran at 170-230 MB/s);
//   - a round's commit allocates θ-sized buffers (θ_{r+1}, its momentum, the aggregate: 4 bytes
//     a parameter each) and faulted them in 4 KiB at a time: 2.3-3.4 s of a 51.7M-parameter
//     commit went to the outer step, mostly into page faults.
#pragma once

#include <cstddef>

namespace atl {

// Blocks of at least this many bytes are mmap'ed by glibc (under the policy) and, allocated by
// C++ `new` (every std::vector and std::string), advised to use transparent huge pages
// (kernels/core/huge_pages.h; transport's receive buffers advise 4 KiB pages back).
inline constexpr size_t kLargeBlockBytes = size_t{32} << 20;

// Blocks under 32 MiB come from the heap (the largest threshold glibc would reach by itself),
// and up to 256 MiB freed at a heap's top stays for reuse instead of being returned to the
// kernel: a streaming process keeps up to that much more resident between streams. False where
// the allocator is not glibc's.
bool keep_stream_buffers_on_heap();

// From now on, C++ allocations of kLargeBlockBytes or more are advised (madvise MADV_HUGEPAGE)
// to fault in as 2 MiB pages where the kernel offers transparent huge pages (its `madvise` or
// `always` mode): 512 times fewer faults for a θ-sized buffer. Off (false) by default.
void set_huge_page_advice(bool on);
bool huge_page_advice();

// The whole policy: keep_stream_buffers_on_heap() and set_huge_page_advice(true), unless
// GLIBC_TUNABLES sets a glibc.malloc tunable (the operator's choice wins; then nothing changes).
// True when applied. Call it once, early in main().
bool use_stream_heap_policy();

}  // namespace atl
