#include "cli/coordinator_setup.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "algorithms/compress/codec.h"
#include "algorithms/data/brown.h"
#include "coordinator/http/auth.h"
#include "kernels/core/file_io.h"
#include "kernels/core/sha256.h"
#include "kernels/cpu/ops.h"
#include "node/checkpoint.h"
#include "node/peft_export.h"
#include "node/site_data.h"
#include "transport/channel.h"
#include "transport/tls/ca.h"
#include "transport/tls/credentials.h"
#include "transport/tls/openssl_util.h"

namespace atl::cli {

std::vector<std::string> brown_genre_splits(int n) {
  std::string letters;
  for (const auto& g : algorithms::data::brown_genres()) letters += g.letter;
  std::vector<std::string> out;
  // More sites than genres (simulations): one genre each, in turn.
  if (static_cast<size_t>(n) > letters.size()) {
    for (int i = 0; i < n; ++i) out.push_back(std::string("brown:") + letters[i % letters.size()]);
    return out;
  }
  for (int i = 0; i < n; ++i) {
    size_t b = letters.size() * i / n, e = letters.size() * (i + 1) / n;
    std::string spec = "brown:";
    for (size_t j = b; j < e; ++j) {
      if (j > b) spec += ",";
      spec += letters[j];
    }
    out.push_back(spec);
  }
  return out;
}

void set_demo_model(coordinator::ExperimentConfig& cfg, const DemoModel& m) {
  cfg.model.vocab = 256;
  cfg.model.dim = static_cast<uint32_t>(m.dim);
  cfg.model.layers = static_cast<uint32_t>(m.layers);
  cfg.model.heads = static_cast<uint32_t>(m.heads);
  cfg.model.ffn_hidden = static_cast<uint32_t>(m.ffn);
  cfg.model.seq_len = static_cast<uint32_t>(m.seq);
  cfg.train.batch_size = static_cast<uint32_t>(m.batch);
  cfg.train.lr = m.lr;
  cfg.train.min_lr = m.lr / 10;
}

algorithms::ModelConfig model_config_of(const coordinator::ExperimentConfig& cfg) {
  return coordinator::model_config(cfg);
}

RunningCoordinator::~RunningCoordinator() {
  metrics_http.reset();
  http.reset();
  if (server) server->shutdown();
  server.reset();
  if (manager) manager->attach(nullptr);
  service.reset();
  manager.reset();
  metrics.reset();
  router.reset();
  store.reset();
  refusals.reset();
}

StatusOr<std::string> demo_run_dir(const std::optional<std::string>& store,
                                   const std::string& prefix) {
  if (store) {
    std::error_code ec;
    std::filesystem::create_directories(*store, ec);
    if (ec) return InvalidArgument("--store " + *store + ": cannot create it: " + ec.message());
    return *store;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data()))
    return IoError("cannot create a temp directory in " +
                   std::filesystem::temp_directory_path().string() + ": " + std::strerror(errno));
  return tmpl;
}

Status provision_dev_ca(const std::string& tls_dir, const std::vector<std::string>& servers,
                        const std::vector<std::string>& nodes) {
  if (std::filesystem::exists(transport::ca_cert_path(tls_dir))) return Status::Ok();
  ATOLL_RETURN_IF_ERROR(transport::ca_init(tls_dir));
  for (const auto& name : servers)
    ATOLL_RETURN_IF_ERROR(transport::ca_issue(tls_dir, name, transport::Role::kServer));
  for (const auto& name : nodes)
    ATOLL_RETURN_IF_ERROR(transport::ca_issue(tls_dir, name, transport::Role::kNode));
  return Status::Ok();
}

namespace {

// node_modules beside the pages' directory `web_root` (DIR/../node_modules).
std::filesystem::path node_modules_beside(const std::string& web_root) {
  std::filesystem::path pages = std::filesystem::path(web_root).lexically_normal();
  if (pages.filename().empty()) pages = pages.parent_path();  // "web/" names web
  return pages.parent_path() / "node_modules";
}

}  // namespace

