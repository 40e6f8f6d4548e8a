// Writes one valid message per codec spec into the directory given as argv[1] (fuzz seeds, in
// the fuzz target's input format: 2 bytes numel, a flag byte, then the message).
#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/compress/codec.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const char* specs[] = {"none", "bf16", "fp16", "fp8", "int8", "int4:64", "nvfp4", "mxfp4",
                         "mxfp8", "topk:0.05+int4", "topk-chunked:0.1:64+nvfp4", "topk:0.3"};
  std::vector<float> x(300);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>((i * 37) % 101) - 0.05f;
  int k = 0;
  for (const char* s : specs) {
    auto codec = atl::algorithms::compress::Codec::create(s);
    auto msg = codec->encode(x);
    const std::string path = std::string(argv[1]) + "/seed" + std::to_string(k++);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 1;
    const unsigned char prefix[3] = {static_cast<unsigned char>(x.size() & 0xff),
                                     static_cast<unsigned char>(x.size() >> 8), 1};
    std::fwrite(prefix, 1, 3, f);
    std::fwrite(msg->data(), 1, msg->size(), f);
    std::fclose(f);
  }
  return 0;
}
