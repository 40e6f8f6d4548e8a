// bench/transport/floor: the throughput of a bare gRPC stream over TLS 1.3 on loopback, the
// reference for bench/transport. Server and client in one process (as many threads as gRPC
// starts), 1 MiB chunks of `bytes` fields, no checksums, no hashing, receive buffers touched
// before the first stream. Each stream is timed on the client: a pull from the call to its last
// chunk, a push from the call to the server's answer.
//
// Usage: stream_floor CERT KEY STREAM_BYTES STREAMS   (prints one JSON object)
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "stream_floor.grpc.pb.h"

namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

std::string read_file(const char* path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class FloorService final : public stream_floor::Floor::Service {
 public:
  explicit FloorService(size_t bytes) : source_(bytes, 'x'), sink_(bytes, 'y') {
    for (size_t i = 0; i < source_.size(); ++i)
      source_[i] = static_cast<char>((i * 2654435761u) >> 13);
  }
  const std::string& source() const { return source_; }

  grpc::Status Pull(grpc::ServerContext*, const stream_floor::Request* req,
                    grpc::ServerWriter<stream_floor::Chunk>* writer) override {
    stream_floor::Chunk chunk;
    for (uint64_t off = 0; off < req->bytes(); off += kChunkBytes) {
      const size_t n = std::min<uint64_t>(kChunkBytes, req->bytes() - off);
      chunk.set_data(source_.data() + off % source_.size(), n);
      if (!writer->Write(chunk)) break;
    }
    return grpc::Status::OK;
  }
  grpc::Status Push(grpc::ServerContext*, grpc::ServerReader<stream_floor::Chunk>* reader,
                    stream_floor::Request* answer) override {
    stream_floor::Chunk chunk;
    uint64_t received = 0;
    while (reader->Read(&chunk)) {
      const std::string& d = chunk.data();
      std::memcpy(sink_.data() + received % sink_.size(), d.data(),
                  std::min(d.size(), sink_.size() - received % sink_.size()));
      received += d.size();
    }
    answer->set_bytes(received);
    return grpc::Status::OK;
  }

 private:
  std::string source_, sink_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: stream_floor CERT KEY STREAM_BYTES STREAMS\n");
    return 2;
  }
  const std::string cert = read_file(argv[1]), key = read_file(argv[2]);
  const uint64_t bytes = std::strtoull(argv[3], nullptr, 10);
  const int streams = std::atoi(argv[4]);
  FloorService service(bytes);
  grpc::SslServerCredentialsOptions server_tls;
  server_tls.pem_key_cert_pairs.push_back({key, cert});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::SslServerCredentials(server_tls), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(4 << 20);
  auto server = builder.BuildAndStart();
  grpc::SslCredentialsOptions client_tls;
  client_tls.pem_root_certs = cert;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(4 << 20);
  args.SetSslTargetNameOverride("localhost");
  auto stub = stream_floor::Floor::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port), grpc::SslCredentials(client_tls), args));
  std::string sink(bytes, 'z');
  std::vector<double> pulls, pushes;
  for (int s = 0; s < streams; ++s) {
    {
      grpc::ClientContext ctx;
      stream_floor::Request req;
      req.set_bytes(bytes);
      const auto t0 = std::chrono::steady_clock::now();
      auto reader = stub->Pull(&ctx, req);
      stream_floor::Chunk chunk;
      uint64_t got = 0;
      while (reader->Read(&chunk)) {
        std::memcpy(sink.data() + got, chunk.data().data(),
                    std::min(chunk.data().size(), sink.size() - got));
        got += chunk.data().size();
      }
      const grpc::Status st = reader->Finish();
      if (!st.ok() || got != bytes) {
        std::fprintf(stderr, "stream_floor: pull failed: %s\n", st.error_message().c_str());
        return 1;
      }
      pulls.push_back(seconds_since(t0));
    }
    {
      grpc::ClientContext ctx;
      stream_floor::Request answer;
      const auto t0 = std::chrono::steady_clock::now();
      auto writer = stub->Push(&ctx, &answer);
      stream_floor::Chunk chunk;
      for (uint64_t off = 0; off < bytes; off += kChunkBytes) {
        chunk.set_data(service.source().data() + off, std::min<uint64_t>(kChunkBytes, bytes - off));
        if (!writer->Write(chunk)) break;
      }
      writer->WritesDone();
      const grpc::Status st = writer->Finish();
      if (!st.ok() || answer.bytes() != bytes) {
        std::fprintf(stderr, "stream_floor: push failed: %s\n", st.error_message().c_str());
        return 1;
      }
      pushes.push_back(seconds_since(t0));
    }
  }
  server->Shutdown();
  auto list = [](const std::vector<double>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
  };
  std::printf("{\"stream_bytes\": %llu, \"pull_stream_seconds\": %s, "
              "\"push_stream_seconds\": %s}\n",
              static_cast<unsigned long long>(bytes), list(pulls).c_str(), list(pushes).c_str());
  return 0;
}
