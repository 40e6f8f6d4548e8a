// The safetensors format (https://github.com/huggingface/safetensors), in memory: bytes in,
// bytes out (files are read and written by the layers above).
//
//   [8 bytes: N, little-endian u64] [N bytes: JSON header] [data]
//   header = { "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//              "__metadata__": {"key": "string value", ...} }   (metadata optional)
// Offsets are relative to the start of the data section; tensors are row-major, little-endian.
//
// decode_safetensors validates everything (the bytes may come from a network peer or a damaged
// file) and returns a Status naming the first problem; it never reads out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

enum class DType {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool
};

// "F32", "I32", ... as written in the header.
const char* dtype_name(DType d);
// Bytes per element.
size_t dtype_size(DType d);

struct StTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // empty = scalar (1 element)
  std::vector<uint8_t> data;   // raw little-endian bytes, numel · dtype_size

  size_t numel() const;
  // Typed copies; the caller checks dtype first (these abort on a mismatch).
  std::vector<float> to_f32() const;
  std::vector<double> to_f64() const;
  std::vector<int32_t> to_i32() const;
};

// Convenience constructors (copy the values).
StTensor make_tensor(std::string name, std::vector<int64_t> shape, const float* values);
StTensor make_tensor(std::string name, std::vector<int64_t> shape, const double* values);
StTensor make_tensor(std::string name, std::vector<int64_t> shape, const int32_t* values);
StTensor make_tensor(std::string name, std::vector<int64_t> shape, const uint8_t* values);

struct Safetensors {
  std::vector<StTensor> tensors;                // in data order
  std::map<std::string, std::string> metadata;  // "__metadata__"

  const StTensor* find(const std::string& name) const;  // nullptr if absent
};

struct SafetensorsLimits {
  uint64_t max_header_bytes = 100'000'000;  // the reference implementation's bound
  size_t max_tensors = 1'000'000;
  size_t max_rank = 16;
};

// Data is written in the order of `st.tensors`; the header is padded with spaces to a multiple
// of 8 bytes so the data section is 8-byte aligned. Returns an error for duplicate or empty
// names, the reserved name "__metadata__", or data whose size does not match dtype × shape.
StatusOr<std::vector<uint8_t>> encode_safetensors(const Safetensors& st);

StatusOr<Safetensors> decode_safetensors(const uint8_t* bytes, size_t n,
                                         const SafetensorsLimits& limits = {});

// ---- ParamSet <-> safetensors (F32 tensors named after the views, with an optional prefix, so
// one file can hold parameters and optimizer moments, e.g. prefix "optimizer.m.").
void append_params(Safetensors& st, const ParamSet& params, const std::string& prefix = "");

// Fills `params` (whose layout says what to expect) from the tensors named prefix + view name.
// Every view must be present as F32 with exactly its shape; the error names the first tensor
// that is missing or differs. With strict, a tensor under `prefix` that is not in the layout is
// an error too (the file was written for a different model).
Status read_params(const Safetensors& st, ParamSet& params, const std::string& prefix = "",
                   bool strict = true);

}  // namespace atl::algorithms
