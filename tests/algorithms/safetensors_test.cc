// safetensors codec: round trips, and rejection (never a crash) of corrupt input.
#include "algorithms/model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "algorithms/model/llama.h"
#include "kernels/core/philox.h"

namespace atl::algorithms {
namespace {

// Raw file from a header string and a data section (for hand-made corrupt inputs).
std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes,
                              uint64_t header_len_override = 0) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t n = header_len_override ? header_len_override : header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

Status decode_status(const std::vector<uint8_t>& b) {
  auto r = decode_safetensors(b.data(), b.size());
  return r.ok() ? Status::Ok() : r.status();
}

void expect_rejected(const std::vector<uint8_t>& b, const std::string& fragment) {
  Status st = decode_status(b);
  ASSERT_FALSE(st.ok()) << "accepted; expected an error containing: " << fragment;
  EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
}

Safetensors sample() {
  Safetensors st;
  const float f[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  const int32_t i[3] = {-1, 0, 2147483647};
  const double d[2] = {3.141592653589793, -1e300};
  const uint8_t u[5] = {0, 1, 2, 254, 255};
  st.tensors.push_back(make_tensor("w", {2, 3}, f));
  st.tensors.push_back(make_tensor("ids", {3}, i));
  st.tensors.push_back(make_tensor("scalar", {}, d));  // rank 0: one element
  st.tensors.push_back(make_tensor("bytes", {5}, u));
  st.tensors.push_back(make_tensor("empty", {0, 4}, f));
  st.metadata["experiment"] = "e1";
  st.metadata["round"] = "17";
  return st;
}

TEST(Safetensors, RoundTrip) {
  Safetensors st = sample();
  auto enc = encode_safetensors(st);
  ASSERT_TRUE(enc.ok()) << enc.status().message();
  const auto& b = *enc;
  uint64_t hn = 0;
  for (int i = 0; i < 8; ++i) hn |= uint64_t(b[i]) << (8 * i);
  EXPECT_EQ(hn % 8, 0u);  // data section aligned
  EXPECT_EQ(b[8], '{');
  auto dec = decode_safetensors(b.data(), b.size());
  ASSERT_TRUE(dec.ok()) << dec.status().message();
  EXPECT_EQ(dec->metadata, st.metadata);
  ASSERT_EQ(dec->tensors.size(), st.tensors.size());
  for (const auto& t : st.tensors) {
    const StTensor* u = dec->find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->dtype, t.dtype);
    EXPECT_EQ(u->shape, t.shape);
    EXPECT_EQ(u->data, t.data);
  }
  EXPECT_EQ(dec->find("w")->to_f32()[2], 3.25f);
  EXPECT_EQ(dec->find("ids")->to_i32()[2], 2147483647);
  EXPECT_EQ(dec->find("scalar")->to_f64()[0], 3.141592653589793);
  // Re-encoding the decoded file gives the same bytes (tensors keep data order).
  auto again = encode_safetensors(*dec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, b);
}

TEST(Safetensors, EncodeRejectsBadInput) {
  Safetensors st = sample();
  st.tensors.push_back(st.tensors[0]);
  EXPECT_FALSE(encode_safetensors(st).ok());  // duplicate name
  st = sample();
  st.tensors[0].shape = {4, 4};
  EXPECT_FALSE(encode_safetensors(st).ok());  // size mismatch
  st = sample();
  st.tensors[0].name = "__metadata__";
  EXPECT_FALSE(encode_safetensors(st).ok());
}

TEST(Safetensors, MinimalHandWrittenFileDecodes) {
  auto b = raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  auto dec = decode_safetensors(b.data(), b.size());
  ASSERT_TRUE(dec.ok()) << dec.status().message();
  EXPECT_EQ(dec->tensors[0].shape, (std::vector<int64_t>{2}));
  auto e = raw_file("{}", 0);
  EXPECT_TRUE(decode_safetensors(e.data(), e.size()).ok());
}

TEST(Safetensors, RejectsCorruptInput) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect_rejected({1, 2, 3}, "truncated");
  expect_rejected(raw_file("{}", 0, 1ULL << 60), "exceeds the limit");
  expect_rejected(raw_file("{}", 0, 1000), "truncated");
  expect_rejected(raw_file("{\"a\": ", 0), "not valid JSON");
  expect_rejected(raw_file("[1,2]", 0), "not a JSON object");
  expect_rejected(raw_file("{" + ok_entry + "," + ok_entry + "}", 8), "duplicate key");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                  "does not match");
  expect_rejected(raw_file(R"({"a":{"dtype":"Q99","shape":[2],"data_offsets":[0,8]}})", 8),
                  "unknown dtype");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                  "non-negative");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
                  "backwards");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
                  "past the");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12),
                  "cover");  // trailing bytes
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           12),
                  "overlaps");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "gap");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "data_offsets");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
                  "unknown field");
  expect_rejected(raw_file(R"({"__metadata__":{"k":1}})", 0), "not a string");
  // Shape whose element count overflows 64 bits.
  expect_rejected(
      raw_file(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})",
               8),
      "does not match");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,1e3]}})", 8),
                  "data_offsets");
}

