#include "algorithms/model/safetensors.h"

#include <algorithm>
#include <bit>
#include <boost/json.hpp>
#include <cstring>
#include <set>
#include <string_view>

#include "algorithms/data/json_duplicates.h"
#include "kernels/core/check.h"

namespace atl::algorithms {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swapping");

namespace json = boost::json;

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kI64, "I64", 8},   {DType::kI32, "I32", 4},        {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},     {DType::kU64, "U64", 8},        {DType::kU32, "U32", 4},
    {DType::kU16, "U16", 2},   {DType::kU8, "U8", 1},          {DType::kBool, "BOOL", 1},
};

const DTypeInfo* dtype_by_name(std::string_view s) {
  for (const auto& d : kDTypes)
    if (s == d.name) return &d;
  return nullptr;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

// Names shown in error messages are cut short and stripped of control characters (they come
// from untrusted bytes).
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 120)) out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
  if (s.size() > 120) out += "...";
  return "\"" + out + "\"";
}

// A non-negative JSON integer, or false.
bool as_u64(const json::value& v, uint64_t* out) {
  if (v.is_uint64()) {
    *out = v.get_uint64();
    return true;
  }
  if (v.is_int64() && v.get_int64() >= 0) {
    *out = static_cast<uint64_t>(v.get_int64());
    return true;
  }
  return false;
}

Status bad(const std::string& msg) {
  return InvalidArgument("safetensors: " + msg);
}

struct Entry {
  std::string name;
  const DTypeInfo* dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

}  // namespace

const char* dtype_name(DType d) {
  for (const auto& x : kDTypes)
    if (x.dtype == d) return x.name;
  return "?";
}

size_t dtype_size(DType d) {
  for (const auto& x : kDTypes)
    if (x.dtype == d) return x.size;
  return 0;
}

size_t StTensor::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

