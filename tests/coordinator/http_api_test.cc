// The dashboard's REST API over real HTTPS (TLS 1.3, a certificate from a fresh dev CA) with a
// real RocksDB store: a Boost.Beast client checks authentication, roles, bounds, bad input,
// unknown ids, path traversal and the create/list/get/stop/delete cycle.
#include <gtest/gtest.h>
#include <zlib.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "coordinator/experiment_manager.h"
#include "coordinator/http/auth.h"
#include "coordinator/http/server.h"
#include "coordinator/router.h"
#include "coordinator/server.h"
#include "coordinator/service.h"
#include "coordinator/service_harness.h"
#include "coordinator/test_util.h"
#include "transport/tls/ca.h"

namespace atl::coordinator {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
namespace json = boost::json;
using tcp = net::ip::tcp;

struct Reply {
  unsigned status = 0;
  std::string body;
  std::string content_type;
  std::map<std::string, std::string> headers;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  json::value json() const {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    return ec ? json::value() : v;
  }
  std::string error() const {
    auto v = json();
    if (!v.is_object() || !v.as_object().contains("error")) return "";
    return std::string(v.as_object().at("error").as_string());
  }
};

// One request per TLS connection, verifying the server certificate against the test CA and the
// name "coordinator".
class Client {
 public:
  Client(const std::string& ca_file, int port) : ctx_(ssl::context::tls_client), port_(port) {
    ctx_.load_verify_file(ca_file);
    ctx_.set_verify_mode(ssl::verify_peer);
  }

  Reply send(const std::string& method, const std::string& target, const std::string& token = "",
             const std::string& body = "", bool raw_target = false,
             const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    net::io_context ioc;
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx_);
    stream.set_verify_callback(ssl::host_name_verification("coordinator"));
    beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(20));
    beast::get_lowest_layer(stream).connect(
        tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)));
    stream.handshake(ssl::stream_base::client);
    bhttp::request<bhttp::string_body> req;
    req.method_string(method);
    req.target(target);
    (void)raw_target;
    req.version(11);
    req.set(bhttp::field::host, "coordinator");
    if (!token.empty()) req.set(bhttp::field::authorization, "Bearer " + token);
    for (const auto& [k, v] : headers) req.set(k, v);
    if (!body.empty() || method == "POST") {
      req.set(bhttp::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    bhttp::write(stream, req);
    beast::flat_buffer buf;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(64u << 20);
    parser.skip(method == "HEAD");  // headers only: its Content-Length is the GET body's
    bhttp::read(stream, buf, parser);
    Reply r;
    r.status = parser.get().result_int();
    r.body = parser.get().body();
    r.content_type = std::string(parser.get()[bhttp::field::content_type]);
    for (const auto& f : parser.get())
      r.headers[std::string(f.name_string())] = std::string(f.value());
    beast::error_code ec;
    stream.shutdown(ec);
    return r;
  }

 private:
  ssl::context ctx_;
  int port_;
};

// An event stream (GET /api/events) read as raw text: what arrives until a marker, a deadline or
// the server closing the connection.
class EventStream {
 public:
  EventStream(const std::string& ca_file, int port) : ctx_(ssl::context::tls_client), port_(port) {
    ctx_.load_verify_file(ca_file);
    ctx_.set_verify_mode(ssl::verify_peer);
    stream_ = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc_, ctx_);
  }

  void open(const std::string& target, const std::string& token) {
    stream_->set_verify_callback(ssl::host_name_verification("coordinator"));
    beast::get_lowest_layer(*stream_).connect(
        tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)));
    stream_->handshake(ssl::stream_base::client);
    bhttp::request<bhttp::empty_body> req(bhttp::verb::get, target, 11);
    req.set(bhttp::field::host, "coordinator");
    req.set(bhttp::field::authorization, "Bearer " + token);
    bhttp::write(*stream_, req);
  }

  // Reads until `marker` is in what was read since the last call, the deadline passes or the
  // connection ends; returns what was read.
  std::string read_until(const std::string& marker, std::chrono::seconds within) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (!closed_ && got.find(marker) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      // Asynchronous: the stream's deadline applies to asynchronous reads only.
      beast::get_lowest_layer(*stream_).expires_at(deadline);
      char buf[4096];
      beast::error_code ec;
      size_t n = 0;
      stream_->async_read_some(net::buffer(buf), [&](beast::error_code e, size_t k) {
        ec = e;
        n = k;
      });
      ioc_.restart();
      ioc_.run();
      got.append(buf, n);
      if (ec == beast::error::timeout) break;
      if (ec) closed_ = true;  // end of stream, reset, or TLS truncation: the server closed it
    }
    return got;
  }
  bool closed() const { return closed_; }

 private:
  net::io_context ioc_;
  ssl::context ctx_;
  int port_;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> stream_;
  bool closed_ = false;
};

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tls_ = dir_.sub("tls");
    ASSERT_TRUE(transport::ca_init(tls_).ok());
    ASSERT_TRUE(transport::ca_issue(tls_, "coordinator", transport::Role::kServer).ok());
    auto store = Store::open(dir_.sub("store"));
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(store).value();
    ManagerOptions mo;
    mo.encode_checkpoint = [](const ExperimentRecord& rec, const ExperimentConfig&,
                              const std::vector<float>& params) -> StatusOr<std::string> {
      return "CKPT:" + rec.id + ":" + std::to_string(params.size());
    };
    manager_ = std::make_unique<ExperimentManager>(*store_, mo);
    // Static files: a web root with one page, and a secret next to it that must stay private.
    const std::string web = dir_.sub("web");
    std::filesystem::create_directories(web + "/sub");
    std::ofstream(web + "/index.html") << "<!doctype html><title>atoll</title>";
    std::ofstream(web + "/sub/app.js") << "console.log(1)";
    std::ofstream(web + "/big.js") << big_script();
    std::ofstream(web + "/notes.key") << "not served";
    std::ofstream(dir_.sub("secret.txt")) << "SECRET";
    http::HttpOptions ho;
    ho.tls_dir = tls_;
    ho.mounts = {{"/", web}};
    ho.max_body_bytes = 64 * 1024;
    auto server = http::HttpServer::start(*manager_, *store_, ho);
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    server_ = std::move(server).value();
    client_ = std::make_unique<Client>(transport::ca_cert_path(tls_), server_->port());
    auto admin = http::create_token(*store_, http::Role::kAdmin, "test admin");
    auto viewer = http::create_token(*store_, http::Role::kViewer, "test viewer");
    ASSERT_TRUE(admin.ok() && viewer.ok());
    admin_ = *admin;
    viewer_ = *viewer;
  }
  void TearDown() override {
    server_.reset();
    grpc_.reset();
    if (manager_) manager_->attach(nullptr);
    service_.reset();
    manager_.reset();
    router_.reset();
    store_.reset();
  }

  // 64 kB of repetitive script (compresses well).
  static std::string big_script() {
    std::string s;
    for (int i = 0; i < 1000; ++i)
      s += "console.log('line " + std::to_string(i) + " of the page');\n";
    return s;
  }

  static std::string small_config(const std::string& name) {
    return R"({"name":")" + name +
           R"(","model":{"dim":16,"layers":1,"heads":2,"ffn_hidden":32,"seq_len":16},)"
           R"("diloco":{"rounds":3,"inner_steps":2,"min_nodes":1,"max_nodes":2},)"
           // batch_size 64: the fake node's 1000 tokens fit a round (2 × 64 × 16 = 2048).
           R"("train":{"codec":"none","batch_size":64},"data":{"split":"iid"}})";
  }

  testing_util::TempDir dir_;
  std::string tls_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ExperimentManager> manager_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<ServiceRouter> router_;    // outlives manager_
  std::unique_ptr<CoordinatorServer> grpc_;  // serves router_
  std::unique_ptr<http::HttpServer> server_;
  std::unique_ptr<Client> client_;
  std::string admin_, viewer_;
};

TEST_F(HttpApiTest, HealthAndOpenApiNeedNoToken) {
  Reply h = client_->send("GET", "/api/health");
  EXPECT_EQ(h.status, 200u);
  Reply o = client_->send("GET", "/api/openapi.json");
  ASSERT_EQ(o.status, 200u);
  auto doc = o.json();
  ASSERT_TRUE(doc.is_object()) << "openapi.json is not JSON";
  EXPECT_EQ(doc.as_object().at("openapi").as_string(), "3.0.3");
  EXPECT_TRUE(doc.as_object().at("paths").as_object().contains("/api/experiments/{id}/metrics"));
  EXPECT_TRUE(doc.as_object().at("paths").as_object().contains("/api/tokens"));
  EXPECT_TRUE(doc.as_object().at("paths").as_object().contains("/api/experiments/{id}/subnets"));
  EXPECT_TRUE(doc.as_object().at("paths").as_object().contains("/api/tokens/{hash_prefix}"));
}

