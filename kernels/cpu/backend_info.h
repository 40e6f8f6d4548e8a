// What decides the CPU backend's bits besides Atoll's code and config.
#pragma once

#include <string>

namespace atl::kernels::cpu {

// The CPU, the kernels OpenBLAS picked for it at start-up, and the vector instructions this
// build was compiled for (-march=native by default). Two hosts give the same bits for the same
// config and seed only when these agree; `atoll --version` prints it, e.g. "cpu Intel(R)
// Xeon(R) Processor; OpenBLAS kernels SkylakeX; compiled for AVX-512".
std::string backend_description();

}  // namespace atl::kernels::cpu
