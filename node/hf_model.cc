#include "node/hf_model.h"

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <iterator>
#include <system_error>
#include <vector>

#include "algorithms/data/hf_tokenizer.h"
#include "algorithms/model/hf_format.h"
#include "kernels/core/file_io.h"
#include "node/site_data.h"

namespace atl::node {

namespace fs = std::filesystem;
using algorithms::Safetensors;

namespace {

constexpr uint64_t kMaxJsonBytes = 1ULL << 30;    // config and tokenizer files
constexpr uint64_t kMaxWeightBytes = 1ULL << 40;  // one safetensors file

// Reads dir/name and records it in `files` (the import's sources).
StatusOr<std::string> read_in(const fs::path& dir, const std::string& name, uint64_t max,
                              std::vector<std::string>& files) {
  const fs::path p = dir / name;
  std::error_code ec;
  if (!fs::exists(p, ec)) return NotFound(p.string() + " is missing");
  files.push_back(p.string());
  return read_file_bounded(p.string(), max);
}

StatusOr<Safetensors> read_weights(const fs::path& dir, const std::string& name,
                                   std::vector<std::string>& files) {
  ATOLL_ASSIGN_OR_RETURN(std::string bytes, read_in(dir, name, kMaxWeightBytes, files));
  auto st =
      algorithms::decode_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!st.ok()) return InvalidArgument((dir / name).string() + ": " + st.status().message());
  return std::move(*st);
}

// The files an export writes; a folder holding only these is a previous export.
constexpr const char* kExportFiles[] = {"config.json", "model.safetensors", "tokenizer.json",
                                        "tokenizer_config.json", "generation_config.json"};

// A PEFT adapter folder (adapter_config.json, no config.json) given where the base model's folder
// belongs: one line saying so, naming the base the adapter_config.json records when it does.
Status peft_folder_given(const fs::path& dir) {
  std::string base;
  std::vector<std::string> unused;
  if (auto text = read_in(dir, "adapter_config.json", kMaxJsonBytes, unused); text.ok()) {
    boost::json::error_code ec;
    const boost::json::value v = boost::json::parse(*text, ec);
    const boost::json::value* name =
        !ec && v.is_object() ? v.as_object().if_contains("base_model_name_or_path") : nullptr;
    if (name && name->is_string() && !name->as_string().empty())
      base = " (" + boost::json::serialize(*name) + ")";
  }
  return InvalidArgument(
      dir.string() +
      " is a PEFT adapter folder (adapter_config.json, no config.json): atoll import hf takes the "
      "base model's folder" +
      base +
      "; Atoll trains its own LoRA adapters over the imported base (atoll train --base CKPT "
      "--lora-rank R, docs/federated-finetuning.md), or merge these into the base with PEFT's "
      "merge_and_unload() and import the merged folder");
}

// The export folder: new, empty, or a previous export (whose files are replaced). Anything else
// (another model's shards and index, say) would sit beside the export and be read with it.
Status check_export_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::Ok();
  if (!fs::is_directory(dir, ec)) return InvalidArgument(dir.string() + " is not a directory");
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (std::find(std::begin(kExportFiles), std::end(kExportFiles), name) != std::end(kExportFiles))
      continue;
    return InvalidArgument(dir.string() + " holds " + name +
                           ", which an export does not write: export into a new or empty folder "
                           "(or a previous export's)");
  }
  if (ec) return IoError("cannot list " + dir.string() + ": " + ec.message());
  return Status::Ok();
}

// An optional file the checkpoint carries verbatim into exports (tokenizer_config.json,
// generation_config.json): "" when absent; refused when transformers could not read it (not one
// JSON object) or it has a key twice, since every export would pass it on.
StatusOr<std::string> read_carried_json(const fs::path& dir, const std::string& name,
                                        std::vector<std::string>& files) {
  std::error_code ec;
  if (!fs::exists(dir / name, ec)) return std::string();
  ATOLL_ASSIGN_OR_RETURN(std::string text, read_in(dir, name, kMaxJsonBytes, files));
  if (Status s = algorithms::check_hf_json_object(text, (dir / name).string()); !s.ok())
    return InvalidArgument(s.message() + " (fix it, or remove it to import without it)");
  return text;
}

}  // namespace

