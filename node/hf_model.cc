#include "node/hf_model.h"

#include <filesystem>
#include <system_error>
#include <vector>

#include "algorithms/model/hf_format.h"
#include "kernels/core/file_io.h"
#include "node/site_data.h"

namespace atl::node {

namespace fs = std::filesystem;
using algorithms::Safetensors;

namespace {

constexpr uint64_t kMaxJsonBytes = 1ULL << 30;    // config and tokenizer files
constexpr uint64_t kMaxWeightBytes = 1ULL << 40;  // one safetensors file

StatusOr<std::string> read_in(const fs::path& dir, const std::string& name, uint64_t max) {
  const fs::path p = dir / name;
  std::error_code ec;
  if (!fs::exists(p, ec)) return NotFound(p.string() + " is missing");
  return read_file_bounded(p.string(), max);
}

StatusOr<Safetensors> read_weights(const fs::path& dir, const std::string& name) {
  ATOLL_ASSIGN_OR_RETURN(std::string bytes, read_in(dir, name, kMaxWeightBytes));
  auto st =
      algorithms::decode_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!st.ok()) return InvalidArgument((dir / name).string() + ": " + st.status().message());
  return std::move(*st);
}

}  // namespace

StatusOr<HfImported> import_hf_dir(const std::string& dir_text, int seq_len) {
  const fs::path dir(dir_text);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return NotFound(dir_text +
                    " is not a directory (give a Hugging Face model directory with "
                    "config.json and model.safetensors)");
  ATOLL_ASSIGN_OR_RETURN(std::string config, read_in(dir, "config.json", kMaxJsonBytes));
  auto info = algorithms::parse_hf_config(config, seq_len);
  if (!info.ok())
    return InvalidArgument((dir / "config.json").string() + ": " + info.status().message());

  std::vector<Safetensors> shards;
  if (fs::exists(dir / "model.safetensors", ec)) {
    ATOLL_ASSIGN_OR_RETURN(Safetensors st, read_weights(dir, "model.safetensors"));
    shards.push_back(std::move(st));
  } else if (fs::exists(dir / "model.safetensors.index.json", ec)) {
    ATOLL_ASSIGN_OR_RETURN(std::string index,
                           read_in(dir, "model.safetensors.index.json", kMaxJsonBytes));
    auto files = algorithms::parse_hf_index(index);
    if (!files.ok())
      return InvalidArgument((dir / "model.safetensors.index.json").string() + ": " +
                             files.status().message());
    for (const std::string& f : *files) {
      ATOLL_ASSIGN_OR_RETURN(Safetensors st, read_weights(dir, f));
      shards.push_back(std::move(st));
    }
  } else {
    return NotFound(dir_text +
                    " has neither model.safetensors nor model.safetensors.index.json "
                    "(PyTorch .bin weights are not read; save with safetensors)");
  }
  std::vector<const Safetensors*> views;
  for (const Safetensors& s : shards) views.push_back(&s);

  HfImported out;
  out.meta.model = info->model;
  out.params = algorithms::ParamSet(algorithms::make_layout(info->model));
  if (Status s = algorithms::params_from_hf(views, info->model, out.params); !s.ok())
    return InvalidArgument(dir_text + ": " + s.message());

  auto tok = read_in(dir, "tokenizer.json", kMaxJsonBytes);
  if (!tok.ok())
    return NotFound(dir_text +
                    " has no tokenizer.json; the checkpoint must carry the model's "
                    "tokenizer (save it with tokenizer.save_pretrained)");
  out.meta.tokenizer = std::move(*tok);
  if (fs::exists(dir / "tokenizer_config.json", ec)) {
    ATOLL_ASSIGN_OR_RETURN(out.meta.hf_tokenizer_config_json,
                           read_in(dir, "tokenizer_config.json", kMaxJsonBytes));
  }
  out.meta.extra["hf.architecture"] = info->architecture;
  out.meta.extra["hf.config"] = config;
  return out;
}

Status export_hf_dir(const LoadedCheckpoint& ck, const std::string& dir_text,
                     algorithms::DType dtype) {
  const fs::path dir(dir_text);
  const auto& extra = ck.meta.extra;
  const auto arch = extra.find("hf.architecture");
  const auto base = extra.find("hf.config");
  ATOLL_ASSIGN_OR_RETURN(
      std::string config,
      algorithms::hf_config_json(ck.meta.model, arch == extra.end() ? "" : arch->second,
                                 base == extra.end() ? "" : base->second,
                                 dtype == algorithms::DType::kBF16 ? "bfloat16" : "float32"));
  ATOLL_ASSIGN_OR_RETURN(Safetensors st, algorithms::params_to_hf(ck.params, ck.meta.model, dtype));
  ATOLL_ASSIGN_OR_RETURN(std::vector<uint8_t> weights, algorithms::encode_safetensors(st));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create " + dir_text + ": " + ec.message());
  auto write = [&dir](const std::string& name, std::string_view bytes) {
    return write_file_atomic((dir / name).string(), bytes);
  };
  ATOLL_RETURN_IF_ERROR(write("config.json", config));
  ATOLL_RETURN_IF_ERROR(
      write("model.safetensors",
            std::string_view(reinterpret_cast<const char*>(weights.data()), weights.size())));
  if (is_hf_tokenizer_json(ck.meta.tokenizer))
    ATOLL_RETURN_IF_ERROR(write("tokenizer.json", ck.meta.tokenizer));
  if (!ck.meta.hf_tokenizer_config_json.empty())
    ATOLL_RETURN_IF_ERROR(write("tokenizer_config.json", ck.meta.hf_tokenizer_config_json));
  return Status::Ok();
}

}  // namespace atl::node