namespace {
template <typename T>
std::vector<T> typed_copy(const StTensor& t, DType want) {
  ATOLL_CHECK(t.dtype == want && t.data.size() == t.numel() * sizeof(T),
              "tensor " + t.name + " is " + dtype_name(t.dtype) + ", read as " + dtype_name(want));
  std::vector<T> out(t.numel());
  if (!out.empty()) std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

template <typename T>
StTensor make_typed(std::string name, std::vector<int64_t> shape, const T* values, DType d) {
  StTensor t;
  t.name = std::move(name);
  t.dtype = d;
  t.shape = std::move(shape);
  t.data.resize(t.numel() * sizeof(T));
  if (!t.data.empty()) std::memcpy(t.data.data(), values, t.data.size());
  return t;
}
}  // namespace

std::vector<float> StTensor::to_f32() const {
  return typed_copy<float>(*this, DType::kF32);
}
std::vector<double> StTensor::to_f64() const {
  return typed_copy<double>(*this, DType::kF64);
}
std::vector<int32_t> StTensor::to_i32() const {
  return typed_copy<int32_t>(*this, DType::kI32);
}

StTensor make_tensor(std::string name, std::vector<int64_t> shape, const float* v) {
  return make_typed(std::move(name), std::move(shape), v, DType::kF32);
}
StTensor make_tensor(std::string name, std::vector<int64_t> shape, const double* v) {
  return make_typed(std::move(name), std::move(shape), v, DType::kF64);
}
StTensor make_tensor(std::string name, std::vector<int64_t> shape, const int32_t* v) {
  return make_typed(std::move(name), std::move(shape), v, DType::kI32);
}
StTensor make_tensor(std::string name, std::vector<int64_t> shape, const uint8_t* v) {
  return make_typed(std::move(name), std::move(shape), v, DType::kU8);
}

const StTensor* Safetensors::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// ---- encode -------------------------------------------------------------------------------------

StatusOr<std::vector<uint8_t>> encode_safetensors(const Safetensors& st) {
  json::object header;
  if (!st.metadata.empty()) {
    json::object meta;
    for (const auto& [k, v] : st.metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : st.tensors) {
    if (t.name.empty()) return bad("a tensor has an empty name");
    if (t.name == "__metadata__") return bad("\"__metadata__\" is reserved, not a tensor name");
    if (!names.insert(t.name).second) return bad("duplicate tensor name " + printable(t.name));
    if (dtype_size(t.dtype) == 0) return bad("tensor " + printable(t.name) + " has no dtype");
    for (int64_t d : t.shape)
      if (d < 0) return bad("tensor " + printable(t.name) + " has a negative dimension");
    if (t.data.size() != t.numel() * dtype_size(t.dtype))
      return bad("tensor " + printable(t.name) + " has " + std::to_string(t.data.size()) +
                 " bytes, but " + dtype_name(t.dtype) + " " + shape_str(t.shape) + " needs " +
                 std::to_string(t.numel() * dtype_size(t.dtype)));
    json::array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    json::object e;
    e["dtype"] = dtype_name(t.dtype);
    e["shape"] = std::move(shape);
    e["data_offsets"] = json::array{offset, offset + t.data.size()};
    header[t.name] = std::move(e);
    offset += t.data.size();
  }
  std::string h = json::serialize(header);
  h.append((8 - h.size() % 8) % 8, ' ');  // data section 8-byte aligned
  std::vector<uint8_t> out(8 + h.size() + offset);
  const uint64_t hn = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(hn >> (8 * i));
  std::memcpy(out.data() + 8, h.data(), h.size());
  uint8_t* p = out.data() + 8 + h.size();
  for (const auto& t : st.tensors) {
    if (!t.data.empty()) std::memcpy(p, t.data.data(), t.data.size());
    p += t.data.size();
  }
  return out;
}

// ---- decode -------------------------------------------------------------------------------------

StatusOr<Safetensors> decode_safetensors(const uint8_t* bytes, size_t n,
                                         const SafetensorsLimits& limits) {
  if (n < 8)
    return bad("truncated: " + std::to_string(n) + " bytes, fewer than the 8-byte header length");
  uint64_t hn = 0;
  for (int i = 0; i < 8; ++i) hn |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (hn > limits.max_header_bytes)
    return bad("header length " + std::to_string(hn) + " exceeds the limit of " +
               std::to_string(limits.max_header_bytes) + " bytes (corrupt or not safetensors)");
  if (hn > n - 8)
    return bad("truncated: header length " + std::to_string(hn) + " but only " +
               std::to_string(n - 8) + " bytes follow");
  const std::string_view text(reinterpret_cast<const char*>(bytes + 8), hn);
  const uint8_t* data = bytes + 8 + hn;
  const uint64_t data_size = n - 8 - hn;

  // Pass 1: duplicate keys (a second tensor of the same name would hide the first).
  if (const std::string duplicate = first_duplicate_key(text); !duplicate.empty())
    return bad("duplicate key " + printable(duplicate) + " in the header");
  // Pass 2: the value tree.
  json::error_code ec;
  json::value root = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec) return bad("header is not valid JSON: " + ec.message());
  if (!root.is_object()) return bad("header is not a JSON object");
  const json::object& obj = root.get_object();
  if (obj.size() > limits.max_tensors + 1)
    return bad("header lists " + std::to_string(obj.size()) + " entries, more than the limit of " +
               std::to_string(limits.max_tensors));

  Safetensors out;
  std::vector<Entry> entries;
  entries.reserve(obj.size());
  for (const auto& kv : obj) {
    const std::string name(kv.key().data(), kv.key().size());
    const json::value& v = kv.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("\"__metadata__\" is not an object of strings");
      for (const auto& m : v.get_object()) {
        if (!m.value().is_string())
          return bad("metadata value for " + printable(m.key()) + " is not a string");
        out.metadata[std::string(m.key())] = std::string(m.value().get_string());
      }
      continue;
    }
    const std::string who = "tensor " + printable(name);
    if (name.empty()) return bad("a tensor has an empty name");
    if (!v.is_object()) return bad(who + ": entry is not an object");
    const json::object& e = v.get_object();
    for (const auto& f : e)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        return bad(who + ": unknown field " + printable(f.key()));
    const json::value* dt = e.if_contains("dtype");
    const json::value* sh = e.if_contains("shape");
    const json::value* off = e.if_contains("data_offsets");
    if (!dt || !sh || !off) return bad(who + ": needs dtype, shape and data_offsets");
    if (!dt->is_string()) return bad(who + ": dtype is not a string");
    Entry en;
    en.name = name;
    en.dtype = dtype_by_name(std::string_view(dt->get_string().data(), dt->get_string().size()));
    if (!en.dtype) return bad(who + ": unknown dtype " + printable(dt->get_string()));
    if (!sh->is_array()) return bad(who + ": shape is not an array");
    if (sh->get_array().size() > limits.max_rank)
      return bad(who + ": rank " + std::to_string(sh->get_array().size()) + " exceeds " +
                 std::to_string(limits.max_rank));
    // numel · size must fit in the data section, so bound the product as it grows.
    unsigned __int128 bytes_needed = en.dtype->size;
    for (const auto& d : sh->get_array()) {
      uint64_t x;
      if (!as_u64(d, &x) || x > static_cast<uint64_t>(INT64_MAX))
        return bad(who + ": shape has an entry that is not a non-negative integer");
      en.shape.push_back(static_cast<int64_t>(x));
      bytes_needed *= x;
      if (bytes_needed > data_size) bytes_needed = static_cast<unsigned __int128>(data_size) + 1;
    }
    if (!off->is_array() || off->get_array().size() != 2 ||
        !as_u64(off->get_array()[0], &en.begin) || !as_u64(off->get_array()[1], &en.end))
      return bad(who + ": data_offsets is not a pair of non-negative integers");
    if (en.begin > en.end)
      return bad(who + ": data_offsets [" + std::to_string(en.begin) + ", " +
                 std::to_string(en.end) + "] run backwards");
    if (en.end > data_size)
      return bad(who + ": data_offsets end " + std::to_string(en.end) + " is past the " +
                 std::to_string(data_size) + "-byte data section (truncated?)");
    if (bytes_needed != en.end - en.begin)
      return bad(who + ": " + en.dtype->name + " " + shape_str(en.shape) + " does not match its " +
                 std::to_string(en.end - en.begin) + " bytes of data");
    entries.push_back(std::move(en));
  }
  // The data section must be exactly the tensors back to back: no overlap, no gap, no tail.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  for (const auto& en : entries) {
    if (en.begin < expect)
      return bad("tensor " + printable(en.name) + " overlaps the previous tensor's data");
    if (en.begin > expect)
      return bad("gap in the data section before tensor " + printable(en.name));
    expect = en.end;
  }
  if (expect != data_size)
    return bad("data section has " + std::to_string(data_size) + " bytes but the tensors cover " +
               std::to_string(expect));

  out.tensors.reserve(entries.size());
  for (auto& en : entries) {
    StTensor t;
    t.name = std::move(en.name);
    t.dtype = en.dtype->dtype;
    t.shape = std::move(en.shape);
    t.data.assign(data + en.begin, data + en.end);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

// ---- ParamSet helpers ---------------------------------------------------------------------------

void append_params(Safetensors& st, const ParamSet& params, const std::string& prefix) {
  for (const auto& v : params.layout().views())
    st.tensors.push_back(make_tensor(prefix + v.name, v.shape, params.data() + v.offset));
}

Status read_params(const Safetensors& st, ParamSet& params, const std::string& prefix,
                   bool strict) {
  std::map<std::string_view, const StTensor*> by_name;
  for (const auto& t : st.tensors) by_name[t.name] = &t;
  for (const auto& v : params.layout().views()) {
    const std::string name = prefix + v.name;
    auto it = by_name.find(name);
    if (it == by_name.end()) return InvalidArgument("checkpoint has no tensor " + name);
    const StTensor& t = *it->second;
    if (t.dtype != DType::kF32)
      return InvalidArgument("tensor " + name + " is " + dtype_name(t.dtype) + ", expected F32");
    if (t.shape != v.shape)
      return InvalidArgument("tensor " + name + " has shape " + shape_str(t.shape) +
                             " in the checkpoint but " + shape_str(v.shape) + " in the model");
  }
  if (strict) {
    for (const auto& t : st.tensors) {
      if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
      if (!params.layout().find(t.name.substr(prefix.size())))
        return InvalidArgument("checkpoint has tensor " + printable(t.name) +
                               ", which this model does not have (different model config?)");
    }
  }
  // Copy only once everything matched, so a failed load leaves params untouched.
  for (const auto& v : params.layout().views()) {
    const StTensor& t = *by_name.at(prefix + v.name);
    std::memcpy(params.data() + v.offset, t.data.data(), t.data.size());
  }
  return Status::Ok();
}

}  // namespace atl::algorithms
