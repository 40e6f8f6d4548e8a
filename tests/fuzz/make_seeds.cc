// Writes one valid message per codec spec into the directory given as argv[1] (fuzz seeds, in
// the fuzz target's input format: 2 bytes numel, a flag byte, then the message).
#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"
#include "algorithms/compress/exact_delta.h"
#include "algorithms/compress/sparse_delta.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const char* specs[] = {"none", "bf16", "fp16", "fp8", "int8", "int4:64", "nvfp4", "mxfp4",
                         "mxfp8", "topk:0.05+int4", "topk-chunked:0.1:64+nvfp4", "topk:0.3"};
  std::vector<float> x(300);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>((i * 37) % 101) - 0.05f;
  // θ deltas against the fuzz target's base (0.001·(i mod 997) − 0.5): scattered changes
  // (indices layout) and one contiguous range (runs layout).
  std::vector<float> base(x.size()), scattered, contiguous;
  for (size_t i = 0; i < x.size(); ++i) base[i] = 0.001f * static_cast<float>(i % 997) - 0.5f;
  scattered = contiguous = base;
  for (size_t i = 0; i < x.size(); i += 17) scattered[i] += 0.25f;
  for (size_t i = 40; i < 120; ++i) contiguous[i] -= 0.125f;
  namespace cx = atl::algorithms::compress;
  std::vector<std::vector<uint8_t>> messages;
  for (const char* s : specs) messages.push_back(*cx::Codec::create(s)->encode(x));
  messages.push_back(*cx::exact_delta::encode(scattered, base));
  messages.push_back(*cx::exact_delta::encode(contiguous, base));
  messages.push_back(*cx::sparse_delta::encode(scattered, base));
  int k = 0;
  for (const auto& msg : messages) {
    const std::string path = std::string(argv[1]) + "/seed" + std::to_string(k++);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 1;
    const unsigned char prefix[3] = {static_cast<unsigned char>(x.size() & 0xff),
                                     static_cast<unsigned char>(x.size() >> 8), 1};
    std::fwrite(prefix, 1, 3, f);
    std::fwrite(msg.data(), 1, msg.size(), f);
    std::fclose(f);
  }
  return 0;
}
