// The layout of our PJRT declarations as text, one fact per line, so that a
// test can compare it with an independent description of the ABI:
//   slot PJRT_Client_Compile 200
//   size PJRT_Client_Compile_Args 56
//   field PJRT_Client_Compile_Args.executable 48
#include <cstddef>
#include <string>

#include "csrc/pjrt/pjrt_c_api.h"

namespace tpu {

using namespace pjrt::c;

std::string abi_layout() {
  std::string out;
  auto line = [&](const char* kind, const std::string& name, size_t value) {
    out += kind;
    out += ' ';
    out += name;
    out += ' ';
    out += std::to_string(value);
    out += '\n';
  };
#define TPU_SLOT(name) line("slot", "PJRT_" #name, offsetof(PJRT_Api, PJRT_##name));
  TPU_PJRT_API_SLOTS(TPU_SLOT, TPU_SLOT)
#undef TPU_SLOT
  line("size", "PJRT_Api", sizeof(PJRT_Api));
#define TPU_SIZE(type) line("size", #type, sizeof(type));
#define TPU_FIELD(type, member) line("field", #type "." #member, offsetof(type, member));
  TPU_SIZE(PJRT_Api_Version)
  TPU_FIELD(PJRT_Api_Version, major_version)
  TPU_FIELD(PJRT_Api_Version, minor_version)
  TPU_SIZE(PJRT_NamedValue)
  TPU_FIELD(PJRT_NamedValue, name)
  TPU_FIELD(PJRT_NamedValue, name_size)
  TPU_FIELD(PJRT_NamedValue, type)
  TPU_FIELD(PJRT_NamedValue, int64_value)
  TPU_FIELD(PJRT_NamedValue, value_size)
  TPU_SIZE(PJRT_Error_Destroy_Args)
  TPU_FIELD(PJRT_Error_Destroy_Args, error)
  TPU_SIZE(PJRT_Error_Message_Args)
  TPU_FIELD(PJRT_Error_Message_Args, message)
  TPU_FIELD(PJRT_Error_Message_Args, message_size)
  TPU_SIZE(PJRT_Error_GetCode_Args)
  TPU_FIELD(PJRT_Error_GetCode_Args, code)
  TPU_SIZE(PJRT_Plugin_Initialize_Args)
  TPU_SIZE(PJRT_Plugin_Attributes_Args)
  TPU_FIELD(PJRT_Plugin_Attributes_Args, attributes)
  TPU_FIELD(PJRT_Plugin_Attributes_Args, num_attributes)
  TPU_SIZE(PJRT_Event_Destroy_Args)
  TPU_SIZE(PJRT_Event_IsReady_Args)
  TPU_FIELD(PJRT_Event_IsReady_Args, is_ready)
  TPU_SIZE(PJRT_Event_Error_Args)
  TPU_SIZE(PJRT_Event_Await_Args)
  TPU_SIZE(PJRT_Event_OnReady_Args)
  TPU_FIELD(PJRT_Event_OnReady_Args, callback)
  TPU_FIELD(PJRT_Event_OnReady_Args, user_arg)
  TPU_SIZE(PJRT_Client_Create_Args)
  TPU_FIELD(PJRT_Client_Create_Args, create_options)
  TPU_FIELD(PJRT_Client_Create_Args, num_options)
  TPU_FIELD(PJRT_Client_Create_Args, client)
  TPU_FIELD(PJRT_Client_Create_Args, kv_try_get_user_arg)
  TPU_SIZE(PJRT_Client_Destroy_Args)
  TPU_SIZE(PJRT_Client_PlatformName_Args)
  TPU_FIELD(PJRT_Client_PlatformName_Args, platform_name)
  TPU_FIELD(PJRT_Client_PlatformName_Args, platform_name_size)
  TPU_SIZE(PJRT_Client_PlatformVersion_Args)
  TPU_FIELD(PJRT_Client_PlatformVersion_Args, platform_version_size)
  TPU_SIZE(PJRT_Client_AddressableDevices_Args)
  TPU_FIELD(PJRT_Client_AddressableDevices_Args, addressable_devices)
  TPU_FIELD(PJRT_Client_AddressableDevices_Args, num_addressable_devices)
  TPU_SIZE(PJRT_Program)
  TPU_FIELD(PJRT_Program, code)
  TPU_FIELD(PJRT_Program, code_size)
  TPU_FIELD(PJRT_Program, format)
  TPU_FIELD(PJRT_Program, format_size)
  TPU_SIZE(PJRT_Client_Compile_Args)
  TPU_FIELD(PJRT_Client_Compile_Args, program)
  TPU_FIELD(PJRT_Client_Compile_Args, compile_options)
  TPU_FIELD(PJRT_Client_Compile_Args, compile_options_size)
  TPU_FIELD(PJRT_Client_Compile_Args, executable)
  TPU_SIZE(PJRT_Client_BufferFromHostBuffer_Args)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, data)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, type)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, dims)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, num_dims)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, byte_strides)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, host_buffer_semantics)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, device)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, memory)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, device_layout)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, done_with_host_buffer)
  TPU_FIELD(PJRT_Client_BufferFromHostBuffer_Args, buffer)
  TPU_SIZE(PJRT_DeviceDescription_Id_Args)
  TPU_FIELD(PJRT_DeviceDescription_Id_Args, id)
  TPU_SIZE(PJRT_DeviceDescription_Kind_Args)
  TPU_FIELD(PJRT_DeviceDescription_Kind_Args, device_kind_size)
  TPU_SIZE(PJRT_DeviceDescription_DebugString_Args)
  TPU_FIELD(PJRT_DeviceDescription_DebugString_Args, debug_string_size)
  TPU_SIZE(PJRT_Device_GetDescription_Args)
  TPU_FIELD(PJRT_Device_GetDescription_Args, device_description)
  TPU_SIZE(PJRT_Device_LocalHardwareId_Args)
  TPU_FIELD(PJRT_Device_LocalHardwareId_Args, local_hardware_id)
  TPU_SIZE(PJRT_Device_MemoryStats_Args)
  TPU_FIELD(PJRT_Device_MemoryStats_Args, bytes_in_use)
  TPU_FIELD(PJRT_Device_MemoryStats_Args, peak_bytes_in_use_is_set)
  TPU_FIELD(PJRT_Device_MemoryStats_Args, bytes_limit)
  TPU_FIELD(PJRT_Device_MemoryStats_Args, bytes_limit_is_set)
  TPU_FIELD(PJRT_Device_MemoryStats_Args, peak_allocated_bytes_is_set)
  TPU_SIZE(PJRT_Executable_Destroy_Args)
  TPU_SIZE(PJRT_Executable_NumOutputs_Args)
  TPU_FIELD(PJRT_Executable_NumOutputs_Args, num_outputs)
  TPU_SIZE(PJRT_Executable_Serialize_Args)
  TPU_FIELD(PJRT_Executable_Serialize_Args, serialized_bytes)
  TPU_FIELD(PJRT_Executable_Serialize_Args, serialized_bytes_size)
  TPU_FIELD(PJRT_Executable_Serialize_Args, serialized_executable)
  TPU_FIELD(PJRT_Executable_Serialize_Args, serialized_executable_deleter)
  TPU_SIZE(PJRT_LoadedExecutable_Destroy_Args)
  TPU_SIZE(PJRT_LoadedExecutable_GetExecutable_Args)
  TPU_FIELD(PJRT_LoadedExecutable_GetExecutable_Args, executable)
  TPU_SIZE(PJRT_ExecuteOptions)
  TPU_FIELD(PJRT_ExecuteOptions, launch_id)
  TPU_FIELD(PJRT_ExecuteOptions, non_donatable_input_indices)
  TPU_FIELD(PJRT_ExecuteOptions, num_non_donatable_input_indices)
  TPU_FIELD(PJRT_ExecuteOptions, context)
  TPU_FIELD(PJRT_ExecuteOptions, use_major_to_minor_data_layout_for_callbacks)
  TPU_FIELD(PJRT_ExecuteOptions, num_hlo_output_callbacks)
  TPU_SIZE(PJRT_LoadedExecutable_Execute_Args)
  TPU_FIELD(PJRT_LoadedExecutable_Execute_Args, executable)
  TPU_FIELD(PJRT_LoadedExecutable_Execute_Args, options)
  TPU_FIELD(PJRT_LoadedExecutable_Execute_Args, argument_lists)
  TPU_FIELD(PJRT_LoadedExecutable_Execute_Args, num_devices)
  TPU_FIELD(PJRT_LoadedExecutable_Execute_Args, num_args)
  TPU_FIELD(PJRT_LoadedExecutable_Execute_Args, output_lists)
  TPU_FIELD(PJRT_LoadedExecutable_Execute_Args, device_complete_events)
  TPU_FIELD(PJRT_LoadedExecutable_Execute_Args, execute_device)
  TPU_SIZE(PJRT_Executable_DeserializeAndLoad_Args)
  TPU_FIELD(PJRT_Executable_DeserializeAndLoad_Args, serialized_executable)
  TPU_FIELD(PJRT_Executable_DeserializeAndLoad_Args, serialized_executable_size)
  TPU_FIELD(PJRT_Executable_DeserializeAndLoad_Args, loaded_executable)
  TPU_FIELD(PJRT_Executable_DeserializeAndLoad_Args, overridden_serialized_compile_options)
  TPU_FIELD(PJRT_Executable_DeserializeAndLoad_Args, load_options)
  TPU_SIZE(PJRT_Buffer_Destroy_Args)
  TPU_SIZE(PJRT_Buffer_ElementType_Args)
  TPU_FIELD(PJRT_Buffer_ElementType_Args, type)
  TPU_SIZE(PJRT_Buffer_Dimensions_Args)
  TPU_FIELD(PJRT_Buffer_Dimensions_Args, dims)
  TPU_FIELD(PJRT_Buffer_Dimensions_Args, num_dims)
  TPU_SIZE(PJRT_Buffer_OnDeviceSizeInBytes_Args)
  TPU_FIELD(PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes)
  TPU_SIZE(PJRT_Buffer_CopyToDevice_Args)
  TPU_FIELD(PJRT_Buffer_CopyToDevice_Args, dst_device)
  TPU_FIELD(PJRT_Buffer_CopyToDevice_Args, dst_buffer)
  TPU_SIZE(PJRT_Buffer_ToHostBuffer_Args)
  TPU_FIELD(PJRT_Buffer_ToHostBuffer_Args, src)
  TPU_FIELD(PJRT_Buffer_ToHostBuffer_Args, host_layout)
  TPU_FIELD(PJRT_Buffer_ToHostBuffer_Args, dst)
  TPU_FIELD(PJRT_Buffer_ToHostBuffer_Args, dst_size)
  TPU_FIELD(PJRT_Buffer_ToHostBuffer_Args, event)
  TPU_SIZE(PJRT_Buffer_ReadyEvent_Args)
  TPU_FIELD(PJRT_Buffer_ReadyEvent_Args, event)
