// Libraries of the CUDA toolkit loaded on first use (dlopen) instead of linked into every
// binary: cuBLASLt (cublaslt_library.h) and NCCL (nccl_group.cc). Internal to kernels/cuda.
#pragma once

#include <dlfcn.h>

#include <string>

namespace atl::kernels::cuda {

// `soname` through the loader's usual search (LD_LIBRARY_PATH, the binary's run path, its
// cache), then from `fallback_dir` (the toolkit directory the build used; may be null). Null
// when neither loads; *why is then the loader's reason for the soname.
void* open_shared_library(const char* soname, const char* fallback_dir, std::string* why);

// `name` from `lib` into `slot` (the C function's exact type); false, with *why naming it, when
// the library has no such symbol.
template <typename Fn>
bool resolve_symbol(void* lib, const char* name, Fn& slot, std::string* why) {
  slot = reinterpret_cast<Fn>(dlsym(lib, name));
  if (slot != nullptr) return true;
  *why = std::string("it has no ") + name;
  return false;
}

}  // namespace atl::kernels::cuda
