#include "csrc/pjrt/client.h"

namespace tpu::pjrt {

Device::Device(const Api* api, c::PJRT_Device* device) : api_(api), device_(device) {
  auto desc = make_args<c::PJRT_Device_GetDescription_Args>();
  desc.device = device;
  TPU_PJRT_CALL(*api, Device_GetDescription, desc);

  auto id = make_args<c::PJRT_DeviceDescription_Id_Args>();
  id.device_description = desc.device_description;
  TPU_PJRT_CALL(*api, DeviceDescription_Id, id);
  id_ = id.id;

  auto kind = make_args<c::PJRT_DeviceDescription_Kind_Args>();
  kind.device_description = desc.device_description;
  TPU_PJRT_CALL(*api, DeviceDescription_Kind, kind);
  kind_.assign(kind.device_kind, kind.device_kind_size);

  auto debug = make_args<c::PJRT_DeviceDescription_DebugString_Args>();
  debug.device_description = desc.device_description;
  TPU_PJRT_CALL(*api, DeviceDescription_DebugString, debug);
  debug_string_.assign(debug.debug_string, debug.debug_string_size);

  auto hw = make_args<c::PJRT_Device_LocalHardwareId_Args>();
  hw.device = device;
  TPU_PJRT_CALL(*api, Device_LocalHardwareId, hw);
  local_hardware_id_ = hw.local_hardware_id;
}

std::optional<Device::MemoryStats> Device::memory_stats() const {
  if (!TPU_PJRT_HAS(*api_, Device_MemoryStats)) return std::nullopt;
  auto args = make_args<c::PJRT_Device_MemoryStats_Args>();
  args.device = device_;
  try {
    TPU_PJRT_CALL(*api_, Device_MemoryStats, args);
  } catch (const Error&) {
    return std::nullopt;  // e.g. UNIMPLEMENTED on the CPU plugin
  }
  MemoryStats stats;
  stats.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) stats.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  return stats;
}

Executable::Executable(std::shared_ptr<const Api> api, c::PJRT_LoadedExecutable* exe)
    : api_(std::move(api)), loaded_(exe) {
  auto get = make_args<c::PJRT_LoadedExecutable_GetExecutable_Args>();
  get.loaded_executable = loaded_;
  TPU_PJRT_CALL(*api_, LoadedExecutable_GetExecutable, get);
  auto n = make_args<c::PJRT_Executable_NumOutputs_Args>();
  n.executable = get.executable;
  try {
    TPU_PJRT_CALL(*api_, Executable_NumOutputs, n);
  } catch (...) {
    auto destroy = make_args<c::PJRT_Executable_Destroy_Args>();
    destroy.executable = get.executable;
    api_->raw()->PJRT_Executable_Destroy(&destroy);
    throw;
  }
  num_outputs_ = n.num_outputs;
  auto destroy = make_args<c::PJRT_Executable_Destroy_Args>();
  destroy.executable = get.executable;
  TPU_PJRT_CALL(*api_, Executable_Destroy, destroy);
}

Executable::~Executable() {
  auto args = make_args<c::PJRT_LoadedExecutable_Destroy_Args>();
  args.executable = loaded_;
  TPU_PJRT_DESTROY(*api_, LoadedExecutable_Destroy, args);
}