TEST_F(HttpApiTest, NoTokenOrUnknownTokenIs401) {
  EXPECT_EQ(client_->send("GET", "/api/experiments").status, 401u);
  EXPECT_EQ(client_->send("GET", "/api/experiments", "atl_" + std::string(64, '0')).status, 401u);
  EXPECT_EQ(client_->send("GET", "/api/experiments", "garbage").status, 401u);
  EXPECT_EQ(client_->send("POST", "/api/experiments", "", small_config("a")).status, 401u);
  Reply r = client_->send("GET", "/api/events");
  EXPECT_EQ(r.status, 401u);
  EXPECT_NE(r.error().find("token"), std::string::npos) << r.body;
}

TEST_F(HttpApiTest, ViewerReadsButCannotChangeAnything) {
  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, small_config("exp1")).status, 201u);
  EXPECT_EQ(client_->send("GET", "/api/experiments", viewer_).status, 200u);
  EXPECT_EQ(client_->send("GET", "/api/experiments/exp1", viewer_).status, 200u);
  Reply who = client_->send("GET", "/api/whoami", viewer_);
  EXPECT_EQ(who.json().as_object().at("role").as_string(), "viewer");
  EXPECT_EQ(client_->send("POST", "/api/experiments", viewer_, small_config("exp2")).status, 403u);
  for (const char* action : {"start", "pause", "resume", "stop"})
    EXPECT_EQ(client_->send("POST", std::string("/api/experiments/exp1/") + action, viewer_).status,
              403u)
        << action;
  EXPECT_EQ(client_->send("DELETE", "/api/experiments/exp1", viewer_).status, 403u);
  // Nothing changed.
  Reply g = client_->send("GET", "/api/experiments/exp1", admin_);
  EXPECT_EQ(g.json().as_object().at("state").as_string(), "created");
  EXPECT_EQ(client_->send("GET", "/api/experiments/exp2", admin_).status, 404u);
}

// The Hydra grid's route: a DiLoCo experiment and a Hydra one that is not served here have no
// sites (the sites' subnetworks of a live Hydra run: hydra_service_test.cc).
TEST_F(HttpApiTest, SubnetsAreEmptyWithoutALiveHydraSelection) {
  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, small_config("dl")).status, 201u);
  std::string hydra = small_config("hy");
  hydra.insert(1, R"("algorithm":"hydra","hydra":{"ffn_blocks":2},)");
  Reply c = client_->send("POST", "/api/experiments", admin_, hydra);
  ASSERT_EQ(c.status, 201u) << c.body;
  EXPECT_EQ(c.json().as_object().at("config").as_object().at("algorithm").as_string(), "hydra");
  for (const char* id : {"dl", "hy"}) {
    Reply r = client_->send("GET", std::string("/api/experiments/") + id + "/subnets", viewer_);
    ASSERT_EQ(r.status, 200u) << r.body;
    const json::value v = r.json();
    EXPECT_EQ(v.as_object().at("algorithm").as_string(),
              id == std::string("dl") ? "diloco" : "hydra");
    EXPECT_FALSE(v.as_object().at("live").as_bool());
    EXPECT_EQ(v.as_object().at("heads").to_number<int>(), 2);
    EXPECT_EQ(v.as_object().at("ffn_blocks").to_number<int>(), id == std::string("dl") ? 4 : 2);
    EXPECT_TRUE(v.as_object().at("subnets").as_array().empty());
  }
  EXPECT_EQ(client_->send("GET", "/api/experiments/nope/subnets", viewer_).status, 404u);
  EXPECT_EQ(client_->send("GET", "/api/experiments/hy/subnets").status, 401u);
}

// GET /api/experiments/{id}'s parsed config carries the [hydra] section as given (it was only in
// config_toml), its other keys at their defaults.
TEST_F(HttpApiTest, TheParsedConfigHasTheHydraSection) {
  std::string hydra = small_config("hy");
  hydra.insert(1, R"("algorithm":"hydra","hydra":{"ffn_blocks":2,"reselect_every":3,)"
                  R"("forward_share_power":2.0,"trained_layers":"per_site"},)");
  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, hydra).status, 201u);
  Reply g = client_->send("GET", "/api/experiments/hy", viewer_);
  ASSERT_EQ(g.status, 200u) << g.body;
  const json::value v = g.json();
  const json::object& h = v.as_object().at("config").as_object().at("hydra").as_object();
  EXPECT_EQ(h.at("ffn_blocks").to_number<int>(), 2);
  EXPECT_EQ(h.at("reselect_every").to_number<int>(), 3);
  EXPECT_EQ(h.at("forward_share_power").to_number<double>(), 2.0);
  EXPECT_EQ(h.at("trained_layers").as_string(), "per_site");
  const HydraSection defaults;
  EXPECT_EQ(h.at("min_coverage").to_number<uint32_t>(), defaults.min_coverage);
  EXPECT_EQ(h.at("importance_batches").to_number<uint32_t>(), defaults.importance_batches);
  EXPECT_EQ(h.at("min_train_share").to_number<double>(), defaults.min_train_share);
  EXPECT_EQ(h.at("removal_penalty").to_number<double>(), defaults.removal_penalty);
  EXPECT_EQ(h.size(), 8u);
}

TEST_F(HttpApiTest, CreateListGetStopDelete) {
  Reply c = client_->send("POST", "/api/experiments", admin_, small_config("exp1"));
  ASSERT_EQ(c.status, 201u) << c.body;
  EXPECT_EQ(c.json().as_object().at("id").as_string(), "exp1");
  EXPECT_EQ(c.json().as_object().at("params").as_int64(),
            16 * 256 + (4 * 16 * 16 + 3 * 32 * 16 + 32) + 16);
  // TOML form too.
  Reply t = client_->send(
      "POST", "/api/experiments", admin_,
      R"({"config_toml":"name = \"exp2\"\n[model]\ndim = 16\nlayers = 1\nheads = 2\nffn_hidden = 32\nseq_len = 16\n"})");
  ASSERT_EQ(t.status, 201u) << t.body;
  Reply dup = client_->send("POST", "/api/experiments", admin_, small_config("exp1"));
  EXPECT_EQ(dup.status, 409u);
  EXPECT_EQ(dup.json().as_object().at("field").as_string(), "name");

  Reply l = client_->send("GET", "/api/experiments", viewer_);
  ASSERT_EQ(l.status, 200u);
  const json::value listed = l.json();
  const auto& list = listed.as_object().at("experiments").as_array();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].as_object().at("id").as_string(), "exp1");
  EXPECT_EQ(list[1].as_object().at("id").as_string(), "exp2");

  Reply g = client_->send("GET", "/api/experiments/exp1", viewer_);
  ASSERT_EQ(g.status, 200u);
  EXPECT_EQ(g.json()
                .as_object()
                .at("config")
                .as_object()
                .at("diloco")
                .as_object()
                .at("rounds")
                .as_int64(),
            3);
  // The parsed config has every key of every section (streaming, MoE, precision, Hydra, LoRA
  // were missing), with the stored config's values.
  {
    const json::object config = g.json().as_object().at("config").as_object();
    for (const char* section :
         {"model", "train", "diloco", "hydra", "data", "robust", "privacy", "secagg", "lora"})
      EXPECT_TRUE(config.contains(section)) << section;
    EXPECT_EQ(config.at("diloco").as_object().at("streaming_fragments").as_int64(), 1);
    EXPECT_EQ(config.at("model").as_object().at("moe_experts").as_int64(), 0);
    EXPECT_EQ(config.at("model").as_object().at("tie_word_embeddings").as_bool(), true);
    EXPECT_EQ(config.at("train").as_object().at("precision").as_string(), "fp32");
    EXPECT_EQ(config.at("train").as_object().at("optimizer").as_string(), "adamw");
    EXPECT_EQ(config.at("hydra").as_object().at("ffn_blocks").as_int64(), 4);
    EXPECT_EQ(config.at("lora").as_object().at("rank").as_int64(), 0);
    EXPECT_EQ(config.at("seed").as_int64(), 1234);
    EXPECT_EQ(config.at("data").as_object().at("paths").as_array().size(), 0u);
  }
  EXPECT_EQ(client_->send("GET", "/api/experiments/exp1/rounds", viewer_).status, 200u);
  EXPECT_EQ(client_->send("GET", "/api/experiments/exp1/nodes", viewer_).status, 200u);
  Reply m = client_->send("GET", "/api/experiments/exp1/metrics?max_points=10", viewer_);
  ASSERT_EQ(m.status, 200u);
  EXPECT_EQ(m.json().as_object().at("total_rounds").as_int64(), 0);
  Reply ck = client_->send("GET", "/api/experiments/exp1/checkpoint", viewer_);
  EXPECT_EQ(ck.status, 200u);
  EXPECT_EQ(ck.content_type, "application/octet-stream");
  EXPECT_EQ(ck.body.rfind("CKPT:exp1:", 0), 0u) << ck.body.substr(0, 40);

  // Not live here: start is refused with a way forward; stop works on the store.
  Reply s = client_->send("POST", "/api/experiments/exp1/start", admin_);
  EXPECT_EQ(s.status, 409u);
  EXPECT_NE(s.error().find("atoll coordinator"), std::string::npos) << s.body;
  Reply st = client_->send("POST", "/api/experiments/exp1/stop", admin_);
  ASSERT_EQ(st.status, 200u) << st.body;
  EXPECT_EQ(st.json().as_object().at("state").as_string(), "finished");
  EXPECT_EQ(client_->send("POST", "/api/experiments/exp1/stop", admin_).status, 409u);
  EXPECT_EQ(client_->send("DELETE", "/api/experiments/exp1", admin_).status, 200u);
  EXPECT_EQ(client_->send("GET", "/api/experiments/exp1", admin_).status, 404u);
  EXPECT_EQ(client_->send("GET", "/api/experiments/exp1/rounds", admin_).status, 404u);
}

