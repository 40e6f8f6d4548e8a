#include "transport/payload_digest.h"

#include <xxhash.h>

#include <cstdlib>

namespace atl::transport {

struct PayloadHasher::State {
  struct Free {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, Free> xxh;
};

PayloadHasher::PayloadHasher() : state_(std::make_unique<State>()) {
  state_->xxh.reset(XXH3_createState());
  // Only allocation can fail here; without the state there is nothing sensible to return.
  if (!state_->xxh || XXH3_128bits_reset(state_->xxh.get()) != XXH_OK) std::abort();
}
PayloadHasher::~PayloadHasher() = default;
PayloadHasher::PayloadHasher(PayloadHasher&&) noexcept = default;
PayloadHasher& PayloadHasher::operator=(PayloadHasher&&) noexcept = default;

void PayloadHasher::update(const void* data, size_t n) {
  if (n > 0) (void)XXH3_128bits_update(state_->xxh.get(), data, n);
}

namespace {
std::string canonical(XXH128_hash_t h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static_assert(sizeof(c.digest) == kPayloadDigestBytes);
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof(c.digest));
}
}  // namespace

std::string PayloadHasher::finish() {
  return canonical(XXH3_128bits_digest(state_->xxh.get()));
}

std::string payload_digest(std::string_view bytes) {
  return canonical(XXH3_128bits(bytes.data(), bytes.size()));
}

}  // namespace atl::transport
