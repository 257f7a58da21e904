// A minimal protobuf writer and the xla.CompileOptionsProto we send with
// every PJRT_Client_Compile.
//
// Field numbers (from xla/pjrt/proto/compile_options.proto):
//   CompileOptionsProto: executable_build_options = 3,
//                        compile_portable_executable = 4
//   ExecutableBuildOptionsProto: device_ordinal = 1, num_replicas = 4,
//                        num_partitions = 5, optimization_level = 24
// An empty proto crashes the CPU plugin: replica and partition counts must be
// set explicitly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tpu::pjrt {

// Appends protobuf wire-format fields to a byte string.
class ProtoWriter {
 public:
  void varint(int field, uint64_t value);
  void int64(int field, int64_t value) { varint(field, static_cast<uint64_t>(value)); }
  void boolean(int field, bool value) { varint(field, value ? 1 : 0); }
  void bytes(int field, std::string_view value);
  void message(int field, const ProtoWriter& sub) { bytes(field, sub.data()); }
  const std::string& data() const { return data_; }

 private:
  void raw_varint(uint64_t value);
  std::string data_;
};

struct CompileOptions {
  int64_t num_replicas = 1;
  int64_t num_partitions = 1;
  // Compiled for no fixed device; the device is chosen at execution.
  bool portable = false;
  // -1: the plugin's default.
  int64_t optimization_level = -1;

  std::string serialize() const;
};

}  // namespace tpu::pjrt
