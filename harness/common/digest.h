// The digest of a rank's final state: `params_hash` and `optim_hash` of the `final` event
// (events.h), which the judge compares across ranks for the `consistent` check (SCENARIO_FORMAT.md
// "[expect]"): after a DDP all-reduce every rank must hold bit-identical parameters and optimizer
// state, so one differing byte must change the digest with overwhelming probability.
//
// The hash is XXH3, 64-bit, seed 0 (xxHash 0.8, Debian's libxxhash), over a framed byte stream:
// every piece is its byte count as a little-endian uint64 followed by its bytes, so
// concatenations cannot collide by moving a boundary ("ab"+"c" vs "a"+"bc"). Integers are added
// as 8 little-endian bytes. Written as 16 lower-case hex digits ({:016x}).
//
// A tensor's bytes are its contiguous CPU copy in native order; every host nanchaos supports is
// little-endian, so digests are comparable across hosts and compilers, never across libraries'
// std::hash (which is why it is not used). The Python agent of external jobs digests with its
// own (BLAKE2b) function: digests are compared only between the ranks of one job, which all use
// the same one.
//
// Torch-free. Not thread-safe: one Digest per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace nanchaos::harness {

class Digest {
 public:
  Digest();
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  /// Adds one framed piece: `n` as 8 little-endian bytes, then the `n` bytes at `data`.
  Digest& add_bytes(const void* data, size_t n);
  /// Adds `v` as 8 little-endian bytes (no frame: fixed width).
  Digest& add_u64(uint64_t v);
  /// XXH3-64 of everything added so far (adding more afterwards continues the stream).
  uint64_t value() const;
  /// value() as 16 lower-case hex digits.
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace nanchaos::harness