std::string chart_library_path(const CoordinatorLaunch& l, const std::string& npm) {
  // Where a missing library is looked for: beside --web's pages when given (where it goes).
  std::filesystem::path library = npm + "/chart.js/dist/chart.umd.js";
  if (!std::filesystem::exists(library) && !l.web_root.empty() && l.node_modules.empty())
    library = node_modules_beside(l.web_root) / "chart.js" / "dist" / "chart.umd.js";
  return std::filesystem::absolute(library).lexically_normal().string();
}

std::string npm_packages_dir(const CoordinatorLaunch& l) {
  if (!l.node_modules.empty()) return l.node_modules;
  if (!l.web_root.empty()) {
    const auto beside = node_modules_beside(l.web_root);
    if (std::filesystem::is_directory(beside / "chart.js" / "dist")) return beside.string();
  }
  return find_tree_dir("node_modules");
}

std::string find_tree_dir(const std::string& relative) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(relative, ec)) return relative;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // build/atoll → build/../<relative>
    for (const fs::path& base : {exe.parent_path().parent_path(), exe.parent_path()}) {
      const fs::path p = base / relative;
      if (fs::is_directory(p, ec)) return p.string();
    }
  }
  return relative;
}

namespace {

// Options for a service of experiment `experiment_id` whose updates use `update_codec`; its events
// go to the manager and the metrics (and to `user`, when given).
coordinator::ServiceOptions service_options(const RunningCoordinator& rc, bool insecure,
                                            const std::string& experiment_id,
                                            const std::string& update_codec,
                                            std::function<void(const coordinator::Event&)> user) {
  coordinator::ServiceOptions so;
  so.identity = insecure ? coordinator::IdentitySource::kInsecureNodeName
                         : coordinator::IdentitySource::kTlsCertificate;
  so.revocations = rc.revocations;
  coordinator::ExperimentManager* manager = rc.manager.get();
  coordinator::CoordinatorMetrics* metrics = rc.metrics.get();
  so.metrics = metrics;
  so.on_event = [user = std::move(user), manager, metrics,
                 experiment_id](const coordinator::Event& e) {
    manager->on_event(experiment_id, e);
    if (metrics) metrics->observe(experiment_id, e);
    if (user) user(e);
  };
  const std::string expected_codec = update_codec;
  so.decode = [expected_codec](const std::string& codec, const std::string& payload,
                               uint64_t numel) -> StatusOr<std::vector<float>> {
    if (codec != expected_codec)
      return InvalidArgument("update encoded with codec '" + codec + "', the experiment uses '" +
                             expected_codec + "'");
    if (codec == "none") {
      if (payload.size() != numel * 4)
        return InvalidArgument("raw fp32 payload has " + std::to_string(payload.size()) +
                               " bytes, expected " + std::to_string(numel * 4));
      std::vector<float> v(numel);
      std::memcpy(v.data(), payload.data(), payload.size());
      return v;
    }
    // Split over the process's threads (--eval-threads); the values do not depend on it.
    return algorithms::compress::decode(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()),
        numel, kernels::cpu::num_threads());
  };
  return so;
}

// The revocation list of a TLS launch: --crl FILE (which must exist), else ca.crl in the TLS
// directory when there is one; its lines go to revocation_sink (stderr by default).
StatusOr<std::shared_ptr<transport::RevocationWatch>> open_revocations(const CoordinatorLaunch& l) {
  const std::string path = l.crl_file.empty() ? transport::crl_path(l.tls_dir) : l.crl_file;
  if (!l.crl_file.empty() && !std::filesystem::exists(path))
    return NotFound("--crl " + path +
                    " does not exist: give the ca.crl that `atoll ca revoke` wrote, or leave "
                    "--crl out (ca.crl in --tls is used when it is there)");
  ATOLL_ASSIGN_OR_RETURN(std::string ca_pem, read_file(transport::ca_cert_path(l.tls_dir)));
  std::function<void(const std::string&)> sink = l.revocation_sink;
  if (!sink) sink = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  ATOLL_ASSIGN_OR_RETURN(std::shared_ptr<transport::RevocationWatch> watch,
                         transport::RevocationWatch::open(path, ca_pem, sink));
  if (watch->number() > 0)
    sink(path + ": list number " + std::to_string(watch->number()) + " in force, " +
         std::to_string(watch->size()) + " certificate(s) revoked");
  return watch;
}

}  // namespace

