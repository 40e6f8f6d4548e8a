// Process-wide heap policy for processes that stream large tensors (the coordinator, nodes, the
// demo). gRPC reads a stream into slices of up to a few MiB that it allocates and frees as the
// bytes pass. glibc's defaults serve such blocks from fresh mmap'ed pages (above its dynamic mmap
// threshold, 128 KiB at first) and hand freed heap tops back to the kernel (trim threshold
// 128 KiB at first), so nearly every received MiB is faulted in again, page by page: on the
// bench host that, not TLS, held an fp32 update push to 170-230 MB/s (bench/transport;
// docs/decisions.md, "Transport: keep freed stream buffers for reuse").
#pragma once

namespace atl {

// Blocks under 32 MiB come from the heap (the largest threshold glibc would reach by itself),
// and up to 256 MiB freed at a heap's top stays for reuse instead of being returned to the
// kernel: a streaming process keeps up to that much more resident between streams. θ-sized
// buffers (hundreds of MB) are still mmap'ed and returned when freed. Does nothing, and returns
// false, when the allocator is not glibc's or GLIBC_TUNABLES sets a glibc.malloc tunable (the
// operator's choice wins); true when the policy was applied. Call it once, early in main().
bool keep_stream_buffers_on_heap();

}  // namespace atl
