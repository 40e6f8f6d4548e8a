// Process-wide heap policy for the processes that stream θ and updates and commit rounds (the
// coordinator, nodes, the demo). Two costs of glibc's defaults dominated them on a virtualised
// host, where every 4 KiB page fault costs microseconds (docs/decisions.md, "Transport: keep
// freed stream buffers for reuse" and "Commits: transparent huge pages for θ-sized buffers"):
//   - gRPC reads a stream into slices of up to a few MiB that it allocates and frees as the
//     bytes pass; glibc serves such blocks from fresh mmap'ed pages (its dynamic mmap threshold
//     starts at 128 KiB) and returns freed heap tops to the kernel, so nearly every received MiB
//     was faulted in again (an fp32 push ran at 170-230 MB/s);
//   - a round's commit allocates θ-sized buffers (θ_{r+1}, its momentum, the aggregate: 4 bytes
//     a parameter each) and faulted them in 4 KiB at a time: 2.3-3.4 s of a 51.7M-parameter
//     commit went to the outer step, mostly into page faults.
// The policy: transparent huge pages for what glibc mmaps and for heap growth
// (glibc.malloc.hugetlb=1, read by glibc only at start, hence a restart), blocks under 32 MiB
// from the heap and freed heap tops under 256 MiB kept for reuse (mallopt).
#pragma once

#include <string>

namespace atl {

// Set (to "1") in the environment of a process restarted under the policy, and inherited by its
// children: their GLIBC_TUNABLES came from us, not from an operator.
inline constexpr const char* kStreamHeapMarker = "ATOLL_STREAM_HEAP";

enum class HeapPolicyStep {
  kRestart,          // restart with restart_tunables() in GLIBC_TUNABLES and the marker set
  kApplyThresholds,  // restarted already, or a child of such a process: the mallopt thresholds
  kLeaveAlone,       // the operator set glibc.malloc tunables: theirs win
};
// From the current GLIBC_TUNABLES and marker values (null: unset).
HeapPolicyStep heap_policy_step(const char* tunables, const char* marker);
// glibc.malloc.hugetlb=1 first, then what is set already: glibc rewrites the variable it read
// so that children see only its first tunable.
std::string restart_tunables(const char* tunables);

// Blocks under 32 MiB come from the heap (the largest threshold glibc would reach by itself),
// and up to 256 MiB freed at a heap's top stays for reuse instead of being returned to the
// kernel: a streaming process keeps up to that much more resident between streams. θ-sized
// buffers are still mmap'ed and returned when freed. False where the allocator is not glibc's.
bool keep_stream_buffers_on_heap();

// The whole policy: re-executes the process (/proc/self/exe, same argv and pid) when
// heap_policy_step says kRestart, applies the thresholds when it says kApplyThresholds. Returns
// when there is nothing (more) to do, or the exec failed (one line on stderr; the process goes
// on with glibc's defaults). Call it early in main(), before any thread is started.
void use_stream_heap_policy(char** argv);

}  // namespace atl
