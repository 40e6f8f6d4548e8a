// Transparent huge pages for large buffers made anew again and again (a θ-sized vector of a
// commit): on a virtualised host each 4 KiB page fault costs microseconds, and a buffer written
// for the first time faults once per page (bench/store). Not for a buffer made once and reused
// (a receive buffer): there only the first touch differs, and it can cost more in huge pages
// (docs/decisions.md, "Receive buffers in 4 KiB pages").
#pragma once

#include <cstddef>

namespace atl {

// Advises the 2 MiB-aligned interior of [data, data + bytes) to fault in as transparent huge
// pages (madvise MADV_HUGEPAGE): pages not touched yet then come 2 MiB at a time, 512 times
// fewer faults. Advice only: ignored where the kernel offers no huge pages.
void advise_huge_pages(void* data, size_t bytes);
// The opposite (MADV_NOHUGEPAGE on the same interior): 4 KiB pages even where `new` advised huge
// ones, for a buffer that is made once and reused (transport's receive buffers).
void advise_small_pages(void* data, size_t bytes);

}  // namespace atl