#undef TPU_SIZE
#undef TPU_FIELD
  line("enum", "PJRT_Buffer_Type_PRED", PJRT_Buffer_Type_PRED);
  line("enum", "PJRT_Buffer_Type_S64", PJRT_Buffer_Type_S64);
  line("enum", "PJRT_Buffer_Type_U8", PJRT_Buffer_Type_U8);
  line("enum", "PJRT_Buffer_Type_F16", PJRT_Buffer_Type_F16);
  line("enum", "PJRT_Buffer_Type_F32", PJRT_Buffer_Type_F32);
  line("enum", "PJRT_Buffer_Type_F64", PJRT_Buffer_Type_F64);
  line("enum", "PJRT_Buffer_Type_BF16", PJRT_Buffer_Type_BF16);
  line("enum", "PJRT_Buffer_Type_C64", PJRT_Buffer_Type_C64);
  line("enum", "PJRT_Buffer_Type_C128", PJRT_Buffer_Type_C128);
  line("enum", "PJRT_Buffer_Type_F8E5M2", PJRT_Buffer_Type_F8E5M2);
  line("enum", "PJRT_Buffer_Type_F8E4M3FN", PJRT_Buffer_Type_F8E4M3FN);
  line("enum", "PJRT_Buffer_Type_F8E5M2FNUZ", PJRT_Buffer_Type_F8E5M2FNUZ);
  line("enum", "PJRT_Buffer_Type_F8E4M3FNUZ", PJRT_Buffer_Type_F8E4M3FNUZ);
  line("enum", "PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes",
       PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes);
  line("enum", "PJRT_NamedValue_kInt64", PJRT_NamedValue_kInt64);
  line("enum", "PJRT_Error_Code_UNIMPLEMENTED", PJRT_Error_Code_UNIMPLEMENTED);
  line("enum", "PJRT_Error_Code_UNAUTHENTICATED", PJRT_Error_Code_UNAUTHENTICATED);
  return out;
}

}  // namespace tpu
