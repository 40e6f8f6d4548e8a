// kernels/cuda/cublaslt_library.h: cuBLASLt is not loaded at process start (it is not linked),
// and loads with every function it needs when asked. Needs the CUDA toolkit's cuBLASLt on the
// host (as building the CUDA backend does), not a GPU: it runs where the other CUDA tests skip.
#include "kernels/cuda/cublaslt_library.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace atl::kernels::cuda {
namespace {

TEST(CublasLtLibrary, NotMappedAtStartThenLoadedWithEveryFunction) {
  // Each test runs in its own process under CTest: nothing before this line made a context.
  EXPECT_FALSE(cublaslt_mapped());
  auto lt = load_cublaslt();
  ASSERT_TRUE(lt.ok()) << lt.status().to_string();
  EXPECT_TRUE(cublaslt_mapped());
  const CublasLt& t = **lt;
  for (const void* fn :
       {reinterpret_cast<const void*>(t.Create), reinterpret_cast<const void*>(t.Destroy),
        reinterpret_cast<const void*>(t.GetStatusName),
        reinterpret_cast<const void*>(t.GetStatusString),
        reinterpret_cast<const void*>(t.MatmulDescCreate),
        reinterpret_cast<const void*>(t.MatmulDescDestroy),
        reinterpret_cast<const void*>(t.MatmulDescSetAttribute),
        reinterpret_cast<const void*>(t.MatrixLayoutCreate),
        reinterpret_cast<const void*>(t.MatrixLayoutDestroy),
        reinterpret_cast<const void*>(t.MatmulPreferenceCreate),
        reinterpret_cast<const void*>(t.MatmulPreferenceDestroy),
        reinterpret_cast<const void*>(t.MatmulPreferenceSetAttribute),
        reinterpret_cast<const void*>(t.MatmulAlgoGetHeuristic),
        reinterpret_cast<const void*>(t.Matmul)})
    EXPECT_NE(fn, nullptr);
  // A call that needs no GPU goes through to the library.
  EXPECT_STREQ(t.GetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  // Loaded once: the same table again, and the accessor agrees.
  auto again = load_cublaslt();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *lt);
  EXPECT_EQ(&cublaslt(), *lt);
}

}  // namespace
}  // namespace atl::kernels::cuda