// A coordinator starting on a store where another experiment was left "running": one the API
// made live is served again (StartingAStoredExperimentMakesItLive), one another --config served
// is paused, with an audit line, so that it neither runs unserved nor is taken for the API's.
TEST_F(HttpApiTest, AnExperimentLeftRunningByAnotherConfigIsPaused) {
  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, small_config("old")).status, 201u);
  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, small_config("new")).status, 201u);
  auto none = manager_->left_running("new");
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE(none->has_value());  // both are created, not running
  // "old" as `atoll coordinator --config old.toml` leaves it when it stops mid-run.
  auto rec = store_->load_experiment("old");
  ASSERT_TRUE(rec.ok());
  rec->state = ExperimentState::kRunning;
  ASSERT_TRUE(store_->put_experiment(*rec).ok());
  ASSERT_TRUE(manager_->note_served_from_config("old").ok());
  auto left = manager_->left_running("new");
  ASSERT_TRUE(left.ok() && left->has_value());
  EXPECT_EQ((*left)->id, "old");
  EXPECT_FALSE((*left)->made_live_from_api);
  EXPECT_FALSE(manager_->left_running("old")->has_value());  // its own config serves it again
  ASSERT_TRUE(manager_->pause_left_running("old", "test: another config").ok());
  Reply old = client_->send("GET", "/api/experiments/old", viewer_);
  EXPECT_EQ(old.json().as_object().at("state").as_string(), "paused") << old.body;
  auto audit = store_->list_audit("old");
  ASSERT_TRUE(audit.ok() && !audit->empty());
  EXPECT_NE(audit->back().find("paused: test: another config"), std::string::npos) << audit->back();
  EXPECT_FALSE(manager_->left_running("new")->has_value());
}

// What the dashboard shows while an experiment waits for nodes (where they join), and the
// validation bpb that nodes with data of their own report each round.
TEST_F(HttpApiTest, NodeAddressAndSiteValidationBpb) {
  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, small_config("exp1")).status, 201u);
  auto address = [&](const std::string& target) {
    json::value v = client_->send("GET", target, viewer_).json();
    const json::object& x = target == "/api/experiments"
                                ? v.as_object().at("experiments").as_array().at(0).as_object()
                                : v.as_object();
    return std::string(x.at("node_address").as_string());
  };
  EXPECT_EQ(address("/api/experiments/exp1"), "");  // no gRPC server in this process
  manager_->set_node_address("127.0.0.1:7070");
  EXPECT_EQ(address("/api/experiments/exp1"), "127.0.0.1:7070");
  EXPECT_EQ(address("/api/experiments"), "127.0.0.1:7070");

  // A node's report after round 0 (x = 1 round completed), as the round engine stores it.
  ASSERT_TRUE(store_
                  ->put_metrics("exp1", "site-a", 0,
                                R"({"node":"site-a","round":0,"step":2,"metrics":)"
                                R"({"loss":3.5,"tokens_per_s":100.0,"site_val_bpb":4.25}})")
                  .ok());
  Reply m = client_->send("GET", "/api/experiments/exp1/metrics", viewer_);
  ASSERT_EQ(m.status, 200u) << m.body;
  const json::value v = m.json();
  const json::object& per_node = v.as_object().at("per_node").as_object();
  ASSERT_TRUE(per_node.contains("site_val_bpb")) << m.body;
  const json::array& site = per_node.at("site_val_bpb").as_object().at("site-a").as_array();
  ASSERT_EQ(site.size(), 1u);
  EXPECT_EQ(site[0].as_array()[0].to_number<double>(), 1.0);
  EXPECT_EQ(site[0].as_array()[1].to_number<double>(), 4.25);
  EXPECT_EQ(per_node.at("tokens_per_s").as_object().at("site-a").as_array().size(), 1u);
  // The inner loss per node comes from committed rounds, not from reports.
  EXPECT_FALSE(per_node.contains("loss")) << m.body;
  EXPECT_FALSE(per_node.contains("teacher_bytes_per_token")) << m.body;

  // Reports stored after a request are read by the next one, each once (the series are kept
  // between requests): a second node, site-a's next round, and the coordinator's evaluation.
  ASSERT_TRUE(store_
                  ->put_metrics("exp1", "site-a", 1,
                                R"({"node":"site-a","round":1,"metrics":{"site_val_bpb":4.0}})")
                  .ok());
  ASSERT_TRUE(store_
                  ->put_metrics("exp1", "site-a-2", 0,
                                R"({"node":"site-a-2","round":0,"metrics":{"site_val_bpb":5.5}})")
                  .ok());
  for (int request = 0; request < 2; ++request) {
    Reply again = client_->send("GET", "/api/experiments/exp1/metrics", viewer_);
    ASSERT_EQ(again.status, 200u) << again.body;
    const json::value body = again.json();
    const json::object& sites =
        body.as_object().at("per_node").as_object().at("site_val_bpb").as_object();
    ASSERT_EQ(sites.at("site-a").as_array().size(), 2u) << again.body;
    EXPECT_EQ(sites.at("site-a").as_array()[1].as_array()[1].to_number<double>(), 4.0);
    ASSERT_EQ(sites.at("site-a-2").as_array().size(), 1u) << again.body;
    EXPECT_EQ(sites.at("site-a-2").as_array()[0].as_array()[1].to_number<double>(), 5.5);
  }

  // The list's totals: the coordinator's latest and lowest validation bpb (null before any),
  // and no start or duration before a round is committed.
  auto listed = [&] {
    return client_->send("GET", "/api/experiments", viewer_)
        .json()
        .as_object()
        .at("experiments")
        .as_array()
        .at(0)
        .as_object();
  };
  EXPECT_TRUE(listed().at("final_val_bpb").is_null());
  EXPECT_TRUE(listed().at("best_val_bpb").is_null());
  auto publish = [&](int round, double bpb) {
    ASSERT_TRUE(store_
                    ->put_metrics("exp1", ExperimentManager::kCoordinatorNode, round,
                                  R"({"node":"@coordinator","round":)" + std::to_string(round) +
                                      R"(,"metrics":{"val_bpb":)" + std::to_string(bpb) + "}}")
                    .ok());
  };
  // The initial parameters' bpb (x = 0) is no final or best bpb: still null with 0 rounds done.
  publish(0, 8.0);
  EXPECT_TRUE(listed().at("final_val_bpb").is_null());
  EXPECT_TRUE(listed().at("best_val_bpb").is_null());
  publish(2, 4.5);
  publish(1, 4.0);
  const json::object x = listed();
  EXPECT_EQ(x.at("final_val_bpb").to_number<double>(), 4.5);  // round 2's, the latest
  EXPECT_EQ(x.at("best_val_bpb").to_number<double>(), 4.0);
  EXPECT_EQ(x.at("started_unix_ms").to_number<double>(), 0.0);
  EXPECT_EQ(x.at("duration_s").to_number<double>(), 0.0);
  // A distillation student's teacher_bytes_per_token is forwarded per node.
  ASSERT_TRUE(store_
                  ->put_metrics("exp1", "site-a", 1,
                                R"({"node":"site-a","round":1,"step":4,"metrics":)"
                                R"({"loss":3.0,"teacher_bytes_per_token":512.0}})")
                  .ok());
  const json::value d = client_->send("GET", "/api/experiments/exp1/metrics", viewer_).json();
  const json::array& teacher = d.as_object()
                                   .at("per_node")
                                   .as_object()
                                   .at("teacher_bytes_per_token")
                                   .as_object()
                                   .at("site-a")
                                   .as_array();
  ASSERT_EQ(teacher.size(), 1u);
  EXPECT_EQ(teacher[0].as_array()[1].to_number<double>(), 512.0);
}

