#include "algorithms/model/param_set.h"

#include <algorithm>

#include "kernels/core/check.h"

namespace atl::algorithms {

size_t ParamView::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

size_t ParamLayout::add(const std::string& name, std::vector<int64_t> shape) {
  ParamView v{name, numel_, std::move(shape)};
  numel_ += v.numel();
  views_.push_back(std::move(v));
  return views_.back().offset;
}

const ParamView* ParamLayout::find(const std::string& name) const {
  for (const auto& v : views_)
    if (v.name == name) return &v;
  return nullptr;
}

bool ParamLayout::operator==(const ParamLayout& o) const {
  if (views_.size() != o.views_.size() || numel_ != o.numel_) return false;
  for (size_t i = 0; i < views_.size(); ++i) {
    if (views_[i].name != o.views_[i].name || views_[i].offset != o.views_[i].offset ||
        views_[i].shape != o.views_[i].shape)
      return false;
  }
  return true;
}

std::string ParamLayout::describe() const {
  std::string s;
  for (const auto& v : views_) {
    s += v.name + " (";
    for (size_t i = 0; i < v.shape.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(v.shape[i]);
    }
    s += ")\n";
  }
  return s;
}

ParamSet::ParamSet(ParamLayout layout) : layout_(std::move(layout)), data_(layout_.numel(), 0.0f) {}

float* ParamSet::ptr(const std::string& name) {
  const ParamView* v = layout_.find(name);
  if (!v) internal_error("no parameter named " + name);
  return data_.data() + v->offset;
}
const float* ParamSet::ptr(const std::string& name) const {
  return const_cast<ParamSet*>(this)->ptr(name);
}

void ParamSet::zero() { std::fill(data_.begin(), data_.end(), 0.0f); }

std::string ParamSet::fingerprint() const {
  return sha256_hex(data_.data(), data_.size() * sizeof(float));
}

}  // namespace atl::algorithms
