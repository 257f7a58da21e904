#include "csrc/pjrt/compile_options.h"

namespace tpu::pjrt {

namespace {
constexpr int kWireVarint = 0;
constexpr int kWireLengthDelimited = 2;

// CompileOptionsProto
constexpr int kExecutableBuildOptions = 3;
constexpr int kCompilePortableExecutable = 4;
// ExecutableBuildOptionsProto
constexpr int kNumReplicas = 4;
constexpr int kNumPartitions = 5;
constexpr int kOptimizationLevel = 24;
}  // namespace

void ProtoWriter::raw_varint(uint64_t value) {
  while (value >= 0x80) {
    data_.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  data_.push_back(static_cast<char>(value));
}

void ProtoWriter::varint(int field, uint64_t value) {
  raw_varint((static_cast<uint64_t>(field) << 3) | kWireVarint);
  raw_varint(value);
}

void ProtoWriter::bytes(int field, std::string_view value) {
  raw_varint((static_cast<uint64_t>(field) << 3) | kWireLengthDelimited);
  raw_varint(value.size());
  data_.append(value.data(), value.size());
}

std::string CompileOptions::serialize() const {
  ProtoWriter build;
  build.int64(kNumReplicas, num_replicas);
  build.int64(kNumPartitions, num_partitions);
  if (optimization_level >= 0) build.int64(kOptimizationLevel, optimization_level);
  ProtoWriter options;
  options.message(kExecutableBuildOptions, build);
  if (portable) options.boolean(kCompilePortableExecutable, true);
  return options.data();
}

}  // namespace tpu::pjrt
