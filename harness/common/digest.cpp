// XXH3-64 digest of a framed byte stream; see digest.h.
#include "harness/common/digest.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <new>

namespace nanchaos::harness {

struct Digest::State {
  XXH3_state_t* xxh = nullptr;
};

Digest::Digest() : state_(std::make_unique<State>()) {
  state_->xxh = XXH3_createState();
  if (!state_->xxh) throw std::bad_alloc();
  XXH3_64bits_reset(state_->xxh);
}

Digest::~Digest() { XXH3_freeState(state_->xxh); }

Digest& Digest::add_u64(uint64_t v) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
  XXH3_64bits_update(state_->xxh, le, sizeof(le));
  return *this;
}

Digest& Digest::add_bytes(const void* data, size_t n) {
  add_u64(uint64_t(n));
  if (n > 0) XXH3_64bits_update(state_->xxh, data, n);
  return *this;
}

uint64_t Digest::value() const { return XXH3_64bits_digest(state_->xxh); }

std::string Digest::hex() const { return fmt::format("{:016x}", value()); }

}  // namespace nanchaos::harness
