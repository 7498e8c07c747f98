// The final-state digest (harness/common/digest.h): XXH3-64 of a framed stream, pinned to literals
// computed independently with libxxhash's one-shot XXH3_64bits over the same framed bytes.
#include "harness/common/digest.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace nanchaos::harness {
namespace {

TEST(Digest, EmptyStreamIsXxh3OfNothing) {
  Digest d;
  EXPECT_EQ(d.value(), 0x2d06800538d394c2ull);  // XXH3_64bits("", 0), xxHash's own test value
  EXPECT_EQ(d.hex(), "2d06800538d394c2");
}

TEST(Digest, FixedTensorPinnedToLiteral) {
  // float32 [0, 1, ..., 7] as a rank's runner digests a parameter: its contiguous CPU bytes as
  // one framed piece (8-byte little-endian length 32, then the 32 bytes).
  const auto t = torch::arange(8, torch::kFloat).contiguous();
  Digest d;
  d.add_bytes(t.data_ptr(), t.nbytes());
  EXPECT_EQ(d.hex(), "8644403fff343766");
}

TEST(Digest, FramesSeparatePiecesAndIntegersAreLittleEndian) {
  Digest abc;
  abc.add_bytes("abc", 3);
  EXPECT_EQ(abc.hex(), "7ef7c2a83cf8364e");
  Digest ab_c, a_bc;
  ab_c.add_bytes("ab", 2).add_bytes("c", 1);
  a_bc.add_bytes("a", 1).add_bytes("bc", 2);
  EXPECT_NE(ab_c.value(), a_bc.value());
  EXPECT_NE(ab_c.value(), abc.value());
  // Integers are fixed-width: 3 then 4 differs from 4 then 3 and from 34.
  Digest x, y, z;
  x.add_u64(3).add_u64(4);
  y.add_u64(4).add_u64(3);
  z.add_u64(34);
  EXPECT_NE(x.value(), y.value());
  EXPECT_NE(x.value(), z.value());
}

TEST(Digest, OneFlippedBitChangesTheDigest) {
  auto t = torch::arange(1024, torch::kFloat).contiguous();
  Digest before;
  before.add_bytes(t.data_ptr(), t.nbytes());
  reinterpret_cast<unsigned char*>(t.data_ptr())[2048] ^= 1;
  Digest after;
  after.add_bytes(t.data_ptr(), t.nbytes());
  EXPECT_NE(before.value(), after.value());
}

}  // namespace
}  // namespace nanchaos::harness