// The data-parallel comparison of a round: a ring all-reduce of the fp32 gradient for each inner
// step the round trained, H/P in Streaming DiLoCo (it counted H: P times too many bytes).
TEST_F(HttpApiTest, DataParallelBytesCountTheStepsOfARound) {
  Reply c = client_->send(
      "POST", "/api/experiments", admin_,
      R"({"config_toml":"name = \"st\"\n[model]\ndim = 16\nlayers = 1\nheads = 2\n)"
      R"(ffn_hidden = 32\nseq_len = 16\n[diloco]\ninner_steps = 8\nstreaming_fragments = 4\n"})");
  ASSERT_EQ(c.status, 201u) << c.body;
  auto e = store_->load_experiment("st");
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  std::vector<float> theta(e->numel, 0.5f), momentum(e->numel, 0.0f);
  RoundRecord round;
  round.round = 0;
  for (const char* node : {"site-a", "site-b", "site-c"})
    round.participants.push_back({.node_id = node, .pushed = true, .tokens = 256});
  e->current_round = 1;
  ASSERT_TRUE(store_->commit_round(*e, round, theta, momentum).ok());
  const json::value m = client_->send("GET", "/api/experiments/st/metrics", viewer_).json();
  const json::array& ddp =
      m.as_object().at("global").as_object().at("ddp_bytes").as_array().at(0).as_array();
  // H/P = 2 steps × 2(N − 1) = 4 × θ's fp32 bytes, N = 3 sites.
  EXPECT_EQ(ddp[1].to_number<double>(), 2.0 * 2.0 * 2.0 * static_cast<double>(e->numel) * 4.0);
}

// The series and node totals fold each round record in once: rounds committed between two
// requests are added to what the first one read, and nothing is counted twice.
TEST_F(HttpApiTest, SeriesAndNodeTotalsFollowRoundsCommittedBetweenRequests) {
  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, small_config("fold")).status, 201u);
  auto e = store_->load_experiment("fold");
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  NodeRecord node;
  node.node_id = "site-a";
  node.state = "active";
  ASSERT_TRUE(store_->put_node("fold", node).ok());
  std::vector<float> theta(e->numel, 0.5f), momentum(e->numel, 0.0f);
  auto commit = [&](uint64_t r, double loss) {
    RoundRecord round;
    round.round = r;
    round.mean_loss = loss;
    ParticipantRecord p;
    p.node_id = "site-a";
    p.pushed = true;
    p.tokens = 100;
    p.loss = loss;
    p.bytes_up = 40;
    round.participants.push_back(p);
    round.bytes_up = 40;
    e->current_round = r + 1;
    ASSERT_TRUE(store_->commit_round(*e, round, theta, momentum).ok());
  };
  auto mean_loss = [&] {
    const json::value m = client_->send("GET", "/api/experiments/fold/metrics", viewer_).json();
    std::vector<double> out;
    for (const auto& p : m.as_object().at("global").as_object().at("mean_loss").as_array())
      out.push_back(p.as_array()[1].to_number<double>());
    return out;
  };
  auto site_a = [&] {
    const json::value v = client_->send("GET", "/api/experiments/fold/nodes", viewer_).json();
    return v.as_object().at("nodes").as_array().at(0).as_object();
  };
  commit(0, 3.0);
  EXPECT_EQ(mean_loss(), (std::vector<double>{3.0}));
  EXPECT_EQ(site_a().at("bytes_up").as_int64(), 40);
  commit(1, 2.5);
  commit(2, 2.0);
  EXPECT_EQ(mean_loss(), (std::vector<double>{3.0, 2.5, 2.0}));
  EXPECT_EQ(mean_loss(), (std::vector<double>{3.0, 2.5, 2.0}));  // asked again: the same
  const json::object a = site_a();
  EXPECT_EQ(a.at("rounds").as_int64(), 3);
  EXPECT_EQ(a.at("tokens").as_int64(), 300);
  EXPECT_EQ(a.at("bytes_up").as_int64(), 120);
}

TEST_F(HttpApiTest, LiveExperimentIsDrivenThroughItsService) {
  auto cfg = parse_experiment_config(
      "name = \"live\"\n[model]\ndim = 16\nlayers = 1\nheads = 2\nffn_hidden = 32\nseq_len = 16\n",
      "test");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  algorithms::ParamSet theta0 = testing_util::toy_params(64);
  auto svc = CoordinatorService::open(*store_, *cfg, theta0);
  ASSERT_TRUE(svc.ok()) << svc.status().to_string();
  service_ = std::move(svc).value();
  manager_->attach(service_.get());
  Reply g = client_->send("GET", "/api/experiments/live", viewer_);
  ASSERT_EQ(g.status, 200u);
  EXPECT_TRUE(g.json().as_object().at("live").as_bool());
  EXPECT_EQ(client_->send("POST", "/api/experiments/live/resume", admin_).status, 409u);
  Reply s = client_->send("POST", "/api/experiments/live/start", admin_);
  ASSERT_EQ(s.status, 200u) << s.body;
  EXPECT_EQ(s.json().as_object().at("state").as_string(), "running");
  EXPECT_EQ(client_->send("POST", "/api/experiments/live/pause", admin_)
                .json()
                .as_object()
                .at("state")
                .as_string(),
            "paused");
  EXPECT_EQ(client_->send("POST", "/api/experiments/live/resume", admin_)
                .json()
                .as_object()
                .at("state")
                .as_string(),
            "running");
  EXPECT_EQ(client_->send("DELETE", "/api/experiments/live", admin_).status, 409u);
  EXPECT_EQ(client_->send("POST", "/api/experiments/live/stop", admin_).status, 200u);
  EXPECT_EQ(service_->state(), ExperimentState::kFinished);
  EXPECT_EQ(client_->send("POST", "/api/experiments/live/start", admin_).status, 409u);
  // Finished, but still the one loaded here: the refusal says what it is, not that it runs.
  Reply loaded = client_->send("DELETE", "/api/experiments/live", admin_);
  EXPECT_EQ(loaded.status, 409u);
  EXPECT_NE(loaded.error().find("'live' is the one this coordinator serves (finished) and cannot "
                                "be deleted while it is loaded here"),
            std::string::npos)
      << loaded.body;
}