StatusOr<InitialCheckpoint> initial_checkpoint(const std::string& path,
                                               const algorithms::ModelConfig& model) {
  auto loaded = node::load_checkpoint(path);
  auto ck = loaded.ok() ? node::merged_if_lora(std::move(loaded).value()) : loaded;
  if (!ck.ok()) return InvalidArgument("--init-from " + path + ": " + ck.status().message());
  // seq_len (RoPE has no learned positions) and the MoE loss weights do not change θ or what it
  // computes; every other field does.
  for (const auto& d : algorithms::model_differences(ck->meta.model, model)) {
    if (d.field == "seq_len" || d.field == "moe_aux_coef" || d.field == "moe_z_coef") continue;
    return InvalidArgument("--init-from " + path + ": the checkpoint's model has " + d.field +
                           " = " + d.a + ", the experiment's has " + d.b +
                           " (train the checkpoint with the experiment's model flags)");
  }
  if (static_cast<int64_t>(ck->params.numel()) != algorithms::count_params(model))
    return InvalidArgument("--init-from " + path + ": the checkpoint has " +
                           std::to_string(ck->params.numel()) + " parameters, the model " +
                           std::to_string(algorithms::count_params(model)));
  return InitialCheckpoint{std::move(ck->params.vec()), std::move(ck->meta)};
}

Status resolve_lora_base(coordinator::ExperimentConfig& config,
                         std::shared_ptr<const node::BaseModel>* loaded) {
  if (!config.is_lora()) return Status::Ok();
  auto base = node::load_base_model(config.lora.base, "lora.base");
  std::error_code ec;
  if (!base.ok() && std::filesystem::path(config.lora.base).is_relative() &&
      !std::filesystem::exists(config.lora.base, ec))
    return Status(base.status().code(), base.status().message() +
                                            " (a relative lora.base is read from the working "
                                            "directory, " +
                                            std::filesystem::current_path(ec).string() +
                                            ", not from the config file's folder)");
  if (!base.ok()) return base.status();
  if (!config.lora.base_fingerprint.empty() && config.lora.base_fingerprint != base->fingerprint)
    return FailedPrecondition("lora.base " + config.lora.base + " has sha256 " +
                              base->fingerprint.substr(0, 16) + "..., lora.base_fingerprint says " +
                              config.lora.base_fingerprint.substr(0, 16) +
                              "...: point lora.base at the base the experiment was created with");
  coordinator::set_model_section(config, base->model);
  config.lora.base_fingerprint = base->fingerprint;
  ATOLL_RETURN_IF_ERROR(
      algorithms::validate(coordinator::lora_config(config), coordinator::model_config(config)));
  if (loaded) *loaded = std::make_shared<const node::BaseModel>(std::move(*base));
  return Status::Ok();
}

