#include "algorithms/compress/spec.h"

#include <charconv>
#include <cmath>
#include <vector>

#include "kernels/core/number_text.h"

namespace atl::algorithms::compress {
namespace {

bool parse_u32(std::string_view s, uint32_t& out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool parse_double(std::string_view s, double& out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t p = s.find(sep, start);
    parts.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return parts;
}

const char* quantizer_name(Quantizer q) {
  switch (q) {
    case Quantizer::kFp32: return "fp32";
    case Quantizer::kBf16: return "bf16";
    case Quantizer::kFp16: return "fp16";
    case Quantizer::kFp8: return "fp8";
    case Quantizer::kMxfp8: return "mxfp8";
    case Quantizer::kMxfp4: return "mxfp4";
    case Quantizer::kNvfp4: return "nvfp4";
    case Quantizer::kInt8: return "int8";
    case Quantizer::kInt4: return "int4";
    case Quantizer::kInt3: return "int3";
    case Quantizer::kSign: return "sign";
    case Quantizer::kTernary: return "ternary";
  }
  return "?";
}

Status bad(std::string_view text, const std::string& why) {
  return InvalidArgument("codec spec '" + std::string(text) + "': " + why +
                         " (expected e.g. none, bf16, fp8, int8, int4:64, nvfp4, mxfp4, sign, "
                         "ternary:256, topk:0.02, topk-chunked:0.01:4096+int4, int4:256+zstd)");
}

}  // namespace

uint64_t kept_in(double fraction, uint64_t len) {
  if (len == 0) return 0;
  const double k = std::round(fraction * static_cast<double>(len));
  if (k < 1) return 1;
  if (k >= static_cast<double>(len)) return len;
  return static_cast<uint64_t>(k);
}

uint64_t kept_count(const CodecSpec& spec, uint64_t n) {
  switch (spec.sparsifier) {
    case Sparsifier::kDense: return n;
    case Sparsifier::kTopk: return kept_in(spec.fraction, n);
    case Sparsifier::kTopkChunked: {
      const uint64_t full = n / spec.chunk, tail = n % spec.chunk;
      return full * kept_in(spec.fraction, spec.chunk) + kept_in(spec.fraction, tail);
    }
  }
  return n;
}

std::string CodecSpec::to_string() const {
  std::string s;
  if (sparsifier == Sparsifier::kTopk) {
    s = "topk:";
    s += shortest_decimal(fraction);
  }
  if (sparsifier == Sparsifier::kTopkChunked) {
    s = "topk-chunked:";
    s += shortest_decimal(fraction);
    s += ":";
    s += std::to_string(chunk);
  }
  if (quantizer != Quantizer::kFp32) {
    if (!s.empty()) s += "+";
    s += quantizer_name(quantizer);
    if (quantizer == Quantizer::kInt8 || quantizer == Quantizer::kInt4 ||
        quantizer == Quantizer::kInt3 || quantizer == Quantizer::kSign ||
        quantizer == Quantizer::kTernary) {
      s += ":";
      s += std::to_string(block);
    }
  }
  // Dense fp32 is "none"; with the entropy stage it has to be named ("fp32+zstd").
  if (s.empty()) s = zstd ? "fp32" : "none";
  if (zstd) s += "+zstd";
  return s;
}

StatusOr<CodecSpec> parse_spec(std::string_view text) {
  if (text.empty() || text.size() > 128) return bad(text, "empty or longer than 128 characters");
  CodecSpec spec;
  auto stages = split(text, '+');
  if (stages.size() > 1 && stages.back() == "zstd") {
    spec.zstd = true;
    stages.pop_back();
    if (stages.size() == 1 && stages[0] == "none") {
      return bad(text, "\"none\" sends raw fp32 and has no entropy stage; use fp32+zstd");
    }
  }
  if (stages.size() > 2) return bad(text, "at most a sparsifier and a quantizer, then zstd");
  bool have_quantizer = false;
  for (size_t si = 0; si < stages.size(); ++si) {
    const auto parts = split(stages[si], ':');
    const std::string_view name = parts[0];
    if (name == "topk" || name == "topk-chunked") {
      if (si != 0) return bad(text, "the sparsifier must come first");
      const bool chunked = name == "topk-chunked";
      if (parts.size() < 2 || parts.size() > (chunked ? 3u : 2u)) {
        return bad(text, std::string(name) + " takes a fraction" + (chunked ? " and a chunk" : ""));
      }
      if (!parse_double(parts[1], spec.fraction) || !(spec.fraction > 0.0) ||
          !(spec.fraction <= 1.0)) {
        return bad(text, "fraction must be a number in (0, 1]");
      }
      spec.sparsifier = chunked ? Sparsifier::kTopkChunked : Sparsifier::kTopk;
      if (chunked && parts.size() == 3 &&
          (!parse_u32(parts[2], spec.chunk) || spec.chunk < 16 || spec.chunk > (1u << 20))) {
        return bad(text, "chunk must be an integer in [16, 1048576]");
      }
      continue;
    }
    if (have_quantizer) return bad(text, "only one quantizer");
    have_quantizer = true;
    if (name == "int8" || name == "int4" || name == "int3" || name == "sign" ||
        name == "ternary") {
      spec.quantizer = name == "int8"   ? Quantizer::kInt8
                       : name == "int4" ? Quantizer::kInt4
                       : name == "int3" ? Quantizer::kInt3
                       : name == "sign" ? Quantizer::kSign
                                        : Quantizer::kTernary;
      if (parts.size() > 2) return bad(text, std::string(name) + " takes one block size");
      // int formats: block 32 (fp32 scale); sign/ternary: 128 (bf16 scale, 1/8 bit a value).
      const bool int_format = name == "int8" || name == "int4" || name == "int3";
      uint32_t b = int_format ? 32 : 128;
      if (parts.size() == 2 && !parse_u32(parts[1], b)) return bad(text, "bad block size");
      if (b != 32 && b != 64 && b != 128 && b != 256) {
        return bad(text, "block size must be 32, 64, 128 or 256");
      }
      spec.block = static_cast<int>(b);
      continue;
    }
    if (parts.size() != 1) return bad(text, std::string(name) + " takes no parameter");
    if (name == "none" && stages.size() == 1) {
      spec.quantizer = Quantizer::kFp32;
    } else if (name == "fp32") {
      spec.quantizer = Quantizer::kFp32;
    } else if (name == "bf16") {
      spec.quantizer = Quantizer::kBf16;
    } else if (name == "fp16") {
      spec.quantizer = Quantizer::kFp16;
    } else if (name == "fp8") {
      spec.quantizer = Quantizer::kFp8;
    } else if (name == "mxfp8") {
      spec.quantizer = Quantizer::kMxfp8;
    } else if (name == "mxfp4") {
      spec.quantizer = Quantizer::kMxfp4;
    } else if (name == "nvfp4") {
      spec.quantizer = Quantizer::kNvfp4;
    } else {
      return bad(text, "unknown stage '" + std::string(name) + "'" +
                           (name == "zstd" ? " (zstd comes last)" : ""));
    }
  }
  return spec;
}

}  // namespace atl::algorithms::compress