// A coordinator that can switch: a gRPC server on a ServiceRouter, and a manager that opens
// services for stored experiments. Experiment A is live; B is created from the API.
TEST_F(HttpApiTest, StartingAStoredExperimentMakesItLive) {
  server_.reset();
  manager_.reset();
  router_ = std::make_unique<ServiceRouter>();
  ManagerOptions mo;
  mo.router = router_.get();
  mo.open_service =
      [this](const ExperimentRecord& rec,
             const ExperimentConfig& cfg) -> StatusOr<std::shared_ptr<CoordinatorService>> {
    algorithms::ParamSet layout(algorithms::make_layout(model_config(cfg)));
    ServiceOptions so;
    so.on_event = [m = manager_.get(), id = rec.id](const Event& e) { m->on_event(id, e); };
    ATOLL_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorService> svc,
                           CoordinatorService::open(*store_, cfg, layout, so));
    return std::shared_ptr<CoordinatorService>(std::move(svc));
  };
  manager_ = std::make_unique<ExperimentManager>(*store_, mo);
  http::HttpOptions ho;
  ho.tls_dir = tls_;
  auto server = http::HttpServer::start(*manager_, *store_, ho);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  server_ = std::move(server).value();
  client_ = std::make_unique<Client>(transport::ca_cert_path(tls_), server_->port());

  auto cfg_a = parse_experiment_config(
      "name = \"expA\"\n[model]\ndim = 16\nlayers = 1\nheads = 2\nffn_hidden = 32\nseq_len = 16\n",
      "test");
  ASSERT_TRUE(cfg_a.ok()) << cfg_a.status().to_string();
  ServiceOptions so_a;
  so_a.on_event = [m = manager_.get()](const Event& e) { m->on_event("expA", e); };
  algorithms::ParamSet theta_a(algorithms::make_layout(model_config(*cfg_a)));
  auto svc_a = CoordinatorService::open(*store_, *cfg_a, theta_a, so_a);
  ASSERT_TRUE(svc_a.ok()) << svc_a.status().to_string();
  manager_->attach(std::shared_ptr<CoordinatorService>(std::move(svc_a).value()));
  auto grpc =
      CoordinatorServer::start(*router_, {.listen = "127.0.0.1:0",
                                          .credentials = transport::insecure_server_credentials(),
                                          .limits = {},
                                          .bulk_listen = "",
                                          .bulk_tls = {},
                                          .refusal_log = {}});
  ASSERT_TRUE(grpc.ok()) << grpc.status().to_string();
  grpc_ = std::move(grpc).value();

  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, small_config("expB")).status, 201u);
  ASSERT_EQ(client_->send("POST", "/api/experiments/expA/start", admin_).status, 200u);
  // A runs: B cannot take over.
  Reply busy = client_->send("POST", "/api/experiments/expB/start", admin_);
  EXPECT_EQ(busy.status, 409u);
  EXPECT_NE(busy.error().find("'expA' is running; pause or stop it first"), std::string::npos)
      << busy.body;
  EXPECT_FALSE(client_->send("GET", "/api/experiments/expB", viewer_)
                   .json()
                   .as_object()
                   .at("live")
                   .as_bool());

  // A paused: starting B makes it live and running, once the coordinator has an address nodes
  // reach (`atoll coordinator` sets its gRPC address; an in-process run has none).
  ASSERT_EQ(client_->send("POST", "/api/experiments/expA/pause", admin_).status, 200u);
  Reply no_nodes = client_->send("POST", "/api/experiments/expB/start", admin_);
  EXPECT_EQ(no_nodes.status, 409u);
  EXPECT_NE(no_nodes.error().find("this process serves no nodes (its sites run in-process), so "
                                  "'expB' cannot run here; start it under `atoll coordinator`"),
            std::string::npos)
      << no_nodes.body;
  manager_->set_node_address(grpc_->address());
  Reply started = client_->send("POST", "/api/experiments/expB/start", admin_);
  ASSERT_EQ(started.status, 200u) << started.body;
  Reply b = client_->send("GET", "/api/experiments/expB", viewer_);
  EXPECT_TRUE(b.json().as_object().at("live").as_bool()) << b.body;
  EXPECT_EQ(b.json().as_object().at("state").as_string(), "running");
  Reply a = client_->send("GET", "/api/experiments/expA", viewer_);
  EXPECT_FALSE(a.json().as_object().at("live").as_bool()) << a.body;
  EXPECT_EQ(a.json().as_object().at("state").as_string(), "paused");
  // B runs now: A cannot take over again.
  EXPECT_EQ(client_->send("POST", "/api/experiments/expA/resume", admin_).status, 409u);
  // A coordinator started again on this store with A's --config would serve B again.
  auto left = manager_->left_running("expA");
  ASSERT_TRUE(left.ok() && left->has_value());
  EXPECT_EQ((*left)->id, "expB");
  EXPECT_TRUE((*left)->made_live_from_api);

  // A node at the same gRPC address joins B and trains it to the end (3 rounds).
  auto cfg_b = manager_->get("expB");
  ASSERT_TRUE(cfg_b.ok());
  testing::FakeNode node;
  node.options = testing::insecure_client(grpc_->address(), "node-0");
  node.layout_fp =
      algorithms::layout_fingerprint(algorithms::make_layout(model_config(cfg_b->config)));
  node.run(std::chrono::steady_clock::now() + std::chrono::seconds(30));
  EXPECT_TRUE(node.stopped);
  EXPECT_TRUE(node.errors.empty()) << node.errors.front();
  EXPECT_EQ(node.rounds_done.size(), 3u);
  Reply done = client_->send("GET", "/api/experiments/expB", viewer_);
  EXPECT_EQ(done.json().as_object().at("state").as_string(), "finished") << done.body;
  EXPECT_EQ(done.json().as_object().at("current_round").as_int64(), 3) << done.body;
  Reply rounds = client_->send("GET", "/api/experiments/expB/rounds", viewer_);
  ASSERT_EQ(rounds.status, 200u);
  EXPECT_EQ(rounds.json().as_object().at("rounds").as_array().size(), 3u) << rounds.body;
  // The finished run's node keeps its totals, but no "now" from its last heartbeat.
  Reply nodes = client_->send("GET", "/api/experiments/expB/nodes", viewer_);
  ASSERT_EQ(nodes.status, 200u) << nodes.body;
  const json::value nodes_json = nodes.json();
  const json::object& n0 = nodes_json.as_object().at("nodes").as_array().at(0).as_object();
  EXPECT_EQ(n0.at("node_id").as_string(), "node-0") << nodes.body;
  EXPECT_EQ(n0.at("rounds").as_int64(), 3) << nodes.body;
  EXPECT_TRUE(n0.at("round").is_null()) << nodes.body;
  EXPECT_TRUE(n0.at("inner_step").is_null()) << nodes.body;
  EXPECT_TRUE(n0.at("tokens_per_s").is_null()) << nodes.body;

  // B finished: the paused A can be resumed (it becomes live again, from its stored round).
  Reply back = client_->send("POST", "/api/experiments/expA/resume", admin_);
  EXPECT_EQ(back.status, 200u) << back.body;
  EXPECT_TRUE(client_->send("GET", "/api/experiments/expA", viewer_)
                  .json()
                  .as_object()
                  .at("live")
                  .as_bool());
  EXPECT_EQ(client_->send("POST", "/api/experiments/expB/start", admin_).status, 409u);
}

TEST_F(HttpApiTest, BadBodiesAre4xxWithAMessage) {
  Reply r = client_->send("POST", "/api/experiments", admin_, "{not json");
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(r.error().find("malformed JSON"), std::string::npos) << r.body;
  EXPECT_EQ(client_->send("POST", "/api/experiments", admin_, "[1,2,3]").status, 400u);
  EXPECT_EQ(client_->send("POST", "/api/experiments", admin_, R"({"name":{"a":{"b":1}}})").status,
            400u);
  EXPECT_EQ(client_->send("POST", "/api/experiments", admin_, R"({"name":null})").status, 400u);
  EXPECT_EQ(client_->send("POST", "/api/experiments", admin_, R"({"bad key":1})").status, 400u);
  Reply unknown =
      client_->send("POST", "/api/experiments", admin_, R"({"name":"x","model":{"depth":3}})");
  EXPECT_EQ(unknown.status, 400u);
  EXPECT_EQ(unknown.json().as_object().at("field").as_string(), "model.depth");
  Reply range =
      client_->send("POST", "/api/experiments", admin_, R"({"name":"x","diloco":{"rounds":0}})");
  EXPECT_EQ(range.status, 400u);
  EXPECT_EQ(range.error(), "request: diloco.rounds = 0 must be >= 1");
  EXPECT_EQ(range.json().as_object().at("field").as_string(), "diloco.rounds");
  Reply type = client_->send("POST", "/api/experiments", admin_,
                             R"({"name":"x","diloco":{"rounds":"ten"}})");
  EXPECT_EQ(type.status, 400u);
  // A TOML injection through a string value stays a string (and fails validation as a name).
  Reply inj =
      client_->send("POST", "/api/experiments", admin_, R"({"name":"x\"\n[model]\ndim = 0\n#"})");
  EXPECT_EQ(inj.status, 400u);
  EXPECT_EQ(inj.json().as_object().at("field").as_string(), "name");
  // "." and ".." pass the character check but a browser resolves them out of the URL.
  for (const char* dots : {".", ".."}) {
    Reply r = client_->send("POST", "/api/experiments", admin_,
                            small_config("x").replace(9, 1, dots));  // {"name":"<dots>",...
    EXPECT_EQ(r.status, 400u) << dots << " -> " << r.body;
    EXPECT_EQ(r.error(),
              std::string("request: name = \"") + dots +
                  "\" must be 1-64 characters of [A-Za-z0-9._-], and not \".\" or \"..\"")
        << r.body;
    EXPECT_EQ(r.json().as_object().at("field").as_string(), "name");
  }
  // The same key twice: refused naming it (boost::json would keep the last one silently).
  Reply twice = client_->send("POST", "/api/experiments", admin_,
                              R"({"name":"x","model":{"dim":16,"layers":1,"dim":32}})");
  EXPECT_EQ(twice.status, 400u) << twice.body;
  EXPECT_EQ(twice.error(), "duplicate key \"model.dim\" in the JSON body: send each key once");
  EXPECT_EQ(twice.json().as_object().at("field").as_string(), "model.dim");
  // A seed past TOML's integers names the field and the range.
  Reply seed = client_->send("POST", "/api/experiments", admin_,
                             R"({"name":"x","seed":18446744073709551615})");
  EXPECT_EQ(seed.status, 400u) << seed.body;
  EXPECT_EQ(seed.error(),
            "request: seed = 18446744073709551615 must be an integer in [0, 9223372036854775807]");
  EXPECT_EQ(seed.json().as_object().at("field").as_string(), "seed");
  Reply negative = client_->send("POST", "/api/experiments", admin_, R"({"name":"x","seed":-1})");
  EXPECT_EQ(negative.status, 400u) << negative.body;
  EXPECT_NE(negative.error().find("[0, 9223372036854775807]"), std::string::npos) << negative.body;
  EXPECT_EQ(negative.json().as_object().at("field").as_string(), "seed");
  Reply huge = client_->send(
      "POST", "/api/experiments", admin_,
      R"({"name":"huge","model":{"dim":8192,"layers":200,"heads":64,"ffn_hidden":65536}})");
  EXPECT_EQ(huge.status, 400u);
  EXPECT_NE(huge.error().find("parameters"), std::string::npos) << huge.body;
  Reply codec =
      client_->send("POST", "/api/experiments", admin_, R"({"name":"x","train":{"codec":"zip"}})");
  EXPECT_EQ(codec.status, 400u);
  EXPECT_EQ(codec.json().as_object().at("field").as_string(), "train.codec");
  EXPECT_EQ(client_->send("GET", "/api/experiments/x/metrics?max_points=abc", admin_).status, 400u);
  EXPECT_EQ(client_->send("PUT", "/api/experiments", admin_, "{}").status, 405u);
  // The server is still fine.
  EXPECT_EQ(client_->send("GET", "/api/health").status, 200u);
}