namespace {

// A LoRA experiment's θ (its adapters) as a LoRA checkpoint: the base (read again from
// lora.base and checked against the fingerprint) with the adapters, which `atoll export peft`
// and `atoll export hf --merge-lora` read.
StatusOr<std::string> encode_lora_checkpoint(const coordinator::ExperimentConfig& cfg,
                                             node::CheckpointMeta meta,
                                             const std::vector<float>& adapters) {
  coordinator::ExperimentConfig resolved = cfg;
  std::shared_ptr<const node::BaseModel> base;
  ATOLL_RETURN_IF_ERROR(resolve_lora_base(resolved, &base));
  meta.lora = coordinator::lora_config(resolved);
  // The base's tokenizer, Hugging Face files and context; the experiment's seq_len is the window.
  node::carry_base_meta(base->meta, meta);
  algorithms::ParamSet a(coordinator::theta_layout(resolved));
  if (a.numel() != adapters.size())
    return FailedPrecondition("the store holds " + std::to_string(adapters.size()) +
                              " adapter values, the [lora] config describes " +
                              std::to_string(a.numel()));
  std::copy(adapters.begin(), adapters.end(), a.data());
  meta.fingerprint = base->fingerprint;
  return node::encode_checkpoint(meta, *base->params, nullptr, &a);
}

// A checkpoint's tokenizer as the sites must report it (DataProfile): name and SHA-256 of the blob.
StatusOr<coordinator::SiteTokenizer> site_tokenizer_of(const std::string& blob,
                                                       const std::string& source) {
  ATOLL_ASSIGN_OR_RETURN(auto tokenizer, node::tokenizer_from_blob(blob));
  return coordinator::SiteTokenizer{tokenizer->name(), sha256_hex(blob.data(), blob.size()),
                                    source};
}

// The listeners' connections and the bulk lane's transfers in the metrics, read at each scrape
// (~RunningCoordinator stops the scrapers before the listeners).
void watch_listeners(RunningCoordinator& rc) {
  if (const coordinator::CoordinatorServer* grpc = rc.server.get()) {
    rc.metrics->watch_port(
        "grpc", [grpc] { return grpc->open_connections(); },
        [grpc] { return grpc->refused_connections(); });
    if (const transport::BulkLaneServer* lane = grpc->bulk_lane()) {
      rc.metrics->watch_port(
          "bulk", [lane] { return lane->open_connections(); },
          [lane] { return lane->refused_connections(); });
      rc.metrics->watch_bulk_lane([lane] { return lane->pulls_sent(); },
                                  [lane] { return lane->pushes_received(); });
    }
  }
  if (const coordinator::http::HttpServer* dashboard = rc.http.get())
    rc.metrics->watch_port(
        "dashboard", [dashboard] { return dashboard->open_connections(); },
        [dashboard] { return dashboard->refused_connections(); },
        [dashboard] { return dashboard->evicted_connections(); });
}

}  // namespace

