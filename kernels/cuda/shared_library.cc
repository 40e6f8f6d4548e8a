#include "kernels/cuda/shared_library.h"

namespace atl::kernels::cuda {

void* open_shared_library(const char* soname, const char* fallback_dir, std::string* why) {
  void* lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) return lib;
  *why = dlerror();
  if (fallback_dir != nullptr)
    lib = dlopen((std::string(fallback_dir) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
  return lib;
}

}  // namespace atl::kernels::cuda