TEST_F(HttpApiTest, CreateReportsEveryConfigErrorAtOnce) {
  // Four problems in three sections, as JSON fields and as TOML: all of them come back, in
  // key order then validation order, each with its field; `error` and `field` are the first.
  const std::vector<std::pair<std::string, std::string>> want = {
      {"model.depth", "request: unknown key model.depth"},
      {"train.beta1", "request: train.beta1 = 1.5 must be in [0, 1)"},
      {"diloco.rounds", "request: diloco.rounds = 0 must be >= 1"},
      {"diloco.outer_momentum", "request: diloco.outer_momentum = 1.5 must be in [0, 1)"},
  };
  for (const std::string& body :
       {std::string(R"({"name":"x","model":{"depth":3},"train":{"beta1":1.5},)"
                    R"("diloco":{"rounds":0,"outer_momentum":1.5}})"),
        std::string(R"({"config_toml":"name = \"x\"\n[model]\ndepth = 3\n[train]\nbeta1 = 1.5\n)"
                    R"([diloco]\nrounds = 0\nouter_momentum = 1.5\n"})")}) {
    Reply r = client_->send("POST", "/api/experiments", admin_, body);
    ASSERT_EQ(r.status, 400u) << r.body;
    const json::value v = r.json();
    ASSERT_TRUE(v.is_object()) << r.body;
    const json::object& o = v.as_object();
    const json::array& errors = o.at("errors").as_array();
    ASSERT_EQ(errors.size(), want.size()) << r.body;
    for (size_t i = 0; i < want.size(); ++i) {
      const json::object& e = errors[i].as_object();
      EXPECT_EQ(e.at("field").as_string(), want[i].first) << r.body;
      EXPECT_EQ(std::string(e.at("error").as_string()).substr(0, want[i].second.size()),
                want[i].second)
          << r.body;
    }
    EXPECT_EQ(o.at("error"), errors[0].as_object().at("error"));
    EXPECT_EQ(o.at("field").as_string(), "model.depth");
  }
  // A TOML syntax error is the one error; so is a body that is not a config.
  Reply syntax = client_->send("POST", "/api/experiments", admin_, R"({"config_toml":"name = "})");
  EXPECT_EQ(syntax.status, 400u);
  EXPECT_EQ(syntax.json().as_object().at("errors").as_array().size(), 1u) << syntax.body;
  Reply both =
      client_->send("POST", "/api/experiments", admin_, R"({"config_toml":"","name":"x"})");
  EXPECT_EQ(both.json().as_object().at("errors").as_array().size(), 1u) << both.body;
  // Named by the field sent besides config_toml.
  EXPECT_EQ(both.json().as_object().at("field").as_string(), "name") << both.body;
  EXPECT_EQ(both.error(),
            "request: name cannot be sent with config_toml: send config_toml alone or the config "
            "fields without it");
  // Nothing was created.
  EXPECT_EQ(client_->send("GET", "/api/experiments/x", admin_).status, 404u);
}

// A config with thousands of unknown keys answers the first 100 errors and how many more there
// are, not one entry per key.
TEST_F(HttpApiTest, ConfigErrorListIsCapped) {
  std::string toml = "name = \\\"x\\\"\\n";
  for (int i = 0; i < 3000; ++i) {
    toml += 'k';  // appended piece by piece: GCC 12 misreads "k" + std::to_string(i) (-Wrestrict)
    toml += std::to_string(i);
    toml += " = 1\\n";
  }
  Reply r = client_->send("POST", "/api/experiments", admin_, R"({"config_toml":")" + toml + "\"}");
  ASSERT_EQ(r.status, 400u) << r.body.substr(0, 300);
  const json::value answer = r.json();
  const json::array& errors = answer.as_object().at("errors").as_array();
  ASSERT_EQ(errors.size(), 101u);
  EXPECT_EQ(errors[99].as_object().at("field").as_string().subview().substr(0, 1), "k");
  const json::object& more = errors[100].as_object();
  EXPECT_FALSE(more.contains("field"));
  EXPECT_EQ(std::string(more.at("error").as_string()).rfind("… and 2900 more errors", 0), 0u)
      << more.at("error");
  EXPECT_LT(r.body.size(), 20000u);
}

// Strings with control characters (NUL included): created, shown and stored as given, and the
// stored TOML reads back to the same config (it once could not be parsed at all).
TEST_F(HttpApiTest, ControlCharactersInConfigStringsRoundTrip) {
  std::string body = small_config("ctl");
  body.replace(body.find(R"("data":{"split":"iid"})"), 22,
               R"("data":{"split":"iid","source":"text",)"
               R"("paths":["a\u0001b","\u0000","t\tq\"\\","\u007f","\u00e9"]})");
  Reply c = client_->send("POST", "/api/experiments", admin_, body);
  ASSERT_EQ(c.status, 201u) << c.body;
  const std::vector<std::string> want = {
      "a\x01"
      "b",
      std::string(1, '\0'), "t\tq\"\\", "\x7f", "\xc3\xa9"};
  // The paths as the stored TOML holds them (the JSON view of a config leaves data.paths out).
  auto paths_of = [](const json::value& experiment) {
    auto config = parse_experiment_config(
        std::string(experiment.as_object().at("config_toml").as_string()), "stored");
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    return config.ok() ? config->data.paths : std::vector<std::string>{};
  };
  EXPECT_EQ(paths_of(c.json()), want);
  // The create answer shows the stored config, not defaults: the model and source asked for.
  const json::value created = c.json();
  const json::object& config = created.as_object().at("config").as_object();
  EXPECT_EQ(config.at("model").as_object().at("dim").to_number<int>(), 16);
  EXPECT_EQ(config.at("data").as_object().at("source").as_string(), "text");
  Reply g = client_->send("GET", "/api/experiments/ctl", viewer_);
  ASSERT_EQ(g.status, 200u) << g.body;
  EXPECT_EQ(paths_of(g.json()), want);
  const std::string stored(g.json().as_object().at("config_toml").as_string());
  auto back = parse_experiment_config(stored, "stored");
  ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << stored;
  EXPECT_EQ(back->data.paths, want);
  EXPECT_EQ(to_toml(*back), stored);
  EXPECT_NE(stored.find(R"(paths = ["a\u0001b", "\u0000", "t\tq\"\\", "\u007F", "é"])"),
            std::string::npos)
      << stored;
  // The stored TOML, sent back as config_toml under another name, creates the same config.
  json::object again{{"config_toml", std::regex_replace(stored, std::regex("name = \"ctl\""),
                                                        "name = \"ctl-2\"")}};
  Reply t = client_->send("POST", "/api/experiments", admin_, json::serialize(again));
  ASSERT_EQ(t.status, 201u) << t.body;
  EXPECT_EQ(paths_of(t.json()), want);
  EXPECT_EQ(client_->send("GET", "/api/experiments/ctl/checkpoint", viewer_).status, 200u);
}

