// The StableHLO builder: emitted text (golden) and shape checks. No device.
#include <gtest/gtest.h>

#include "csrc/hlo/builder.h"

namespace tpu::hlo {
namespace {

TEST(Types, MlirSpelling) {
  EXPECT_EQ((Type{DType::F32, {2, 3}}.str()), "tensor<2x3xf32>");
  EXPECT_EQ((Type{DType::Pred, {}}.str()), "tensor<i1>");
  EXPECT_EQ((Type{DType::U8, {0}}.str()), "tensor<0xui8>");
  EXPECT_EQ((Type{DType::BF16, {4}}.str()), "tensor<4xbf16>");
  EXPECT_EQ(byte_width(DType::Pred), 1);
  EXPECT_EQ(byte_width(DType::C64), 8);
}

TEST(Builder, GoldenModule) {
  Builder b;
  Value x = b.param({DType::F32, {2, 3}});
  Value y = b.param({DType::F32, {3}});
  Value s = b.add(x, b.broadcast_to(y, {2, 3}));
  const std::string m = b.module({s}, {{0, 0}});
  const std::string want =
      "module @tpu_program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
      "  func.func public @main(%v0: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}, %v1: tensor<3xf32>) "
      "-> (tensor<2x3xf32>) {\n"
      "    %v2 = \"stablehlo.broadcast_in_dim\"(%v1) {broadcast_dimensions = array<i64: 1>} : "
      "(tensor<3xf32>) -> tensor<2x3xf32>\n"
      "    %v3 = \"stablehlo.add\"(%v0, %v2) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>\n"
      "    \"func.return\"(%v3) : (tensor<2x3xf32>) -> ()\n"
      "  }\n"
      "}\n";
  EXPECT_EQ(m, want);
  // Without donations the parameter carries no attribute.
  EXPECT_EQ(b.module({s}).find("tf.aliasing_output"), std::string::npos);
}

TEST(Builder, ConstantsAreExact) {
  Builder b;
  Value one = b.constant(1.0, DType::F32);
  Value big = b.constant_int(-9007199254740993LL, DType::I64);
  Value u = b.constant_int(-1, DType::U8);
  const std::string m = b.module({one, big, u});
  EXPECT_NE(m.find("dense<0x3F800000> : tensor<f32>"), std::string::npos) << m;
  EXPECT_NE(m.find("dense<-9007199254740993> : tensor<i64>"), std::string::npos) << m;
  EXPECT_NE(m.find("dense<255> : tensor<ui8>"), std::string::npos) << m;
}

TEST(Builder, ReductionRegion) {
  Builder b;
  Value x = b.param({DType::F32, {4, 5}});
  Value r = b.reduce(x, b.constant(0, DType::F32), {1}, "stablehlo.add");
  EXPECT_EQ(b.dims(r), (Dims{4}));
  const std::string m = b.module({r});
  EXPECT_NE(m.find("^bb0(%v"), std::string::npos) << m;
  EXPECT_NE(m.find("\"stablehlo.return\""), std::string::npos) << m;
  EXPECT_NE(m.find("dimensions = array<i64: 1>"), std::string::npos) << m;
}

TEST(Builder, ShapeInference) {
  Builder b;
  Value x = b.param({DType::F32, {2, 3, 4}});
  EXPECT_EQ(b.dims(b.transpose(x, {2, 0, 1})), (Dims{4, 2, 3}));
  EXPECT_EQ(b.dims(b.slice(x, {0, 1, 0}, {2, 3, 4}, {1, 1, 3})), (Dims{2, 2, 2}));
  EXPECT_EQ(b.dims(b.pad(x, b.constant(0, DType::F32), {0, 1, 0}, {0, 0, 2}, {0, 1, 0})), (Dims{2, 6, 6}));
  Value y = b.param({DType::F32, {2, 4, 5}});
  EXPECT_EQ(b.dims(b.dot_general(x, y, {0}, {0}, {2}, {1}, DType::F32)), (Dims{2, 3, 5}));
  EXPECT_EQ(b.dims(b.concatenate({x, x}, 1)), (Dims{2, 6, 4}));
  Value conv_in = b.param({DType::F32, {1, 3, 8, 8}});
  Value k = b.param({DType::F32, {5, 3, 3, 3}});
  EXPECT_EQ(b.dims(b.convolution(conv_in, k, {2, 2}, {{1, 1}, {1, 1}}, {1, 1}, {1, 1}, 1, 1, DType::F32)),
            (Dims{1, 5, 4, 4}));
  EXPECT_EQ(b.dims(b.bitcast_convert(b.param({DType::F32, {3}}), DType::U8)), (Dims{3, 4}));
}

TEST(Builder, ChecksOperands) {
  Builder b;
  Value x = b.param({DType::F32, {2, 3}});
  Value y = b.param({DType::F32, {3, 2}});
  EXPECT_THROW(b.add(x, y), std::logic_error);
  EXPECT_THROW(b.reshape(x, {5}), std::logic_error);
  EXPECT_THROW(b.broadcast_to(x, {3, 3}), std::logic_error);
  EXPECT_THROW(b.slice(x, {0, 0}, {3, 3}), std::logic_error);
  EXPECT_THROW(b.type(Value{99}), std::logic_error);
}

TEST(Builder, ReferencesSurviveGrowth) {
  // Helpers take dims by reference from the value table while adding values.
  Builder b;
  Value x = b.param({DType::F32, {7, 9}});
  for (int i = 0; i < 1000; ++i) x = b.add(x, b.zeros(b.type(x)));
  EXPECT_EQ(b.dims(x), (Dims{7, 9}));
}

}  // namespace
}  // namespace tpu::hlo

// The module object: functions once per name in the order added, main with
// its donation attributes, and the module attributes.
TEST(ModuleTest, FunctionsMainAndAttributes) {
  tpu::hlo::Module m("m", {2, 1});
  int made = 0;
  EXPECT_TRUE(m.add_function("f", [&] { ++made; return std::string("  func.func private @f() -> () {}\n"); }));
  EXPECT_FALSE(m.add_function("f", [&] { return std::string("other"); }));
  EXPECT_EQ(made, 0);  // texts are made only when the module's text is
  tpu::hlo::Type t{tpu::hlo::DType::F32, {2}};
  m.set_main({{"a", t, 0}, {"b", t, -1}}, {t}, "    %r = \"stablehlo.add\"(%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n", {"r"});
  const std::string text = m.text();
  EXPECT_EQ(made, 1);
  EXPECT_NE(text.find("mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32"), std::string::npos);
  EXPECT_NE(text.find("%a: tensor<2xf32> {tf.aliasing_output = 0 : i32}, %b: tensor<2xf32>)"), std::string::npos);
  EXPECT_LT(text.find("@f()"), text.find("@main("));
  EXPECT_NE(text.find("\"func.return\"(%r) : (tensor<2xf32>) -> ()"), std::string::npos);
}
