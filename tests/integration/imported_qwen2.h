// A small grouped-query Qwen2 model in the Hugging Face layout, imported with `atoll import hf`:
// what the tests of fine-tuning a user's own model start from.
#pragma once

#include <gtest/gtest.h>

#include "tests/integration/cli_test_util.h"
#include "tests/tools/hf_dir.h"

namespace atl::testing {

// A Qwen2-layout Hugging Face directory (2 KV heads for 4 query heads, q/k/v biases, an untied
// head, bf16 weights, a byte-level BPE tokenizer.json) written into dir/hf and imported as
// dir/base.safetensors; `spec` is what was written, with FFN hidden size `ffn`.
inline void import_small_qwen2(const TempDir& dir, HfSpec& spec, int ffn = 64) {
  write_byte_level_tokenizer_json(dir / "tokenizer.json");
  spec.architecture = "Qwen2ForCausalLM";
  spec.vocab = 263;  // the tokenizer's 256 bytes, 6 merges and one special token
  spec.dim = 32;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ffn = ffn;
  spec.dtype = algorithms::DType::kBF16;
  spec.tokenizer_json = read_text(dir / "tokenizer.json");
  write_hf_dir(dir / "hf", spec);
  auto imported =
      run_atoll({"import", "hf", dir / "hf", "--out", dir / "base.safetensors"}, dir / "imp.log");
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
}

}  // namespace atl::testing
