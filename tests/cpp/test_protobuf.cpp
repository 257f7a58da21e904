// The protobuf writer and the compile options it encodes.
#include <gtest/gtest.h>

#include "csrc/pjrt/compile_options.h"

namespace tpu::pjrt {
namespace {

std::string hex(const std::string& s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    snprintf(buf, sizeof(buf), "%02x", c);
    out += buf;
  }
  return out;
}

TEST(ProtoWriter, VarintsUseSevenBitGroups) {
  ProtoWriter w;
  w.varint(1, 300);  // tag 0x08, then 300 = 0b10_0101100 -> ac 02
  EXPECT_EQ(hex(w.data()), "08ac02");
}

TEST(ProtoWriter, NegativeIntsAreTenBytes) {
  ProtoWriter w;
  w.int64(2, -1);
  EXPECT_EQ(hex(w.data()), "10ffffffffffffffffff01");
}

TEST(ProtoWriter, LengthDelimitedFields) {
  ProtoWriter inner;
  inner.varint(1, 7);
  ProtoWriter outer;
  outer.message(5, inner);
  outer.bytes(6, "ab");
  EXPECT_EQ(hex(outer.data()), "2a020807" "32026162");
}

TEST(CompileOptions, DefaultIsOneReplicaOnePartition) {
  // executable_build_options (3) { num_replicas (4): 1, num_partitions (5): 1 }
  EXPECT_EQ(hex(CompileOptions{}.serialize()), "1a0420012801");
}

TEST(CompileOptions, PortableAndOptimizationLevel) {
  CompileOptions o;
  o.portable = true;
  o.optimization_level = 2;
  // build options gain field 24 (tag 0xc0 0x01), then field 4 = true.
  EXPECT_EQ(hex(o.serialize()), "1a0720012801c001022001");
}

}  // namespace
}  // namespace tpu::pjrt
