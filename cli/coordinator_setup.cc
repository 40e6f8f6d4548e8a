#include "cli/coordinator_setup.h"

#include <cstring>
#include <filesystem>

#include "algorithms/compress/codec.h"
#include "transport/tls/credentials.h"

namespace atl::cli {

algorithms::ModelConfig model_config_of(const coordinator::ExperimentConfig& cfg) {
  algorithms::ModelConfig m;
  m.vocab = static_cast<int>(cfg.model.vocab);
  m.dim = static_cast<int>(cfg.model.dim);
  m.layers = static_cast<int>(cfg.model.layers);
  m.heads = static_cast<int>(cfg.model.heads);
  m.ffn_hidden = static_cast<int>(cfg.model.ffn_hidden);
  m.seq_len = static_cast<int>(cfg.model.seq_len);
  m.rope_base = cfg.model.rope_base;
  m.norm_eps = cfg.model.norm_eps;
  return m;
}

RunningCoordinator::~RunningCoordinator() {
  if (server) server->shutdown();
  server.reset();
  service.reset();
  store.reset();
}

StatusOr<std::unique_ptr<RunningCoordinator>> launch_coordinator(const CoordinatorLaunch& l) {
  auto rc = std::make_unique<RunningCoordinator>();
  rc->model = model_config_of(l.config);
  ATOLL_RETURN_IF_ERROR(algorithms::validate(rc->model));
  if (l.config.train.codec != "none") {
    // Refuse a bad codec spec before any node joins.
    auto c = algorithms::compress::Codec::create(l.config.train.codec);
    if (!c.ok()) return InvalidArgument("train.codec: " + c.status().message());
  }
  std::error_code ec;
  std::filesystem::create_directories(l.store_dir, ec);
  if (ec) return IoError("cannot create store directory " + l.store_dir + ": " + ec.message());
  // θ versions kept = diloco.keep_params: the bases a pull may name for a delta.
  ATOLL_ASSIGN_OR_RETURN(rc->store, coordinator::Store::open(
                                        l.store_dir, {.keep_params = l.config.diloco.keep_params}));

  algorithms::ParamSet theta0(algorithms::make_layout(rc->model));
  algorithms::init_params(theta0, rc->model, l.config.seed);

  coordinator::ServiceOptions so;
  so.identity = l.insecure ? coordinator::IdentitySource::kInsecureNodeName
                           : coordinator::IdentitySource::kTlsCertificate;
  so.on_event = l.on_event;
  const std::string expected_codec = l.config.train.codec;
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
    return algorithms::compress::decode(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()),
        numel);
  };
  ATOLL_ASSIGN_OR_RETURN(rc->service,
                         coordinator::CoordinatorService::open(*rc->store, l.config, theta0, so));

  coordinator::ServerOptions srv;
  srv.listen = l.listen;
  if (l.insecure) {
    srv.credentials = transport::insecure_server_credentials();
  } else {
    ATOLL_ASSIGN_OR_RETURN(srv.credentials,
                           transport::server_credentials(l.tls_dir, l.server_name));
  }
  ATOLL_ASSIGN_OR_RETURN(rc->server, coordinator::CoordinatorServer::start(*rc->service, srv));
  return rc;
}

}  // namespace atl::cli