namespace {

// A port held by another process fails here, in one line naming it, before the store is created
// or opened.
Status check_ports(const CoordinatorLaunch& l) {
  if (!l.listen.empty()) ATOLL_RETURN_IF_ERROR(transport::check_can_listen(l.listen, "--listen"));
  if (!l.http_listen.empty() && !l.insecure)
    ATOLL_RETURN_IF_ERROR(transport::check_can_listen(l.http_listen, "--http"));
  if (!l.bulk_listen.empty() && !l.insecure)
    ATOLL_RETURN_IF_ERROR(transport::check_can_listen(l.bulk_listen, "--bulk-listen"));
  if (!l.metrics_listen.empty())
    ATOLL_RETURN_IF_ERROR(transport::check_can_listen(l.metrics_listen, "--metrics"));
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<RunningCoordinator>> launch_coordinator(const CoordinatorLaunch& l) {
  auto rc = std::make_unique<RunningCoordinator>();
  rc->store_dir = l.store_dir;
  rc->config = l.config;
  if (l.base && l.config.lora.base_fingerprint == l.base->fingerprint) {
    rc->base = l.base;
  } else {
    ATOLL_RETURN_IF_ERROR(resolve_lora_base(rc->config, &rc->base));
  }
  if (rc->config.is_lora()) {
    ATOLL_RETURN_IF_ERROR(coordinator::validate_experiment_config(rc->config, "config"));
    if (!l.initial_theta.empty())
      return InvalidArgument(
          "a LoRA experiment starts from fresh adapters over lora.base: drop --init-from");
  }
  const coordinator::ExperimentConfig& config = rc->config;
  rc->model = model_config_of(config);
  ATOLL_RETURN_IF_ERROR(algorithms::validate(rc->model));
  if (config.train.codec != "none") {
    // Refuse a bad codec spec before any node joins.
    auto c = algorithms::compress::Codec::create(config.train.codec);
    if (!c.ok()) return InvalidArgument("train.codec: " + c.status().message());
  }
  ATOLL_RETURN_IF_ERROR(check_ports(l));
  // Only a served coordinator has callers to refuse (in-process sites have no certificates).
  if (!l.insecure && !l.listen.empty()) {
    ATOLL_ASSIGN_OR_RETURN(rc->revocations, open_revocations(l));
  }
  std::error_code ec;
  std::filesystem::create_directories(l.store_dir, ec);
  if (ec) return IoError("cannot create store directory " + l.store_dir + ": " + ec.message());
  // θ versions kept = diloco.keep_params: the bases a pull may name for a delta.
  ATOLL_ASSIGN_OR_RETURN(
      rc->store, coordinator::Store::open(l.store_dir, {.keep_params = config.diloco.keep_params}));
  coordinator::ManagerOptions mo;
  mo.encode_checkpoint = [carried = l.initial_meta, started = l.config.name](
                             const coordinator::ExperimentRecord& rec,
                             const coordinator::ExperimentConfig& cfg,
                             const std::vector<float>& params) -> StatusOr<std::string> {
    const algorithms::ModelConfig model = model_config_of(cfg);
    node::CheckpointMeta meta;
    meta.model = model;
    meta.step = static_cast<int64_t>(rec.current_round) * cfg.diloco.inner_steps;
    meta.seed = cfg.seed;
    meta.experiment = rec.id;
    meta.round = static_cast<int64_t>(rec.current_round);
    if (cfg.is_lora()) return encode_lora_checkpoint(cfg, meta, params);
    algorithms::ParamSet p(algorithms::make_layout(model));
    if (p.numel() != params.size())
      return FailedPrecondition("experiment '" + rec.id + "': its config describes " +
                                std::to_string(p.numel()) + " parameters, the store holds " +
                                std::to_string(params.size()));
    std::copy(params.begin(), params.end(), p.data());
    if (carried && rec.id == started) node::carry_base_meta(*carried, meta);
    meta.fingerprint = rec.params_fingerprint;
    return node::encode_checkpoint(meta, p, nullptr);
  };
  mo.resolve_base = [](coordinator::ExperimentConfig& cfg) { return resolve_lora_base(cfg); };
  mo.serve_hint = "atoll coordinator --config FILE --store " + l.store_dir;
  rc->router = std::make_unique<coordinator::ServiceRouter>();
  mo.router = rc->router.get();
  // Starting a stored experiment from the dashboard: a service on the same store, resuming its
  // stored θ (the layout only describes the model; its values are not used). Events go to the
  // manager, and to `on_other_event` (`on_event` belongs to the launch config's experiment).
  mo.open_service = [rcp = rc.get(), insecure = l.insecure, on_other_event = l.on_other_event](
                        const coordinator::ExperimentRecord& rec,
                        const coordinator::ExperimentConfig& cfg)
      -> StatusOr<std::shared_ptr<coordinator::CoordinatorService>> {
    const algorithms::ModelConfig model = model_config_of(cfg);
    ATOLL_RETURN_IF_ERROR(algorithms::validate(model));
    algorithms::ParamSet layout(coordinator::theta_layout(cfg));
    ATOLL_ASSIGN_OR_RETURN(
        std::unique_ptr<coordinator::CoordinatorService> svc,
        coordinator::CoordinatorService::open(
            *rcp->store, cfg, layout,
            service_options(*rcp, insecure, rec.id, cfg.train.codec, on_other_event)));
    return std::shared_ptr<coordinator::CoordinatorService>(std::move(svc));
  };
  rc->manager = std::make_unique<coordinator::ExperimentManager>(*rc->store, std::move(mo));
  rc->metrics = std::make_unique<coordinator::CoordinatorMetrics>(rc->manager.get());

  algorithms::ParamSet theta0 = coordinator::initial_theta(config);
  if (!l.initial_theta.empty()) {
    if (l.initial_theta.size() != theta0.numel())
      return InvalidArgument("initial parameters have " + std::to_string(l.initial_theta.size()) +
                             " values, the model has " + std::to_string(theta0.numel()));
    theta0.vec() = l.initial_theta;
  }

  coordinator::ServiceOptions so =
      service_options(*rc, l.insecure, config.name, config.train.codec, l.on_event);
  // The checkpoint the experiment starts from fixes the sites' tokenizer.
  if (rc->base) {
    ATOLL_ASSIGN_OR_RETURN(so.tokenizer, site_tokenizer_of(rc->base->meta.tokenizer,
                                                           "the LoRA base " + config.lora.base));
  } else if (l.initial_meta) {
    ATOLL_ASSIGN_OR_RETURN(
        so.tokenizer, site_tokenizer_of(l.initial_meta->tokenizer, "the checkpoint θ_0 came from"));
  }
  ATOLL_ASSIGN_OR_RETURN(rc->service, coordinator::CoordinatorService::open(*rc->store, config,
                                                                            theta0, std::move(so)));

  rc->manager->attach(rc->service);
  if (!l.listen.empty()) {
    coordinator::ServerOptions srv;
    srv.listen = l.listen;
    srv.limits = l.grpc_limits;
    srv.refusal_log = l.refusal_sink ? l.refusal_sink : [](const std::string& line) {
      std::fprintf(stderr, "%s\n", line.c_str());
    };
    if (l.insecure) {
      srv.credentials = transport::insecure_server_credentials();
    } else {
      ATOLL_ASSIGN_OR_RETURN(srv.credentials,
                             transport::server_credentials(l.tls_dir, l.server_name));
      if (!l.bulk_listen.empty()) {
        srv.bulk_listen = l.bulk_listen;
        ATOLL_ASSIGN_OR_RETURN(srv.bulk_tls,
                               transport::server_identity(l.tls_dir, l.server_name));
      }
      rc->refusals = std::make_unique<transport::HandshakeRefusalLog>(l.refusal_sink);
    }
    ATOLL_ASSIGN_OR_RETURN(rc->server, coordinator::CoordinatorServer::start(*rc->router, srv));
    rc->manager->set_node_address(rc->server->address());
  }

  if (!l.http_listen.empty() && !l.insecure) {
    coordinator::http::HttpOptions ho;
    ho.listen = l.http_listen;
    ho.tls_dir = l.tls_dir;
    ho.cert_name = l.server_name;
    ho.limits = l.http_limits;
    const std::string web = l.web_root.empty() ? find_tree_dir("web") : l.web_root;
    rc->web_root = web;
    const std::string npm = npm_packages_dir(l);
    ho.mounts = {{"/", web}, {"/vendor/chartjs/", npm + "/chart.js/dist"}};
    rc->chart_library = chart_library_path(l, npm);
    ho.metrics = [m = rc->metrics.get()] { return m->render(); };
    ATOLL_ASSIGN_OR_RETURN(rc->http,
                           coordinator::http::HttpServer::start(*rc->manager, *rc->store, ho));
  }
  watch_listeners(*rc);
  if (!l.metrics_listen.empty()) {
    ATOLL_ASSIGN_OR_RETURN(rc->metrics_http,
                           transport::metrics::HttpExporter::start(
                               l.metrics_listen, [m = rc->metrics.get()] { return m->render(); }));
  }
  return rc;
}

Status write_final_checkpoint(const RunningCoordinator& rc, const std::string& id,
                              const std::string& path) {
  std::string filename;
  ATOLL_ASSIGN_OR_RETURN(const std::string bytes, rc.manager->checkpoint(id, &filename));
  if (Status s = write_file_atomic(path, bytes); !s.ok())
    return IoError("--out " + path + ": " + s.message());
  return Status::Ok();
}

Status announce_dashboard(RunningCoordinator& rc, const std::string& label, bool always,
                          const std::function<void(const std::string&)>& say) {
  if (!rc.http) return Status::Ok();
  std::string token;
  const bool demo = always;
  if (!always) {
    ATOLL_ASSIGN_OR_RETURN(std::vector<coordinator::TokenRecord> tokens, rc.store->list_tokens());
    always = tokens.empty();
  }
  std::string token_file;
  if (always) {
    ATOLL_ASSIGN_OR_RETURN(
        token, coordinator::http::create_token(*rc.store, coordinator::http::Role::kAdmin, label));
    // Owner-only, replacing what an earlier bootstrap of this store left.
    token_file = rc.store_dir + "/admin-token";
    std::error_code ec;
    std::filesystem::remove(token_file, ec);
    ATOLL_RETURN_IF_ERROR(transport::ossl::write_new_file(token_file, token + "\n", 0600));
  }
  auto line = [&say](const std::string& text) {
    if (say) {
      say(text);
    } else {
      std::printf("%s\n", text.c_str());
    }
  };
  line("dashboard: " + rc.http->url());
  if (token.empty()) return Status::Ok();
  line("token file: " + token_file + " (the admin token, mode 0600)");
  if (demo || ::isatty(STDOUT_FILENO)) line("token: " + token);
  return Status::Ok();
}

}  // namespace atl::cli