// HEAD is GET without the body: static files and API routes, with the GET answer's
// Content-Length; an event stream answers its headers and ends. "bearer" in any case works.
TEST_F(HttpApiTest, HeadRequestsAndTheBearerSchemeInAnyCase) {
  const Reply page = client_->send("GET", "/");
  const Reply head = client_->send("HEAD", "/");
  EXPECT_EQ(head.status, 200u);
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(head.header("Content-Length"), std::to_string(page.body.size()));
  EXPECT_EQ(head.header("ETag"), page.header("ETag"));
  EXPECT_EQ(head.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(client_->send("HEAD", "/missing.html").status, 404u);
  const Reply list = client_->send("GET", "/api/experiments", viewer_);
  const Reply list_head = client_->send("HEAD", "/api/experiments", viewer_);
  EXPECT_EQ(list_head.status, 200u);
  EXPECT_TRUE(list_head.body.empty());
  EXPECT_EQ(list_head.header("Content-Length"), std::to_string(list.body.size()));
  EXPECT_EQ(client_->send("HEAD", "/api/experiments").status, 401u);
  const Reply events = client_->send("HEAD", "/api/events", viewer_);
  EXPECT_EQ(events.status, 200u);
  EXPECT_EQ(events.content_type, "text/event-stream");
  for (const char* scheme : {"bearer", "BEARER", "bEaReR"}) {
    Reply r = client_->send("GET", "/api/whoami", "", "", false,
                            {{"Authorization", std::string(scheme) + " " + viewer_}});
    EXPECT_EQ(r.status, 200u) << scheme << ": " << r.body;
  }
  EXPECT_EQ(
      client_->send("GET", "/api/whoami", "", "", false, {{"Authorization", "Bearers " + viewer_}})
          .status,
      401u);
}

// A token revoked while its event stream is open: the stream ends, and the events that follow
// the revocation never reach it.
TEST_F(HttpApiTest, RevokingATokenEndsItsEventStreams) {
  Reply made = client_->send("POST", "/api/tokens", admin_, R"({"role":"viewer","label":"tv"})");
  ASSERT_EQ(made.status, 201u) << made.body;
  const std::string token(made.json().as_object().at("token").as_string());
  const std::string hash(made.json().as_object().at("hash").as_string());
  // Two streams of the revoked token and one of another token, which stays open.
  auto open_stream = [&](const std::string& t, const std::string& target) {
    auto s = std::make_unique<EventStream>(transport::ca_cert_path(tls_), server_->port());
    s->open(target, t);
    return s;
  };
  auto doomed = open_stream(token, "/api/events");
  auto doomed_too = open_stream(token, "/api/events");
  auto kept = open_stream(viewer_, "/api/events");
  for (auto* s : {doomed.get(), doomed_too.get(), kept.get()})
    ASSERT_NE(s->read_until(": connected", std::chrono::seconds(5)).find(": connected"),
              std::string::npos);
  ASSERT_EQ(client_->send("DELETE", "/api/tokens/" + hash.substr(0, 16), admin_).status, 200u);
  // An event after the revocation: the kept stream receives it, the others are closed.
  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, small_config("after")).status, 201u);
  EXPECT_NE(
      kept->read_until("event: experiments", std::chrono::seconds(5)).find("event: experiments"),
      std::string::npos);
  for (auto* s : {doomed.get(), doomed_too.get()}) {
    const std::string rest = s->read_until("event: experiments", std::chrono::seconds(5));
    EXPECT_TRUE(s->closed()) << "the revoked token's stream is still open";
    EXPECT_EQ(rest.find("event: experiments"), std::string::npos) << rest;
  }
  // Reconnecting with the revoked token is refused.
  EXPECT_EQ(client_->send("GET", "/api/events", token).status, 401u);
}

// Event streams are written by hand, apart from every other response: they carry the same
// security headers, with the same values, as an API answer (docs/dashboard.md).
TEST_F(HttpApiTest, EventStreamsCarryTheSecurityHeaders) {
  const Reply answer = client_->send("GET", "/api/whoami", viewer_);
  ASSERT_EQ(answer.status, 200u);
  ASSERT_EQ(client_->send("POST", "/api/experiments", admin_, small_config("sse")).status, 201u);
  for (const std::string target : {"/api/events", "/api/experiments/sse/events"}) {
    EventStream stream(transport::ca_cert_path(tls_), server_->port());
    stream.open(target, viewer_);
    const std::string text = stream.read_until(": connected", std::chrono::seconds(5));
    const size_t end = text.find("\r\n\r\n");
    ASSERT_NE(end, std::string::npos) << target << ": " << text;
    const std::string head = text.substr(0, end + 2);
    EXPECT_NE(head.find("Content-Type: text/event-stream\r\n"), std::string::npos) << head;
    const Reply head_only = client_->send("HEAD", target, viewer_);
    for (const char* name : {"X-Content-Type-Options", "Referrer-Policy",
                             "Strict-Transport-Security", "Content-Security-Policy"}) {
      const std::string value = answer.header(name);
      ASSERT_FALSE(value.empty()) << name;
      EXPECT_NE(head.find(std::string(name) + ": " + value + "\r\n"), std::string::npos)
          << target << " lacks " << name << ": " << head;
      EXPECT_EQ(head_only.header(name), value) << "HEAD " << target;
    }
  }
}

TEST_F(HttpApiTest, OversizeBodyIs413) {
  const std::string big(200 * 1024, 'x');
  Reply r = client_->send("POST", "/api/experiments", admin_, big);
  EXPECT_EQ(r.status, 413u);
  EXPECT_NE(r.error().find("larger than"), std::string::npos);
  EXPECT_EQ(client_->send("GET", "/api/health").status, 200u);
}

TEST_F(HttpApiTest, UnknownIdsAndRoutesAre404) {
  for (const char* p : {"/api/experiments/nope", "/api/experiments/nope/nodes",
                        "/api/experiments/nope/rounds", "/api/experiments/nope/metrics",
                        "/api/experiments/nope/checkpoint", "/api/experiments/nope/events",
                        "/api/experiments/bad%2Fid", "/api/experiments/..", "/api/nothing"})
    EXPECT_EQ(client_->send("GET", p, viewer_).status, 404u) << p;
  for (const char* a : {"start", "pause", "resume", "stop"})
    EXPECT_EQ(client_->send("POST", std::string("/api/experiments/nope/") + a, admin_).status,
              404u);
  EXPECT_EQ(client_->send("DELETE", "/api/experiments/nope", admin_).status, 404u);
}

TEST_F(HttpApiTest, StaticFilesRefusePathTraversal) {
  Reply index = client_->send("GET", "/");
  EXPECT_EQ(index.status, 200u);
  EXPECT_EQ(index.content_type, "text/html; charset=utf-8");
  Reply js = client_->send("GET", "/sub/app.js");
  EXPECT_EQ(js.status, 200u);
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  for (const char* p : {"/../secret.txt", "/sub/../../secret.txt", "/%2e%2e/secret.txt",
                        "/sub/%2E%2E/%2E%2E/secret.txt", "/..%2fsecret.txt", "/%2e%2e%5csecret.txt",
                        "/notes.key", "/.hidden", "/sub//app.js", "/index.html%00.js", "/%zz"}) {
    Reply r = client_->send("GET", p);
    EXPECT_TRUE(r.status == 404u || r.status == 400u) << p << " -> " << r.status;
    EXPECT_EQ(r.body.find("SECRET"), std::string::npos) << p;
  }
  EXPECT_EQ(client_->send("POST", "/index.html", admin_, "{}").status, 405u);
}

// gunzip with zlib (inflate with gzip header detection).
static std::string gunzip(const std::string& in) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return "";
  std::string out(in.size() * 50 + 1024, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  out.resize(z.total_out);
  inflateEnd(&z);
  return rc == Z_STREAM_END ? out : "";
}