StatusOr<HfImported> import_hf_dir(const std::string& dir_text, int seq_len) {
  const fs::path dir(dir_text);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return NotFound(dir_text +
                    " is not a directory (give a Hugging Face model directory with "
                    "config.json and model.safetensors)");
  HfImported out;
  if (!fs::exists(dir / "config.json", ec) && fs::exists(dir / "adapter_config.json", ec))
    return peft_folder_given(dir);
  ATOLL_ASSIGN_OR_RETURN(std::string config, read_in(dir, "config.json", kMaxJsonBytes, out.files));
  auto info = algorithms::parse_hf_config(config, seq_len);
  if (!info.ok())
    return InvalidArgument((dir / "config.json").string() + ": " + info.status().message());

  std::vector<Safetensors> shards;
  if (fs::exists(dir / "model.safetensors", ec)) {
    ATOLL_ASSIGN_OR_RETURN(Safetensors st, read_weights(dir, "model.safetensors", out.files));
    shards.push_back(std::move(st));
  } else if (fs::exists(dir / "model.safetensors.index.json", ec)) {
    ATOLL_ASSIGN_OR_RETURN(std::string index,
                           read_in(dir, "model.safetensors.index.json", kMaxJsonBytes, out.files));
    const std::string index_path = (dir / "model.safetensors.index.json").string();
    auto map = algorithms::parse_hf_index(index);
    if (!map.ok()) return InvalidArgument(index_path + ": " + map.status().message());
    for (const std::string& f : map->files) {
      ATOLL_ASSIGN_OR_RETURN(Safetensors st, read_weights(dir, f, out.files));
      shards.push_back(std::move(st));
    }
    if (Status s = algorithms::check_hf_index(*map, shards); !s.ok())
      return InvalidArgument(index_path + ": " + s.message());
  } else {
    return NotFound(dir_text +
                    " has neither model.safetensors nor model.safetensors.index.json "
                    "(PyTorch .bin weights are not read; save with safetensors)");
  }
  std::vector<const Safetensors*> views;
  for (const Safetensors& s : shards) views.push_back(&s);

  out.meta.model = info->model;
  out.params = algorithms::ParamSet(algorithms::make_layout(info->model));
  if (Status s = algorithms::params_from_hf(views, info->model, out.params); !s.ok())
    return InvalidArgument(dir_text + ": " + s.message());

  auto tok = read_in(dir, "tokenizer.json", kMaxJsonBytes, out.files);
  if (!tok.ok())
    return NotFound(dir_text +
                    " has no tokenizer.json; the checkpoint must carry the model's "
                    "tokenizer (save it with tokenizer.save_pretrained)");
  // Loaded now by the loader train, eval, generate and every site use, so a tokenizer they
  // cannot read is refused here rather than at the first run.
  auto loaded = algorithms::data::load_hf_tokenizer(*tok);
  if (!loaded.ok()) return InvalidArgument(dir_text + ": " + loaded.status().message());
  if ((*loaded)->vocab_size() > out.meta.model.vocab)
    return InvalidArgument(
        (dir / "tokenizer.json").string() + " has ids up to " +
        std::to_string((*loaded)->vocab_size() - 1) + ", beyond config.json's vocab_size " +
        std::to_string(out.meta.model.vocab) + ": the tokenizer does not belong to this model");
  out.meta.tokenizer = std::move(*tok);
  ATOLL_ASSIGN_OR_RETURN(out.meta.hf_tokenizer_config_json,
                         read_carried_json(dir, "tokenizer_config.json", out.files));
  ATOLL_ASSIGN_OR_RETURN(std::string generation_config,
                         read_carried_json(dir, "generation_config.json", out.files));
  if (!generation_config.empty()) out.meta.extra["hf.generation_config"] = generation_config;
  out.meta.extra["hf.architecture"] = info->architecture;
  out.meta.extra["hf.config"] = config;
  return out;
}

std::string hf_tokenizer_json_of(const std::string& tokenizer_blob, int64_t vocab) {
  if (tokenizer_blob.empty()) return vocab >= 256 ? algorithms::data::byte_tokenizer_json() : "";
  return is_hf_tokenizer_json(tokenizer_blob) ? tokenizer_blob : "";
}

Status export_hf_dir(const LoadedCheckpoint& ck, const std::string& dir_text,
                     algorithms::DType dtype, std::vector<std::string>* written) {
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
  ATOLL_RETURN_IF_ERROR(check_export_dir(dir));
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
  // A previous export's tokenizer or generation file that this checkpoint does not have is
  // removed: it would otherwise be read as this model's.
  auto write_or_remove = [&](const char* name, const std::string& text, bool have) -> Status {
    if (have) return write(name, text);
    std::error_code rm;
    fs::remove(dir / name, rm);
    if (rm)
      return IoError("cannot remove the stale " + (dir / name).string() + ": " + rm.message());
    return Status::Ok();
  };
  const auto generation = extra.find("hf.generation_config");
  const std::pair<const char*, std::string> optional_files[] = {
      // Token ids without their tokenizer: there is none to write (a byte tokenizer would say
      // the ids are bytes).
      {"tokenizer.json", ck.meta.token_ids_only
                             ? std::string()
                             : hf_tokenizer_json_of(ck.meta.tokenizer, ck.meta.model.vocab)},
      {"tokenizer_config.json", ck.meta.hf_tokenizer_config_json},
      {"generation_config.json", generation == extra.end() ? "" : generation->second}};
  if (written) *written = {"config.json", "model.safetensors"};
  for (const auto& [name, text] : optional_files) {
    ATOLL_RETURN_IF_ERROR(write_or_remove(name, text, !text.empty()));
    if (written && !text.empty()) written->push_back(name);
  }
  return Status::Ok();
}

}  // namespace atl::node
