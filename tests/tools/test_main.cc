#include <gtest/gtest.h>

#include "kernels/cpu/backend_info.h"

int main(int argc, char** argv) {
  // The kernels `atoll` itself runs with, so that a test comparing its own arithmetic with an
  // atoll process compares like with like (kernels/cpu/backend_info.h).
  atl::kernels::cpu::use_feature_blas_kernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