TEST(Safetensors, EveryTruncationAndRandomCorruptionIsAnErrorNotACrash) {
  auto enc = encode_safetensors(sample());
  ASSERT_TRUE(enc.ok());
  const auto& b = *enc;
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_FALSE(decode_safetensors(b.data(), n).ok()) << "prefix of " << n << " bytes accepted";
  Philox rng(1234, 0);
  int accepted = 0;
  for (uint64_t trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> c = b;
    const int flips = 1 + static_cast<int>(rng.below(trial * 16, 4));
    for (int f = 0; f < flips; ++f) {
      const size_t pos = rng.below(trial * 16 + 1 + 2 * f, c.size());
      c[pos] = static_cast<uint8_t>(rng.u32(trial * 64 + 32 + f));
    }
    auto r = decode_safetensors(c.data(), c.size());
    accepted += r.ok();  // flips inside the data section are legitimately accepted
  }
  EXPECT_LT(accepted, 3000);
}

TEST(Safetensors, ParamSetRoundTripAndMismatches) {
  ModelConfig c;
  c.vocab = 32;
  c.dim = 16;
  c.layers = 2;
  c.heads = 2;
  c.ffn_hidden = 24;
  ParamSet p(make_layout(c));
  init_params(p, c, 3);
  ParamSet m(make_layout(c));
  for (size_t i = 0; i < m.numel(); ++i) m.data()[i] = float(i);
  Safetensors st;
  append_params(st, p);
  append_params(st, m, "optimizer.m.");
  st.metadata["round"] = "3";
  auto enc = encode_safetensors(st);
  ASSERT_TRUE(enc.ok());
  auto dec = decode_safetensors(enc->data(), enc->size());
  ASSERT_TRUE(dec.ok()) << dec.status().message();

  ParamSet q(make_layout(c)), qm(make_layout(c));
  // Strict load of the parameters rejects the optimizer tensors under the empty prefix.
  Status strict = read_params(*dec, q);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.message().find("optimizer.m."), std::string::npos) << strict.message();
  ASSERT_TRUE(read_params(*dec, q, "", /*strict=*/false).ok());
  ASSERT_TRUE(read_params(*dec, qm, "optimizer.m.").ok());
  EXPECT_EQ(q.fingerprint(), p.fingerprint());
  EXPECT_EQ(qm.fingerprint(), m.fingerprint());

  // A model of another shape: the error names the tensor and both shapes; params untouched.
  ModelConfig c2 = c;
  c2.ffn_hidden = 32;
  ParamSet r(make_layout(c2));
  Status st2 = read_params(*dec, r, "", false);
  ASSERT_FALSE(st2.ok());
  EXPECT_NE(st2.message().find("model.layers.0.mlp.gate_proj.weight"), std::string::npos)
      << st2.message();
  EXPECT_NE(st2.message().find("(24,16)"), std::string::npos) << st2.message();
  EXPECT_NE(st2.message().find("(32,16)"), std::string::npos) << st2.message();
  for (float x : r.vec()) ASSERT_EQ(x, 0.0f);
  // More layers than the file has: the missing tensor is named.
  ModelConfig c3 = c;
  c3.layers = 3;
  ParamSet s3(make_layout(c3));
  Status st3 = read_params(*dec, s3, "", false);
  ASSERT_FALSE(st3.ok());
  EXPECT_NE(st3.message().find("model.layers.2.input_layernorm.weight"), std::string::npos)
      << st3.message();
  // Wrong dtype.
  Safetensors bad = *dec;
  bad.tensors[0] = make_tensor(bad.tensors[0].name, bad.tensors[0].shape,
                               std::vector<int32_t>(bad.tensors[0].numel()).data());
  Status st4 = read_params(bad, q, "", false);
  ASSERT_FALSE(st4.ok());
  EXPECT_NE(st4.message().find("I32"), std::string::npos) << st4.message();
}

}  // namespace
}  // namespace atl::algorithms