TEST_F(HttpApiTest, StaticFilesAreGzippedWithETagsAnd304) {
  const std::string script = big_script();
  // Without Accept-Encoding: the plain file, with a strong ETag.
  Reply plain = client_->send("GET", "/big.js");
  ASSERT_EQ(plain.status, 200u);
  EXPECT_EQ(plain.body, script);
  EXPECT_EQ(plain.header("Content-Encoding"), "");
  const std::string etag = plain.header("ETag");
  EXPECT_EQ(etag.size(), 34u) << etag;
  EXPECT_EQ(etag.front(), '"');
  EXPECT_EQ(plain.header("Vary"), "Accept-Encoding");
  EXPECT_EQ(plain.header("Cache-Control"), "no-cache");
  // Accepting gzip: compressed, smaller, decompressing to the file; its own tag.
  const std::vector<std::pair<std::string, std::string>> gz = {
      {"Accept-Encoding", "gzip, deflate, br"}};
  Reply zipped = client_->send("GET", "/big.js", "", "", false, gz);
  ASSERT_EQ(zipped.status, 200u);
  EXPECT_EQ(zipped.header("Content-Encoding"), "gzip");
  EXPECT_LT(zipped.body.size(), script.size() / 4);
  EXPECT_EQ(gunzip(zipped.body), script);
  const std::string gz_etag = zipped.header("ETag");
  EXPECT_NE(gz_etag, etag);
  EXPECT_EQ(zipped.header("Content-Type"), "text/javascript; charset=utf-8");
  // A second request comes from the cache: the same bytes.
  EXPECT_EQ(client_->send("GET", "/big.js", "", "", false, gz).body, zipped.body);
  // gzip;q=0 refuses it; "*" accepts it.
  EXPECT_EQ(client_->send("GET", "/big.js", "", "", false, {{"Accept-Encoding", "gzip;q=0"}})
                .header("Content-Encoding"),
            "");
  EXPECT_EQ(client_->send("GET", "/big.js", "", "", false, {{"Accept-Encoding", "*"}})
                .header("Content-Encoding"),
            "gzip");
  // If-None-Match with the current tag: 304 without a body, the tag repeated.
  Reply same = client_->send("GET", "/big.js", "", "", false, {{"If-None-Match", etag}});
  EXPECT_EQ(same.status, 304u);
  EXPECT_TRUE(same.body.empty());
  EXPECT_EQ(same.header("ETag"), etag);
  std::vector<std::pair<std::string, std::string>> revalidate = gz;
  revalidate.emplace_back("If-None-Match", "\"other\", W/" + gz_etag);
  EXPECT_EQ(client_->send("GET", "/big.js", "", "", false, revalidate).status, 304u);
  EXPECT_EQ(client_->send("GET", "/big.js", "", "", false, {{"If-None-Match", "*"}}).status, 304u);
  // Another tag (the file changed since): the whole file.
  EXPECT_EQ(client_->send("GET", "/big.js", "", "", false, {{"If-None-Match", "\"stale\""}}).status,
            200u);
  // The file changes: a new tag, the old one no longer matches, the compressed form is redone.
  std::ofstream(dir_.sub("web") + "/big.js") << script << "console.log('changed');\n";
  Reply changed = client_->send("GET", "/big.js", "", "", false, {{"If-None-Match", etag}});
  EXPECT_EQ(changed.status, 200u);
  EXPECT_NE(changed.header("ETag"), etag);
  Reply changed_gz = client_->send("GET", "/big.js", "", "", false, gz);
  EXPECT_EQ(gunzip(changed_gz.body), script + "console.log('changed');\n");
  // Tiny files and API answers are not compressed; API answers have no ETag.
  EXPECT_EQ(client_->send("GET", "/sub/app.js", "", "", false, gz).header("Content-Encoding"), "");
  Reply api = client_->send("GET", "/api/health", "", "", false, gz);
  EXPECT_EQ(api.header("ETag"), "");
  EXPECT_EQ(api.header("Content-Encoding"), "");
}

TEST(StaticFilesHeaders, AcceptEncodingAndIfNoneMatch) {
  EXPECT_TRUE(http::accepts_gzip("gzip"));
  EXPECT_TRUE(http::accepts_gzip("deflate, GZIP;q=0.5"));
  EXPECT_TRUE(http::accepts_gzip("br, *"));
  EXPECT_FALSE(http::accepts_gzip(""));
  EXPECT_FALSE(http::accepts_gzip("br, deflate"));
  EXPECT_FALSE(http::accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(http::accepts_gzip("gzip; q=0.0"));
  EXPECT_TRUE(http::etag_matches("\"a\"", "\"a\""));
  EXPECT_TRUE(http::etag_matches("\"x\", W/\"a\"", "\"a\""));
  EXPECT_TRUE(http::etag_matches("*", "\"a\""));
  EXPECT_FALSE(http::etag_matches("\"b\"", "\"a\""));
  EXPECT_FALSE(http::etag_matches("\"a-gz\"", "\"a\""));
}

TEST_F(HttpApiTest, TokensAreStoredHashed) {
  auto tokens = store_->list_tokens();
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 2u);
  for (const auto& t : *tokens) {
    EXPECT_NE(t.hash, admin_);
    EXPECT_NE(t.hash, viewer_);
    EXPECT_EQ(t.hash.size(), 64u);
  }
  EXPECT_TRUE(store_->load_token(http::hash_token(admin_)).ok());
  ASSERT_TRUE(store_->delete_token(http::hash_token(viewer_)).ok());
  EXPECT_EQ(client_->send("GET", "/api/experiments", viewer_).status, 401u);
}

// Tokens through the API (the store is locked to `atoll token` while the coordinator runs).
TEST_F(HttpApiTest, AdminCreatesAndRevokesTokensThroughTheApi) {
  Reply c = client_->send("POST", "/api/tokens", admin_, R"({"role":"viewer","label":"alice"})");
  ASSERT_EQ(c.status, 201u) << c.body;
  const json::value created = c.json();
  ASSERT_TRUE(created.is_object()) << c.body;
  const auto& o = created.as_object();
  const std::string token(o.at("token").as_string());
  const std::string hash(o.at("hash").as_string());
  EXPECT_EQ(o.at("role").as_string(), "viewer");
  EXPECT_EQ(o.at("label").as_string(), "alice");
  EXPECT_EQ(hash, http::hash_token(token));
  // It works at once, with the role asked for.
  Reply who = client_->send("GET", "/api/whoami", token);
  ASSERT_EQ(who.status, 200u) << who.body;
  EXPECT_EQ(who.json().as_object().at("role").as_string(), "viewer");
  EXPECT_EQ(client_->send("POST", "/api/experiments", token, small_config("x")).status, 403u);
  // The list shows hashes, never tokens.
  Reply list = client_->send("GET", "/api/tokens", admin_);
  ASSERT_EQ(list.status, 200u) << list.body;
  EXPECT_EQ(list.json().as_object().at("tokens").as_array().size(), 3u);
  EXPECT_EQ(list.body.find(token), std::string::npos);
  EXPECT_EQ(list.body.find(admin_), std::string::npos);
  // Revoked by a hash prefix: the token stops working.
  Reply d = client_->send("DELETE", "/api/tokens/" + hash.substr(0, 12), admin_);
  ASSERT_EQ(d.status, 200u) << d.body;
  EXPECT_EQ(d.json().as_object().at("revoked").as_string(), hash);
  EXPECT_EQ(client_->send("GET", "/api/whoami", token).status, 401u);
  EXPECT_EQ(client_->send("DELETE", "/api/tokens/" + hash.substr(0, 12), admin_).status, 404u);
  // A new admin token can change things.
  Reply a = client_->send("POST", "/api/tokens", admin_, R"({"role":"admin"})");
  ASSERT_EQ(a.status, 201u) << a.body;
  EXPECT_EQ(client_
                ->send("POST", "/api/experiments",
                       std::string(a.json().as_object().at("token").as_string()), small_config("y"))
                .status,
            201u);
}

TEST_F(HttpApiTest, TokenRoutesAreAdminOnlyAndValidated) {
  const std::string viewer_hash = http::hash_token(viewer_);
  // Viewers can neither list, create nor revoke tokens (not even their own).
  EXPECT_EQ(client_->send("GET", "/api/tokens", viewer_).status, 403u);
  EXPECT_EQ(client_->send("POST", "/api/tokens", viewer_, R"({"role":"admin"})").status, 403u);
  EXPECT_EQ(client_->send("DELETE", "/api/tokens/" + viewer_hash, viewer_).status, 403u);
  EXPECT_EQ(client_->send("GET", "/api/tokens").status, 401u);
  EXPECT_EQ(client_->send("POST", "/api/tokens", "", R"({"role":"viewer"})").status, 401u);
  // Bad bodies: 400 with the field.
  for (const char* body : {"", "{", "[]", "{}", R"({"role":"root"})", R"({"role":1})",
                           R"({"role":"viewer","label":7})", R"({"role":"viewer","x":1})"}) {
    Reply r = client_->send("POST", "/api/tokens", admin_, body);
    EXPECT_EQ(r.status, 400u) << body << " -> " << r.body;
    EXPECT_FALSE(r.error().empty()) << body;
  }
  Reply long_label =
      client_->send("POST", "/api/tokens", admin_,
                    R"({"role":"viewer","label":")" + std::string(300, 'x') + R"("})");
  EXPECT_EQ(long_label.status, 400u) << long_label.body;
  // Bad prefixes, unknown hashes, wrong methods.
  EXPECT_EQ(client_->send("DELETE", "/api/tokens/abc", admin_).status, 400u);
  EXPECT_EQ(client_->send("DELETE", "/api/tokens/ZZZZZZZZZZ", admin_).status, 400u);
  EXPECT_EQ(client_->send("DELETE", "/api/tokens/" + std::string(16, '0'), admin_).status, 404u);
  EXPECT_EQ(client_->send("PUT", "/api/tokens", admin_, "{}").status, 405u);
  EXPECT_EQ(client_->send("GET", "/api/tokens/" + viewer_hash, admin_).status, 405u);
  // The last admin token cannot be revoked; the viewer's can.
  Reply last = client_->send("DELETE", "/api/tokens/" + http::hash_token(admin_), admin_);
  EXPECT_EQ(last.status, 409u) << last.body;
  EXPECT_EQ(client_->send("GET", "/api/whoami", admin_).status, 200u);
  EXPECT_EQ(client_->send("DELETE", "/api/tokens/" + viewer_hash, admin_).status, 200u);
  auto tokens = store_->list_tokens();
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->size(), 1u);
}

}  // namespace
}  // namespace atl::coordinator
