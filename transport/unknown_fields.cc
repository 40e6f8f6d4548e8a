#include "transport/unknown_fields.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>

#include <vector>

namespace atl::transport {

namespace {

constexpr size_t kMaxListed = 8;

void collect(const google::protobuf::Message& m, const std::string& prefix,
             std::vector<std::string>& out, size_t& total) {
  const google::protobuf::Reflection* r = m.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = r->GetUnknownFields(m);
  for (int i = 0; i < unknown.field_count(); ++i) {
    ++total;
    if (out.size() < kMaxListed) out.push_back(prefix + std::to_string(unknown.field(i).number()));
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(m, &fields);  // the fields that are set, in field-number order
  for (const auto* f : fields) {
    // proto3 keeps an enum value it does not know in the field itself, not among unknown fields.
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_ENUM) {
      const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
      for (int i = 0; i < n; ++i) {
        const int v = f->is_repeated() ? r->GetRepeatedEnumValue(m, f, i) : r->GetEnumValue(m, f);
        if (f->enum_type()->FindValueByNumber(v) != nullptr) continue;
        ++total;
        if (out.size() >= kMaxListed) continue;
        std::string path = prefix;
        path += f->name();
        if (f->is_repeated()) {
          path += '[';
          path += std::to_string(i);
          path += ']';
        }
        path += " = ";
        path += std::to_string(v);
        out.push_back(std::move(path));
      }
      continue;
    }
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(m, f); ++i)
        collect(r->GetRepeatedMessage(m, f, i), prefix + f->name() + "[" + std::to_string(i) + "].",
                out, total);
    } else {
      collect(r->GetMessage(m, f), prefix + f->name() + ".", out, total);
    }
  }
}

}  // namespace

std::string unknown_field_paths(const google::protobuf::Message& m) {
  std::vector<std::string> paths;
  size_t total = 0;
  collect(m, "", paths, total);
  std::string out;
  for (const auto& p : paths) out += (out.empty() ? "" : ", ") + p;
  if (total > paths.size()) out += ", ...";
  return out;
}

Status refuse_unknown_fields(const google::protobuf::Message& m, std::string_view what,
                             std::string_view sender) {
  const std::string paths = unknown_field_paths(m);
  if (paths.empty()) return Status::Ok();
  return FailedPrecondition(std::string(what) + " carries settings this atoll does not know (" +
                            (paths.find(',') == std::string::npos ? "field " : "fields ") + paths +
                            "): " + std::string(sender) +
                            " runs a newer atoll; install the same version here");
}

}  // namespace atl::transport
