#include "algorithms/model/frozen_base.h"

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/formats/convert.h"

namespace atl::algorithms {

const char* base_storage_name(BaseStorage s) {
  return s == BaseStorage::kBf16 ? "bf16" : "fp32";
}

StatusOr<BaseStorage> parse_base_storage(std::string_view text) {
  if (text == "fp32") return BaseStorage::kFp32;
  if (text == "bf16") return BaseStorage::kBf16;
  return InvalidArgument("unknown base storage '" + std::string(text) +
                         "': use fp32 (4 bytes a parameter) or bf16 (2 bytes a parameter, the "
                         "base rounded to bf16 once)");
}

std::shared_ptr<const FrozenBase> FrozenBase::fp32(std::shared_ptr<const ParamSet> params) {
  ATOLL_CHECK(params != nullptr, "FrozenBase needs parameters");
  auto base = std::shared_ptr<FrozenBase>(new FrozenBase());
  base->storage_ = BaseStorage::kFp32;
  base->layout_ = params->layout();
  base->fp32_ = std::move(params);
  return base;
}

std::shared_ptr<const FrozenBase> FrozenBase::bf16(const ParamSet& params) {
  auto base = std::shared_ptr<FrozenBase>(new FrozenBase());
  base->storage_ = BaseStorage::kBf16;
  base->layout_ = params.layout();
  base->bf16_.resize(params.numel());
  kernels::formats::quantize_bf16(params.vec(), base->bf16_);
  return base;
}

std::shared_ptr<const FrozenBase> FrozenBase::make(BaseStorage storage,
                                                   std::shared_ptr<const ParamSet> params) {
  ATOLL_CHECK(params != nullptr, "FrozenBase needs parameters");
  return storage == BaseStorage::kBf16 ? bf16(*params) : fp32(std::move(params));
}

size_t FrozenBase::stored_bytes() const {
  return numel() * (storage_ == BaseStorage::kBf16 ? sizeof(uint16_t) : sizeof(float));
}

void FrozenBase::widen(size_t offset, std::span<float> out) const {
  ATOLL_CHECK(offset <= numel() && out.size() <= numel() - offset,
              "FrozenBase::widen: range outside the base");
  if (fp32_) {
    std::copy_n(fp32_->data() + offset, out.size(), out.data());
    return;
  }
  kernels::formats::dequantize_bf16(std::span<const uint16_t>(bf16_).subspan(offset, out.size()),
                                    out);
}

ParamSet FrozenBase::widened() const {
  ParamSet out(layout_);
  widen(0, out.vec());
  return out;
}

}  // namespace atl::algorithms
