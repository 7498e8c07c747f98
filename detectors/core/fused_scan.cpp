// Fused pack + scan. Why it is written this way:
//
// - One kernel, one driver: scan_chunk computes the statistics of one chunk, scan_in_chunks walks
//   the tensors chunk by chunk, and each public function only says what else happens to a chunk
//   (pack: store it to the wire after the scan; unpack: load it from the wire before; scan:
//   nothing; scale_and_scan: scale it in place before). The same values therefore give
//   bit-identical stats from every entry point.
// - Tensors are processed in chunks of kChunk elements. The scan of a chunk pulls it into L1, and
//   the wire store (memcpy for fp32 at scale 1, a conversion loop otherwise) reads it from there:
//   each gradient byte comes from memory once, and the copy is glibc's memcpy, which picks the
//   widest stores of the CPU at run time. (Writing the copy inside the scan loop is no faster:
//   GCC's loop distribution turns it into a memcpy of the whole tensor anyway, a second pass.)
// - The scan loop is branch-free so that GCC's vectorizer (-O2 in GCC 12 with the very-cheap cost
//   model, -O3 in Release) turns it into SIMD code without -ffast-math:
//     * max |x| as an integer max of (bits & 0x7fffffff) (for non-negative IEEE floats integer
//       order is numeric order). NaN and inf have abs bits >= 0x7f800000, so the same max also
//       tells whether the chunk is all finite, and the hot loop needs no per-element
//       (bits & 0x7f800000) == 0x7f800000 test. A chunk that fails it (a detection: rare) is
//       rescanned by scan_chunk_masked, which ORs that test into a flag and masks those elements
//       out of the norm and the max with integer ANDs (nf - 1 is all ones for a finite element).
//       A ternary would not do: a select feeding FP math gets jump-threaded into control flow
//       that GCC's if-conversion will not undo for trapping FP ops, and the loop stays scalar.
//     * squares accumulated in double. A finite fp32 value squared overflows fp32 (3e38^2), and
//       float partial sums would also lose squares below ~1e-19 to underflow; in double the
//       product of two fp32 values is exact (24 + 24 < 53 bits), so only the sums round.
//     * kLanes independent accumulators (acc[j] gets elements j, j + kLanes, ... in order) and a
//       fixed tree at the end: no single sum is reassociated, so the vectorizer needs no
//       -ffast-math and the result is bit-for-bit the same with SSE2, AVX2 or AVX-512. The max is
//       kept per lane too; a scalar max would be reduced horizontally in every block, a serial
//       chain longer than the block's loads.
// - fp32 wire with scale == 1 copies bits, so NaN payloads (signalling ones included) reach the
//   all-reduce buffer unchanged; x * 1.0f would quiet them.
// - fp16/bf16 conversions are pure bit/FP arithmetic (no table, no branch), vectorizable.

#include "detectors/core/fused_scan.h"

#include <cstring>

// Runtime dispatch of the hot scan to the widest SIMD the CPU has (GCC function multi-versioning,
// resolved once at load time through an ifunc). The library is built for baseline x86-64 (SSE2),
// where the float -> double conversions and the emulated 32-bit integer max make the scan slower
// than the copy's memory traffic; the AVX-512 version scans ~40 GB/s from L1 on the reference
// host, three times the copy's bandwidth. Results are bit-identical across
// versions: no sum is reassociated, and a fused multiply-add of v * v + acc rounds exactly like
// the separate ops because v * v of an fp32 value is exact in double.
// Define NANCHAOS_SCAN_CLONES empty on the command line to build one version only.
#if defined(NANCHAOS_SCAN_CLONES)
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define NANCHAOS_SCAN_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define NANCHAOS_SCAN_CLONES
#endif

