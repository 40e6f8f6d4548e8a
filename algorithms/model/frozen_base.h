// The frozen base model under LoRA adapters (algorithms/model/lora.h), stored in fp32 or in bf16.
//
// With bf16 storage the base takes 2 bytes a parameter instead of 4. The model reads it one
// transformer block at a time, widened into an fp32 stage (Llama), so the arithmetic is exactly
// that of an fp32 model whose base parameters were rounded to bf16 (nearest even) once: the same
// bits, whatever the storage. A base that was bf16 to begin with (most Hugging Face checkpoints)
// loses nothing, and fine-tunes to the same bits as with fp32 storage.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/model/param_set.h"
#include "kernels/core/status.h"

namespace atl::algorithms {

enum class BaseStorage : uint8_t { kFp32, kBf16 };

// "fp32" or "bf16".
const char* base_storage_name(BaseStorage s);
// One of the names above, or one line naming the value and the accepted ones.
StatusOr<BaseStorage> parse_base_storage(std::string_view text);

class FrozenBase {
 public:
  // Shares `params` as is (no copy).
  static std::shared_ptr<const FrozenBase> fp32(std::shared_ptr<const ParamSet> params);
  // Rounds every parameter to bf16 (nearest even) into a store of its own; `params` may be freed.
  static std::shared_ptr<const FrozenBase> bf16(const ParamSet& params);
  // fp32(params) or bf16(*params) by `storage`.
  static std::shared_ptr<const FrozenBase> make(BaseStorage storage,
                                                std::shared_ptr<const ParamSet> params);

  BaseStorage storage() const { return storage_; }
  const ParamLayout& layout() const { return layout_; }
  size_t numel() const { return layout_.numel(); }
  // Bytes the parameters take in memory: 4 or 2 per parameter.
  size_t stored_bytes() const;
  // The fp32 parameters in place (fp32 storage), null with bf16 storage.
  const float* fp32_data() const { return fp32_ ? fp32_->data() : nullptr; }
  // out[i] = parameter offset + i as fp32, for i < out.size() (bf16: widened exactly).
  void widen(size_t offset, std::span<float> out) const;
  // The whole base as fp32 values (a copy), e.g. to write it into a checkpoint.
  ParamSet widened() const;

 private:
  FrozenBase() = default;
  BaseStorage storage_ = BaseStorage::kFp32;
  ParamLayout layout_;
  std::shared_ptr<const ParamSet> fp32_;  // kFp32
  std::vector<uint16_t> bf16_;            // kBf16: bf16 bit patterns, layout order
};

}  // namespace atl::algorithms