std::vector<std::vector<BufferPtr>> Executable::execute_replicated(
    const std::vector<std::vector<c::PJRT_Buffer*>>& args, std::vector<std::unique_ptr<Event>>* done) {
  const size_t n = args.size();
  auto options = make_args<c::PJRT_ExecuteOptions>();
  std::vector<std::vector<c::PJRT_Buffer*>> outputs(n, std::vector<c::PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<c::PJRT_Buffer* const*> arg_lists(n);
  std::vector<c::PJRT_Buffer**> out_lists(n);
  for (size_t r = 0; r < n; ++r) {
    arg_lists[r] = args[r].data();
    out_lists[r] = outputs[r].data();
  }
  std::vector<c::PJRT_Event*> events(n, nullptr);
  auto exec = make_args<c::PJRT_LoadedExecutable_Execute_Args>();
  exec.executable = loaded_;
  exec.options = &options;
  exec.argument_lists = arg_lists.data();
  exec.num_devices = n;
  exec.num_args = n ? args[0].size() : 0;
  exec.output_lists = out_lists.data();
  exec.execute_device = nullptr;
  if (done != nullptr) exec.device_complete_events = events.data();
  TPU_PJRT_CALL(*api_, LoadedExecutable_Execute, exec);
  if (done != nullptr) {
    done->clear();
    for (c::PJRT_Event* e : events) done->push_back(e ? std::make_unique<Event>(api_.get(), e) : nullptr);
  }
  std::vector<std::vector<BufferPtr>> result(n);
  for (size_t r = 0; r < n; ++r) {
    for (c::PJRT_Buffer* b : outputs[r]) result[r].push_back(std::make_shared<Buffer>(api_, b));
  }
  return result;
}

std::vector<BufferPtr> Executable::execute(const std::vector<c::PJRT_Buffer*>& args,
                                           const Device* device, std::unique_ptr<Event>* done) {
  auto options = make_args<c::PJRT_ExecuteOptions>();
  std::vector<c::PJRT_Buffer*> outputs(num_outputs_, nullptr);
  c::PJRT_Buffer* const* arg_list = args.data();
  c::PJRT_Buffer** out_list = outputs.data();

  auto exec = make_args<c::PJRT_LoadedExecutable_Execute_Args>();
  exec.executable = loaded_;
  exec.options = &options;
  exec.argument_lists = &arg_list;
  exec.num_devices = 1;
  exec.num_args = args.size();
  exec.output_lists = &out_list;
  exec.execute_device = device != nullptr ? device->raw() : nullptr;
  c::PJRT_Event* event = nullptr;
  if (done != nullptr) exec.device_complete_events = &event;
  TPU_PJRT_CALL(*api_, LoadedExecutable_Execute, exec);
  if (done != nullptr && event != nullptr) *done = std::make_unique<Event>(api_.get(), event);

  std::vector<BufferPtr> result;
  result.reserve(outputs.size());
  for (c::PJRT_Buffer* b : outputs) result.push_back(std::make_shared<Buffer>(api_, b));
  return result;
}

std::string Executable::serialize() const {
  auto get = make_args<c::PJRT_LoadedExecutable_GetExecutable_Args>();
  get.loaded_executable = loaded_;
  TPU_PJRT_CALL(*api_, LoadedExecutable_GetExecutable, get);
  auto args = make_args<c::PJRT_Executable_Serialize_Args>();
  args.executable = get.executable;
  std::string bytes;
  try {
    TPU_PJRT_CALL(*api_, Executable_Serialize, args);
    bytes.assign(args.serialized_bytes, args.serialized_bytes_size);
    if (args.serialized_executable_deleter != nullptr) {
      args.serialized_executable_deleter(args.serialized_executable);
    }
  } catch (...) {
    auto destroy = make_args<c::PJRT_Executable_Destroy_Args>();
    destroy.executable = get.executable;
    api_->raw()->PJRT_Executable_Destroy(&destroy);
    throw;
  }
  auto destroy = make_args<c::PJRT_Executable_Destroy_Args>();
  destroy.executable = get.executable;
  TPU_PJRT_CALL(*api_, Executable_Destroy, destroy);
  return bytes;
}

std::unique_ptr<Client> Client::create(std::shared_ptr<const Api> api,
                                       const std::vector<NamedOption>& options) {
  std::vector<c::PJRT_NamedValue> values;
  for (const NamedOption& o : options) {
    auto v = make_args<c::PJRT_NamedValue>();
    v.name = o.name.c_str();
    v.name_size = o.name.size();
    v.type = c::PJRT_NamedValue_kInt64;
    v.int64_value = o.value;
    v.value_size = 1;
    values.push_back(v);
  }
  auto args = make_args<c::PJRT_Client_Create_Args>();
  args.create_options = values.data();
  args.num_options = values.size();
  TPU_PJRT_CALL(*api, Client_Create, args);
  return std::unique_ptr<Client>(new Client(std::move(api), args.client));
}

Client::Client(std::shared_ptr<const Api> api, c::PJRT_Client* client)
    : api_(std::move(api)), client_(client) {
  auto devs = make_args<c::PJRT_Client_AddressableDevices_Args>();
  devs.client = client_;
  TPU_PJRT_CALL(*api_, Client_AddressableDevices, devs);
  for (size_t i = 0; i < devs.num_addressable_devices; ++i) {
    devices_.emplace_back(api_.get(), devs.addressable_devices[i]);
  }
  auto name = make_args<c::PJRT_Client_PlatformName_Args>();
  name.client = client_;
  TPU_PJRT_CALL(*api_, Client_PlatformName, name);
  platform_name_.assign(name.platform_name, name.platform_name_size);
  auto version = make_args<c::PJRT_Client_PlatformVersion_Args>();
  version.client = client_;
  TPU_PJRT_CALL(*api_, Client_PlatformVersion, version);
  platform_version_.assign(version.platform_version, version.platform_version_size);
}

Client::~Client() {
  auto args = make_args<c::PJRT_Client_Destroy_Args>();
  args.client = client_;
  TPU_PJRT_DESTROY(*api_, Client_Destroy, args);
}

BufferPtr Client::buffer_from_host(const void* data, c::PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                                   const Device& device, bool zero_copy, std::function<void()> release) const {
  auto args = make_args<c::PJRT_Client_BufferFromHostBuffer_Args>();
  args.client = client_;
  args.data = data;
  args.type = type;
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = zero_copy ? c::PJRT_HostBufferSemantics_kImmutableZeroCopy
                                         : c::PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  args.device = device.raw();
  TPU_PJRT_CALL(*api_, Client_BufferFromHostBuffer, args);
  auto buffer = std::make_shared<Buffer>(api_, args.buffer);
  buffer->set_donatable(!zero_copy);
  if (args.done_with_host_buffer == nullptr) {
    if (release) release();
  } else if (release) {
    Event(api_.get(), args.done_with_host_buffer).on_ready(std::move(release));
  } else {
    Event(api_.get(), args.done_with_host_buffer).await();
  }
  return buffer;
}

BufferPtr Client::from_host(const void* data, c::PJRT_Buffer_Type type,
                            const std::vector<int64_t>& dims, const Device& device) const {
  return buffer_from_host(data, type, dims, device, /*zero_copy=*/false, nullptr);
}

BufferPtr Client::adopt_host(const void* data, c::PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                             const Device& device, std::function<void()> release) const {
  return buffer_from_host(data, type, dims, device, /*zero_copy=*/true, std::move(release));
}

ExecutablePtr Client::compile(const std::string& mlir, const std::string& compile_options) const {
  static const char kFormat[] = "mlir";
  auto program = make_args<c::PJRT_Program>();
  program.code = const_cast<char*>(mlir.data());
  program.code_size = mlir.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  auto args = make_args<c::PJRT_Client_Compile_Args>();
  args.client = client_;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  TPU_PJRT_CALL(*api_, Client_Compile, args);
  return std::make_shared<Executable>(api_, args.executable);
}

ExecutablePtr Client::deserialize(const std::string& bytes) const {
  auto args = make_args<c::PJRT_Executable_DeserializeAndLoad_Args>();
  args.client = client_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  TPU_PJRT_CALL(*api_, Executable_DeserializeAndLoad, args);
  return std::make_shared<Executable>(api_, args.loaded_executable);
}

}  // namespace tpu::pjrt