namespace nanchaos::harness {
namespace {

// The bit helpers and the narrow-type conversions (inline, so the store loops vectorize as before).
using namespace wire_detail;  // NOLINT(google-build-using-namespace): bits_of, to_half, kExpMask...
// Elements per block = independent accumulators. The inner loop over one block is a plain
// elementwise loop (acc[j] += x[i + j]^2) that the vectorizer handles at -O2 without reassociating
// any sum; a block this long is not fully unrolled at -O3 (which would leave an SLP form that
// GCC 12 does not vectorize).
constexpr size_t kLanes = 32;
// Elements per chunk: 8 KB of input plus its wire copy stay in L1 (48 KB on the reference host)
// between the scan and the store. 1024..8192 measured within noise of each other.
constexpr size_t kChunk = 2048;

// ---- the scan ----

struct Partial {
  bool nonfinite = false;
  uint32_t max_abs_bits = 0;
  double sq = 0;
};

// Slow path, taken only for a chunk that holds a NaN or inf (i.e. on a detection): the same
// statistics restricted to the finite elements. Branch-free too, but speed does not matter here.
Partial scan_chunk_masked(const float* x, size_t n) {
  uint32_t flag = 0;
  int32_t mx = 0;
  double acc[kLanes] = {};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = bits_of(x[i]);
    const uint32_t nf = (s & kExpMask) == kExpMask;
    flag |= nf;
    // nf - 1 is all ones for a finite element, 0 for a non-finite one.
    const int32_t a = static_cast<int32_t>(s & kAbsMask & (nf - 1u));
    mx = a > mx ? a : mx;
    const double v = float_of(static_cast<uint32_t>(a));
    acc[i % kLanes] += v * v;
  }
  for (size_t w = kLanes / 2; w > 0; w /= 2) {
    for (size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return {flag != 0, static_cast<uint32_t>(mx), acc[0]};
}

// Software prefetch kPrefetchBytes ahead of the block being scanned (its two cache lines). The
// hardware prefetcher alone leaves the scan at ~0.8 of a plain read's bandwidth on the reference
// host: the scan's arithmetic (one float -> double conversion and one FMA per element) fills the
// out-of-order window, so fewer loads are in flight than in a bare read. 2 KB ahead brings it to
// the read's speed (1 KB: ~0.97, 2-4 KB: ~1.0). Past the end of a tensor it fetches a few
// useless lines (a prefetch never faults; the address is computed as an integer, so no pointer
// leaves its object). Harmless where the chunk is already in L1 (unpack_and_scan).
constexpr uintptr_t kPrefetchBytes = 2048;

inline void prefetch_ahead(const float* p) {
#if defined(__GNUC__)
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) + kPrefetchBytes;
  __builtin_prefetch(reinterpret_cast<const void*>(a));
  __builtin_prefetch(reinterpret_cast<const void*>(a + 64));
#else
  (void)p;
#endif
}

// Hot path: statistics of one chunk assuming it is all finite. The max of the abs bit patterns
// covers every element, so a NaN/inf (abs bits >= 0x7f800000) shows up in it for free, and then
// the chunk is rescanned with the mask. Per element that is one AND, one integer max and one
// multiply-add in double; lane j of acc only ever adds elements j, j + kLanes, ..., in order.
NANCHAOS_SCAN_CLONES Partial scan_chunk(const float* __restrict x, size_t n) {
  // Per-lane max as well as per-lane sums: a scalar max would be reduced horizontally inside every
  // block, a serial chain that costs more than the block's loads.
  int32_t mx[kLanes] = {};  // abs bits fit int32 (NaN is 0x7fffffff at most): signed max is fine
  double acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    prefetch_ahead(x + i);
    for (size_t j = 0; j < kLanes; ++j) {
      const int32_t a = static_cast<int32_t>(bits_of(x[i + j]) & kAbsMask);
      mx[j] = a > mx[j] ? a : mx[j];
      const double v = x[i + j];
      acc[j] += v * v;
    }
  }
  for (size_t j = 0; j < n - i; ++j) {  // the last partial block, n - i < kLanes
    const int32_t a = static_cast<int32_t>(bits_of(x[i + j]) & kAbsMask);
    mx[j] = a > mx[j] ? a : mx[j];
    const double v = x[i + j];
    acc[j] += v * v;
  }
  int32_t m = 0;
  for (size_t j = 0; j < kLanes; ++j) m = mx[j] > m ? mx[j] : m;
  if (static_cast<uint32_t>(m) >= kExpMask) return scan_chunk_masked(x, n);
  // Fixed pairwise combination: the result depends only on the data, not on the SIMD width.
  for (size_t w = kLanes / 2; w > 0; w /= 2) {
    for (size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return {false, static_cast<uint32_t>(m), acc[0]};
}

void add(Partial* total, const Partial& p) {
  total->nonfinite |= p.nonfinite;
  total->sq += p.sq;
  if (p.max_abs_bits > total->max_abs_bits) total->max_abs_bits = p.max_abs_bits;
}

// ---- wire conversions of one chunk (the chunk is in L1 by then) ----

void store_chunk(const float* __restrict x, size_t n, float scale, float* __restrict out) {
  if (scale == 1.0f) {
    std::memcpy(out, x, n * sizeof(float));  // bit-exact, NaN payloads included
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale;
}

void store_chunk(const float* __restrict x, size_t n, float scale, uint16_t* __restrict out,
                 WireType wire) {
  if (wire == WireType::kFp16) {
    for (size_t i = 0; i < n; ++i) out[i] = to_half(x[i] * scale);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = to_bf16(x[i] * scale);
  }
}

void load_chunk(const void* in, size_t offset, size_t n, WireType wire, float scale,
                float* __restrict out) {
  if (wire == WireType::kFp32) {
    const float* src = static_cast<const float*>(in) + offset;
    if (scale == 1.0f) {
      std::memcpy(out, src, n * sizeof(float));
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = src[i] * scale;
    }
    return;
  }
  const uint16_t* src = static_cast<const uint16_t*>(in) + offset;
  if (wire == WireType::kFp16) {
    for (size_t i = 0; i < n; ++i) out[i] = from_half(src[i]) * scale;
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = from_bf16(src[i]) * scale;
  }
}

// In place x[i] *= scale (the post-reduce division of an fp32 bucket). The same multiply as
// load_chunk's fp32 path, so scale_and_scan writes what unpack_and_scan would. Blocked only to
// prefetch ahead like the scan (0.55 -> 0.65 of the plain read's bandwidth for the whole
// scale_and_scan on the reference host); the inner loop is a plain elementwise multiply.
void scale_chunk(float* __restrict x, size_t n, float scale) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    prefetch_ahead(x + i);
    for (size_t j = 0; j < kLanes; ++j) x[i + j] *= scale;
  }
  for (; i < n; ++i) x[i] *= scale;
}

void reset(ScanStats* stats, size_t tensors) {
  stats->nonfinite.assign(tensors, 0);
  stats->first_nonfinite = -1;
  stats->sq_norm = 0;
  stats->sq_norms.assign(tensors, 0.0);
  stats->max_abs = 0;
}

void merge(ScanStats* stats, size_t t, const Partial& p, uint32_t* max_bits) {
  if (p.nonfinite) {
    stats->nonfinite[t] = 1;
    if (stats->first_nonfinite < 0) stats->first_nonfinite = static_cast<int>(t);
  }
  stats->sq_norm += p.sq;
  stats->sq_norms[t] = p.sq;
  if (p.max_abs_bits > *max_bits) *max_bits = p.max_abs_bits;
}

// The one driver behind every public scan: walks the tensors in order, each in chunks of kChunk
// elements, and folds the chunk statistics into `*stats`. `chunk(x, offset, m)` handles the m
// elements at x (offset = their index in the concatenation of all tensors, i.e. in the all-reduce
// buffer) and returns scan_chunk of the values the stats describe; it is where a pass puts its
// copy or conversion next to the scan, so the chunk goes through L1 once. Since every entry point
// goes through here with the same chunking and the same kernel, equal values give bit-identical
// stats whichever entry point scanned them.
template <typename Span, typename ChunkFn>
void scan_in_chunks(const std::vector<Span>& spans, ScanStats* stats, ChunkFn&& chunk) {
  reset(stats, spans.size());
  uint32_t max_bits = 0;
  size_t offset = 0;  // in elements of the concatenation
  for (size_t t = 0; t < spans.size(); ++t) {
    const Span& g = spans[t];
    Partial tensor;
    for (size_t c = 0; c < g.n; c += kChunk) {
      const size_t m = g.n - c < kChunk ? g.n - c : kChunk;
      add(&tensor, chunk(g.data + c, offset + c, m));
    }
    merge(stats, t, tensor, &max_bits);
    offset += g.n;
  }
  stats->max_abs = float_of(max_bits);
}

}  // namespace

void pack_and_scan(const std::vector<ConstSpan>& grads, void* out, WireType wire, float scale,
                   ScanStats* stats) {
  scan_in_chunks(grads, stats, [&](const float* x, size_t offset, size_t m) {
    const Partial p = scan_chunk(x, m);  // pulls the chunk into L1 ...
    if (wire == WireType::kFp32) {       // ... where the store reads it again
      store_chunk(x, m, scale, static_cast<float*>(out) + offset);
    } else {
      store_chunk(x, m, scale, static_cast<uint16_t*>(out) + offset, wire);
    }
    return p;
  });
}

void unpack_and_scan(const void* in, WireType wire, float scale, const std::vector<MutSpan>& out,
                     ScanStats* stats) {
  scan_in_chunks(out, stats, [&](float* o, size_t offset, size_t m) {
    load_chunk(in, offset, m, wire, scale, o);
    return scan_chunk(o, m);  // the outputs just written, still in L1
  });
}

void scan(const std::vector<ConstSpan>& grads, ScanStats* stats) {
  scan_in_chunks(grads, stats, [](const float* x, size_t, size_t m) { return scan_chunk(x, m); });
}

void scale_and_scan(const std::vector<MutSpan>& grads, float scale, ScanStats* stats) {
  if (scale == 1.0f) {  // nothing to write: x * 1.0f would only quiet signalling NaNs
    scan_in_chunks(grads, stats, [](float* x, size_t, size_t m) { return scan_chunk(x, m); });
    return;
  }
  scan_in_chunks(grads, stats, [&](float* x, size_t, size_t m) {
    scale_chunk(x, m, scale);
    return scan_chunk(x, m);  // the scaled values, still in L1
  });
}

}  // namespace nanchaos::harness
