// RAII owners of a PJRT client, its devices and its executables.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "csrc/pjrt/api.h"
#include "csrc/pjrt/buffer.h"

namespace tpu::pjrt {

// One addressable device of a client. Owned by the client.
class Device {
 public:
  Device(const Api* api, c::PJRT_Device* device);
  c::PJRT_Device* raw() const { return device_; }
  int id() const { return id_; }
  int local_hardware_id() const { return local_hardware_id_; }
  // e.g. "cpu", "TPU v5 lite", "NVIDIA H200".
  const std::string& kind() const { return kind_; }
  const std::string& debug_string() const { return debug_string_; }

  struct MemoryStats {
    int64_t bytes_in_use = 0;
    std::optional<int64_t> peak_bytes_in_use;
    std::optional<int64_t> bytes_limit;
  };
  // nullopt where the plugin does not report memory statistics.
  std::optional<MemoryStats> memory_stats() const;

 private:
  const Api* api_;
  c::PJRT_Device* device_;
  int id_ = 0;
  int local_hardware_id_ = -1;
  std::string kind_;
  std::string debug_string_;
};

class Executable {
 public:
  Executable(std::shared_ptr<const Api> api, c::PJRT_LoadedExecutable* exe);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  size_t num_outputs() const { return num_outputs_; }

  // Run on `device` (nullptr: the device it was compiled for) with `args`.
  // Returns immediately; the outputs become ready asynchronously.
  // Arguments the program aliases to outputs (tf.aliasing_output) are
  // donated: their buffers must not be used afterwards.
  // `done`, when given, receives an event that fires when the execution
  // finished (and carries its error).
  std::vector<BufferPtr> execute(const std::vector<c::PJRT_Buffer*>& args, const Device* device,
                                 std::unique_ptr<Event>* done = nullptr);

  // Run a replicated program (compiled for several replicas) on the
  // devices of its device assignment at once: `args[r]` are replica r's
  // arguments; returns each replica's outputs, and in `done` (when given)
  // each replica's completion.
  std::vector<std::vector<BufferPtr>> execute_replicated(const std::vector<std::vector<c::PJRT_Buffer*>>& args,
                                                         std::vector<std::unique_ptr<Event>>* done = nullptr);

  // Bytes that Client::deserialize turns back into this executable.
  std::string serialize() const;

 private:
  std::shared_ptr<const Api> api_;
  c::PJRT_LoadedExecutable* loaded_;
  size_t num_outputs_ = 0;
};

using ExecutablePtr = std::shared_ptr<Executable>;

struct NamedOption {
  std::string name;
  int64_t value;
};

class Client {
 public:
  static std::unique_ptr<Client> create(std::shared_ptr<const Api> api,
                                        const std::vector<NamedOption>& options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Api& api() const { return *api_; }
  const std::vector<Device>& devices() const { return devices_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }

  // A buffer of `dims` holding `data` (dense, row-major) on `device`. The host
  // memory may be reused as soon as this returns.
  BufferPtr from_host(const void* data, c::PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                      const Device& device) const;
  // The same, where the buffer may alias `data` instead of copying it (the
  // CPU plugin does, when the memory is suitably aligned): `data` must stay
  // unchanged and alive until `release` runs, which the plugin calls once it
  // no longer needs the host memory (at once when it copied).
  BufferPtr adopt_host(const void* data, c::PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                       const Device& device, std::function<void()> release) const;

  // Compile a StableHLO module (MLIR text or bytecode).
  ExecutablePtr compile(const std::string& mlir, const std::string& compile_options) const;
  ExecutablePtr deserialize(const std::string& bytes) const;

 private:
  Client(std::shared_ptr<const Api> api, c::PJRT_Client* client);
  // from_host and adopt_host: with `release`, the host memory is handed to
  // it when the plugin is done with it; without, the call waits for that.
  BufferPtr buffer_from_host(const void* data, c::PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                             const Device& device, bool zero_copy, std::function<void()> release) const;
  std::shared_ptr<const Api> api_;
  c::PJRT_Client* client_;
  std::vector<Device> devices_;
  std::string platform_name_;
  std::string platform_version_;
};

}  // namespace tpu::pjrt
