// Writes valid inputs for every fuzz target into <dir>/<target>/ (the targets' input formats:
// see each *_fuzz.cc). Built with -DATL_FUZZ_PROTO when the transport's protobuf code is
// available, which adds seeds for the ChunkAssembler target.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/exact_delta.h"
#include "algorithms/compress/sparse_delta.h"
#include "algorithms/model/safetensors.h"
#ifdef ATL_FUZZ_PROTO
#include "transport/bulk_frame.h"
#include "transport/tensor_stream.h"
#endif

namespace {

bool write(const std::string& dir, int k, const std::vector<unsigned char>& prefix,
           const std::vector<uint8_t>& body) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/seed" + std::to_string(k);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  std::fwrite(prefix.data(), 1, prefix.size(), f);
  std::fwrite(body.data(), 1, body.size(), f);
  return std::fclose(f) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string root = argv[1];
  namespace cmp = atl::algorithms::compress;
  std::vector<float> x(300);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>((i * 37) % 101) - 0.05f;
  const std::vector<unsigned char> numel_prefix = {static_cast<unsigned char>(x.size() & 0xff),
                                                   static_cast<unsigned char>(x.size() >> 8), 1};

  const char* specs[] = {"none",  "bf16",    "fp16",   "fp8",  "int8", "int4:64",
                         "nvfp4", "mxfp4",   "mxfp8",  "topk:0.05+int4",
                         "topk-chunked:0.1:64+nvfp4", "topk:0.3", "sign", "ternary:32",
                         "topk-chunked:0.1:64+ternary", "topk:0.05+sign:32", "int4:64+zstd",
                         "topk:0.05+int4+zstd"};
  int k = 0;
  for (const char* s : specs) {
    if (!write(root + "/codec", k++, numel_prefix, *cmp::Codec::create(s)->encode(x))) return 1;
  }
  {
    // Exact θ deltas (the codec target decodes them against its base 0.001·(i mod 997) − 0.5):
    // scattered changes (indices layout) and one contiguous range (runs layout).
    std::vector<float> b(x.size());
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.001f * static_cast<float>(i % 997) - 0.5f;
    std::vector<float> scattered = b, contiguous = b;
    for (size_t i = 0; i < x.size(); i += 17) scattered[i] += 0.25f;
    for (size_t i = 40; i < 120; ++i) contiguous[i] -= 0.125f;
    if (!write(root + "/codec", k++, numel_prefix, *cmp::exact_delta::encode(scattered, b)))
      return 1;
    if (!write(root + "/codec", k++, numel_prefix, *cmp::exact_delta::encode(contiguous, b)))
      return 1;
  }

  // sparse-delta against the target's fixed base (0.01 (i mod 97) - 0.4).
  std::vector<float> base(x.size());
  for (size_t i = 0; i < base.size(); ++i) base[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  k = 0;
  for (size_t stride : {1, 3, 50, 1000}) {
    std::vector<float> cur = base;
    for (size_t i = 0; i < cur.size(); i += stride) cur[i] += 0.125f;
    if (!write(root + "/sparse_delta", k++, numel_prefix, *cmp::sparse_delta::encode(cur, base)))
      return 1;
  }

  namespace alg = atl::algorithms;
  alg::Safetensors st;
  const float f[6] = {1, 2, 3, 4, 5, 6};
  const int32_t ints[3] = {7, 8, 9};
  st.tensors.push_back(alg::make_tensor("w", {2, 3}, f));
  st.tensors.push_back(alg::make_tensor("step", {3}, ints));
  st.metadata["format"] = "pt";
  if (!write(root + "/safetensors", 0, {}, *alg::encode_safetensors(st))) return 1;

#ifdef ATL_FUZZ_PROTO
  std::string payload(1000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
  atoll_pb::v1::TensorHeader header;
  header.set_codec("int8:32");
  header.set_round(1);
  k = 0;
  for (size_t chunk : {1000, 300, 64}) {
    auto chunks = atl::transport::chunk_payload(header, payload, chunk);
    std::vector<uint8_t> body;
    for (const auto& c : *chunks) {
      const std::string bytes = c.SerializeAsString();
      body.push_back(static_cast<uint8_t>(bytes.size() & 0xff));
      body.push_back(static_cast<uint8_t>(bytes.size() >> 8));
      body.insert(body.end(), bytes.begin(), bytes.end());
    }
    if (!write(root + "/chunk_assembler", k++, {1}, body)) return 1;
  }
  // The bulk lane: a pull request and a push header to the server (side byte 0), a pull's
  // reply header to a client (side byte 1).
  namespace tr = atl::transport;
  atoll_pb::v1::PullParamsRequest pull;
  pull.set_experiment_id("exp");
  pull.set_round(3);
  pull.set_have_fingerprint(std::string(32, 'f'));
  atoll_pb::v1::TensorHeader push;
  push.set_experiment_id("exp");
  push.set_round(3);
  push.set_codec("none");
  push.set_numel(250);
  push.set_payload_bytes(1000);
  push.set_wire_version(2);
  const std::string frames[] = {
      tr::bulk_frame(tr::kBulkRequestMagic, tr::kBulkPull, pull.SerializeAsString()),
      tr::bulk_frame(tr::kBulkRequestMagic, tr::kBulkPush, push.SerializeAsString()),
      tr::bulk_frame(tr::kBulkReplyMagic, 0, push.SerializeAsString())};
  k = 0;
  for (const std::string& f : frames) {
    const unsigned char side = k == 2 ? 1 : 0;
    if (!write(root + "/bulk_frame", k++, {side}, std::vector<uint8_t>(f.begin(), f.end())))
      return 1;
  }
#endif
  return 0;
}
