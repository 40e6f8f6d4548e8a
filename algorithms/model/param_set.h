// ParamSet: every parameter of a model in ONE flat, contiguous fp32 buffer (llm.c style) plus a
// table of named views (name, offset, shape). Gradients, optimizer moments, pseudo-gradients,
// masks and checkpoints share the layout, so each of them is a single pass over a flat array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/sha256.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

struct ParamView {
  std::string name;             // e.g. "model.layers.0.self_attn.q_proj.weight" (HF Llama names)
  size_t offset = 0;            // in elements, into the flat buffer
  std::vector<int64_t> shape;   // PyTorch order, e.g. (out, in) for a linear weight
  size_t numel() const;
};

// The layout alone (names, offsets, shapes): shared by params, grads, moments, masks.
class ParamLayout {
 public:
  // Appends a view; returns its offset. Views are packed in insertion order, no padding, so
  // views added back to back are contiguous (fused q|k|v and gate|up GEMMs rely on it).
  size_t add(const std::string& name, std::vector<int64_t> shape);
  const std::vector<ParamView>& views() const { return views_; }
  size_t numel() const { return numel_; }
  // nullptr if absent.
  const ParamView* find(const std::string& name) const;
  bool operator==(const ParamLayout& o) const;
  // One line per view, used in fingerprints of the layout and in error messages.
  std::string describe() const;

 private:
  std::vector<ParamView> views_;
  size_t numel_ = 0;
};

class ParamSet {
 public:
  ParamSet() = default;
  explicit ParamSet(ParamLayout layout);  // zero-filled

  const ParamLayout& layout() const { return layout_; }
  size_t numel() const { return data_.size(); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::vector<float>& vec() { return data_; }
  const std::vector<float>& vec() const { return data_; }

  // The view's first element; aborts if the name is unknown (a programming error).
  float* ptr(const std::string& name);
  const float* ptr(const std::string& name) const;

  void zero();
  // SHA-256 over the raw little-endian fp32 bytes of the flat buffer, hex.
  std::string fingerprint() const;

 private:
  ParamLayout layout_;
  std::vector<float> data_;
};

}  // namespace atl::algorithms
