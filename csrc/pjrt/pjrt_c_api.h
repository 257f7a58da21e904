// Our declarations of the part of the PJRT C API that torch_tpu uses.
//
// The PJRT C API is a stable C ABI: a plugin exports `GetPjrtApi`, which
// returns a table of function pointers (`PJRT_Api`). Every function takes one
// `*_Args` struct whose first member is `struct_size`; members are only ever
// appended, so a caller written against a newer version passes a larger
// `struct_size` and an older plugin reads the prefix it knows.
//
// These declarations are written from the ABI's facts (slot order, member
// order and types, enum values) for API version 0.114. tests/python/test_abi.py
// checks every offset and size below against the machine-readable description
// shipped by the PyPI package `pypjrt`.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpu::pjrt::c {

constexpr int kApiMajor = 0;
constexpr int kApiMinor = 114;

// Opaque handles owned by the plugin.
struct PJRT_Error;
struct PJRT_Client;
struct PJRT_Device;
struct PJRT_DeviceDescription;
struct PJRT_Memory;
struct PJRT_Buffer;
struct PJRT_Event;
struct PJRT_Executable;
struct PJRT_LoadedExecutable;
struct PJRT_SerializedExecutable;
struct PJRT_Extension_Base;

// The size a struct has in the version we target: offset of its last member
// plus that member's size (the convention of the C API's own headers).
#define TPU_PJRT_STRUCT_SIZE(type, last) (offsetof(type, last) + sizeof(((type*)nullptr)->last))

enum PJRT_Error_Code : uint32_t {
  PJRT_Error_Code_OK = 0,
  PJRT_Error_Code_CANCELLED = 1,
  PJRT_Error_Code_UNKNOWN = 2,
  PJRT_Error_Code_INVALID_ARGUMENT = 3,
  PJRT_Error_Code_DEADLINE_EXCEEDED = 4,
  PJRT_Error_Code_NOT_FOUND = 5,
  PJRT_Error_Code_ALREADY_EXISTS = 6,
  PJRT_Error_Code_PERMISSION_DENIED = 7,
  PJRT_Error_Code_RESOURCE_EXHAUSTED = 8,
  PJRT_Error_Code_FAILED_PRECONDITION = 9,
  PJRT_Error_Code_ABORTED = 10,
  PJRT_Error_Code_OUT_OF_RANGE = 11,
  PJRT_Error_Code_UNIMPLEMENTED = 12,
  PJRT_Error_Code_INTERNAL = 13,
  PJRT_Error_Code_UNAVAILABLE = 14,
  PJRT_Error_Code_DATA_LOSS = 15,
  PJRT_Error_Code_UNAUTHENTICATED = 16,
};

enum PJRT_Buffer_Type : uint32_t {
  PJRT_Buffer_Type_INVALID = 0,
  PJRT_Buffer_Type_PRED = 1,
  PJRT_Buffer_Type_S8 = 2,
  PJRT_Buffer_Type_S16 = 3,
  PJRT_Buffer_Type_S32 = 4,
  PJRT_Buffer_Type_S64 = 5,
  PJRT_Buffer_Type_U8 = 6,
  PJRT_Buffer_Type_U16 = 7,
  PJRT_Buffer_Type_U32 = 8,
  PJRT_Buffer_Type_U64 = 9,
  PJRT_Buffer_Type_F16 = 10,
  PJRT_Buffer_Type_F32 = 11,
  PJRT_Buffer_Type_F64 = 12,
  PJRT_Buffer_Type_BF16 = 13,
  PJRT_Buffer_Type_C64 = 14,
  PJRT_Buffer_Type_C128 = 15,
  PJRT_Buffer_Type_F8E5M2 = 16,
  PJRT_Buffer_Type_F8E4M3FN = 17,
  PJRT_Buffer_Type_F8E4M3B11FNUZ = 18,
  PJRT_Buffer_Type_F8E5M2FNUZ = 19,
  PJRT_Buffer_Type_F8E4M3FNUZ = 20,
};

enum PJRT_HostBufferSemantics : uint32_t {
  PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
  PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes = 1,
  PJRT_HostBufferSemantics_kImmutableZeroCopy = 2,
};

enum PJRT_NamedValue_Type : uint32_t {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64 = 1,
  PJRT_NamedValue_kInt64List = 2,
  PJRT_NamedValue_kFloat = 3,
  PJRT_NamedValue_kBool = 4,
};

struct PJRT_Api_Version {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  int major_version;
  int minor_version;
};

struct PJRT_NamedValue {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* name;
  size_t name_size;
  PJRT_NamedValue_Type type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size;
};

// ---- errors ---------------------------------------------------------------
struct PJRT_Error_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Error* error;
};
struct PJRT_Error_Message_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  const char* message;
  size_t message_size;
};
struct PJRT_Error_GetCode_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  PJRT_Error_Code code;
};

// ---- plugin ---------------------------------------------------------------
struct PJRT_Plugin_Initialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
};
struct PJRT_Plugin_Attributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* attributes;
  size_t num_attributes;
};

// ---- events ---------------------------------------------------------------
struct PJRT_Event_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
};
struct PJRT_Event_IsReady_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
  bool is_ready;
};
struct PJRT_Event_Error_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
};
struct PJRT_Event_Await_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
};
using PJRT_Event_OnReadyCallback = void (*)(PJRT_Error* error, void* user_arg);
struct PJRT_Event_OnReady_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
  PJRT_Event_OnReadyCallback callback;
  void* user_arg;
};

// ---- client ---------------------------------------------------------------
struct PJRT_Client_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  void* kv_get_callback;
  void* kv_get_user_arg;
  void* kv_put_callback;
  void* kv_put_user_arg;
  PJRT_Client* client;
  void* kv_try_get_callback;
  void* kv_try_get_user_arg;
};
struct PJRT_Client_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
};
struct PJRT_Client_PlatformName_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* platform_name;
  size_t platform_name_size;
};
struct PJRT_Client_PlatformVersion_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* platform_version;
  size_t platform_version_size;
};
struct PJRT_Client_AddressableDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Device* const* addressable_devices;
  size_t num_addressable_devices;
};
struct PJRT_Program {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  char* code;
  size_t code_size;
  const char* format;
  size_t format_size;
};
struct PJRT_Client_Compile_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const PJRT_Program* program;
  const char* compile_options;
  size_t compile_options_size;
  PJRT_LoadedExecutable* executable;
};
struct PJRT_Client_BufferFromHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const void* data;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides;
  size_t num_byte_strides;
  PJRT_HostBufferSemantics host_buffer_semantics;
  PJRT_Device* device;
  PJRT_Memory* memory;
  void* device_layout;
  PJRT_Event* done_with_host_buffer;
  PJRT_Buffer* buffer;
};

// ---- devices --------------------------------------------------------------
struct PJRT_DeviceDescription_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  int id;
};
struct PJRT_DeviceDescription_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* device_kind;
  size_t device_kind_size;
};
struct PJRT_DeviceDescription_DebugString_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* debug_string;
  size_t debug_string_size;
};
struct PJRT_Device_GetDescription_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_DeviceDescription* device_description;
};
struct PJRT_Device_LocalHardwareId_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int local_hardware_id;
};
struct PJRT_Device_MemoryStats_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int64_t bytes_in_use;
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit;
  bool bytes_limit_is_set;
  int64_t bytes_reserved;
  bool bytes_reserved_is_set;
  int64_t peak_bytes_reserved;
  bool peak_bytes_reserved_is_set;
  int64_t bytes_reservable_limit;
  bool bytes_reservable_limit_is_set;
  int64_t largest_free_block_bytes;
  bool largest_free_block_bytes_is_set;
  int64_t pool_bytes;
  bool pool_bytes_is_set;
  int64_t peak_pool_bytes;
  bool peak_pool_bytes_is_set;
  int64_t peak_allocated_bytes;
  bool peak_allocated_bytes_is_set;
};

// ---- executables ----------------------------------------------------------
struct PJRT_Executable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
};
struct PJRT_Executable_NumOutputs_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;
};
using PJRT_SerializedExecutableDeleter = void (*)(PJRT_SerializedExecutable*);
struct PJRT_Executable_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Executable* executable;
  const char* serialized_bytes;
  size_t serialized_bytes_size;
  PJRT_SerializedExecutable* serialized_executable;
  PJRT_SerializedExecutableDeleter serialized_executable_deleter;
};
struct PJRT_LoadedExecutable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
};
struct PJRT_LoadedExecutable_GetExecutable_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* loaded_executable;
  PJRT_Executable* executable;
};
struct PJRT_ExecuteOptions {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  void* send_callbacks;
  void* recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t* non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void* context;
  void* call_location;
  size_t num_tasks;
  int* task_ids;
  int64_t* incarnation_ids;
  void* multi_slice_config;
  bool use_major_to_minor_data_layout_for_callbacks;
  void* hlo_output_callbacks;
  size_t num_hlo_output_callbacks;
};
struct PJRT_LoadedExecutable_Execute_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_ExecuteOptions* options;
  PJRT_Buffer* const* const* argument_lists;
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer** const* output_lists;
  PJRT_Event** device_complete_events;
  PJRT_Device* execute_device;
};
struct PJRT_Executable_DeserializeAndLoad_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable* loaded_executable;
  const char* overridden_serialized_compile_options;
  size_t overridden_serialized_compile_options_size;
  void* load_options;
};

// ---- buffers --------------------------------------------------------------
struct PJRT_Buffer_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
};
struct PJRT_Buffer_ElementType_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Buffer_Type type;
};
struct PJRT_Buffer_Dimensions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  const int64_t* dims;
  size_t num_dims;
};
struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  size_t on_device_size_in_bytes;
};
struct PJRT_Buffer_CopyToDevice_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Device* dst_device;
  PJRT_Buffer* dst_buffer;
};
struct PJRT_Buffer_ToHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* src;
  void* host_layout;
  void* dst;
  size_t dst_size;
  PJRT_Event* event;
};
struct PJRT_Buffer_ReadyEvent_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Event* event;
};

// ---- the table ------------------------------------------------------------
// Every slot of PJRT_Api in declaration order (version 0.114). X(name, Args):
// slots we call get their args struct; the rest are declared with an
// incomplete struct so that the table keeps its layout.
#define TPU_PJRT_API_SLOTS(X, U)                          \
  X(Error_Destroy)                                        \
  X(Error_Message)                                        \
  X(Error_GetCode)                                        \
  X(Plugin_Initialize)                                    \
  X(Plugin_Attributes)                                    \
  X(Event_Destroy)                                        \
  X(Event_IsReady)                                        \
  X(Event_Error)                                          \
  X(Event_Await)                                          \
  X(Event_OnReady)                                        \
  X(Client_Create)                                        \
  X(Client_Destroy)                                       \
  X(Client_PlatformName)                                  \
  U(Client_ProcessIndex)                                  \
  X(Client_PlatformVersion)                               \
  U(Client_Devices)                                       \
  X(Client_AddressableDevices)                            \
  U(Client_LookupDevice)                                  \
  U(Client_LookupAddressableDevice)                       \
  U(Client_AddressableMemories)                           \
  X(Client_Compile)                                       \
  U(Client_DefaultDeviceAssignment)                       \
  X(Client_BufferFromHostBuffer)                          \
  X(DeviceDescription_Id)                                 \
  U(DeviceDescription_ProcessIndex)                       \
  U(DeviceDescription_Attributes)                         \
  X(DeviceDescription_Kind)                               \
  X(DeviceDescription_DebugString)                        \
  U(DeviceDescription_ToString)                           \
  X(Device_GetDescription)                                \
  U(Device_IsAddressable)                                 \
  X(Device_LocalHardwareId)                               \
  U(Device_AddressableMemories)                           \
  U(Device_DefaultMemory)                                 \
  X(Device_MemoryStats)                                   \
  U(Memory_Id)                                            \
  U(Memory_Kind)                                          \
  U(Memory_DebugString)                                   \
  U(Memory_ToString)                                      \
  U(Memory_AddressableByDevices)                          \
  X(Executable_Destroy)                                   \
  U(Executable_Name)                                      \
  U(Executable_NumReplicas)                               \
  U(Executable_NumPartitions)                             \
  X(Executable_NumOutputs)                                \
  U(Executable_SizeOfGeneratedCodeInBytes)                \
  U(Executable_GetCostAnalysis)                           \
  U(Executable_OutputMemoryKinds)                         \
  U(Executable_OptimizedProgram)                          \
  X(Executable_Serialize)                                 \
  X(LoadedExecutable_Destroy)                             \
  X(LoadedExecutable_GetExecutable)                       \
  U(LoadedExecutable_AddressableDevices)                  \
  U(LoadedExecutable_Delete)                              \
  U(LoadedExecutable_IsDeleted)                           \
  X(LoadedExecutable_Execute)                             \
  X(Executable_DeserializeAndLoad)                        \
  U(LoadedExecutable_Fingerprint)                         \
  X(Buffer_Destroy)                                       \
  X(Buffer_ElementType)                                   \
  X(Buffer_Dimensions)                                    \
  U(Buffer_UnpaddedDimensions)                            \
  U(Buffer_DynamicDimensionIndices)                       \
  U(Buffer_GetMemoryLayout)                               \
  X(Buffer_OnDeviceSizeInBytes)                           \
  U(Buffer_Device)                                        \
  U(Buffer_Memory)                                        \
  U(Buffer_Delete)                                        \
  U(Buffer_IsDeleted)                                     \
  X(Buffer_CopyToDevice)                                  \
  X(Buffer_ToHostBuffer)                                  \
  U(Buffer_IsOnCpu)                                       \
  X(Buffer_ReadyEvent)                                    \
  U(Buffer_UnsafePointer)                                 \
  U(Buffer_IncreaseExternalReferenceCount)                \
  U(Buffer_DecreaseExternalReferenceCount)                \
  U(Buffer_OpaqueDeviceMemoryDataPointer)                 \
  U(CopyToDeviceStream_Destroy)                           \
  U(CopyToDeviceStream_AddChunk)                          \
  U(CopyToDeviceStream_TotalBytes)                        \
  U(CopyToDeviceStream_GranuleSize)                       \
  U(CopyToDeviceStream_CurrentBytes)                      \
  U(TopologyDescription_Create)                           \
  U(TopologyDescription_Destroy)                          \
  U(TopologyDescription_PlatformName)                     \
  U(TopologyDescription_PlatformVersion)                  \
  U(TopologyDescription_GetDeviceDescriptions)            \
  U(TopologyDescription_Serialize)                        \
  U(TopologyDescription_Attributes)                       \
  U(Compile)                                              \
  U(Executable_OutputElementTypes)                        \
  U(Executable_OutputDimensions)                          \
  U(Buffer_CopyToMemory)                                  \
  U(Client_CreateViewOfDeviceBuffer)                      \
  U(Executable_Fingerprint)                               \
  U(Client_TopologyDescription)                           \
  U(Executable_GetCompiledMemoryStats)                    \
  U(Memory_Kind_Id)                                       \
  U(ExecuteContext_Create)                                \
  U(ExecuteContext_Destroy)                               \
  U(Buffer_CopyRawToHost)                                 \
  U(AsyncHostToDeviceTransferManager_Destroy)             \
  U(AsyncHostToDeviceTransferManager_TransferData)        \
  U(Client_CreateBuffersForAsyncHostToDevice)             \
  U(AsyncHostToDeviceTransferManager_RetrieveBuffer)      \
  U(AsyncHostToDeviceTransferManager_Device)              \
  U(AsyncHostToDeviceTransferManager_BufferCount)         \
  U(AsyncHostToDeviceTransferManager_BufferSize)          \
  U(AsyncHostToDeviceTransferManager_SetBufferError)      \
  U(AsyncHostToDeviceTransferManager_AddMetadata)         \
  U(Client_DmaMap)                                        \
  U(Client_DmaUnmap)                                      \
  U(Client_CreateUninitializedBuffer)                     \
  U(Client_UpdateGlobalProcessInfo)                       \
  U(TopologyDescription_Deserialize)                      \
  U(Client_CreateAliasBuffer)                             \
  U(Client_FulfillAliasBuffer)                            \
  U(LoadedExecutable_GetDeviceAssignment)                 \
  U(Client_CreateErrorBuffer)                             \
  U(AsyncHostToDeviceTransferManager_TransferLiteral)     \
  U(Buffer_CopyRawToHostFuture)                           \
  U(Device_PoisonExecution)                               \
  U(Device_CreateAsyncTrackingEvent)                      \
  U(AsyncTrackingEvent_Destroy)                           \
  U(Executable_GetCompileOptions)                         \
  U(Buffer_DonateWithControlDependency)                   \
  U(Event_Create)                                         \
  U(Event_Set)                                            \
  U(Device_GetAttributes)                                 \
  U(Client_Load)                                          \
  U(LoadedExecutable_AddressableDeviceLogicalIds)         \
  U(Buffer_Bitcast)                                       \
  U(Error_ForEachPayload)                                 \
  U(TopologyDescription_Fingerprint)                      \
  U(Executable_ParameterMemoryKinds)                      \
  U(Device_ClearMemoryStats)                              \
  U(TopologyDescription_MakeCanonicalShapeForMemorySpace) \
  U(TopologyDescription_GetMemorySpaceKindIds)

// Error_Destroy and Error_Message return void; every other slot returns an
// error (nullptr on success).
using PJRT_Error_Destroy_Fn = void (*)(PJRT_Error_Destroy_Args*);
using PJRT_Error_Message_Fn = void (*)(PJRT_Error_Message_Args*);
#define TPU_PJRT_DECLARE_FN(name) \
  using PJRT_##name##_Fn = PJRT_Error* (*)(PJRT_##name##_Args*);
#define TPU_PJRT_DECLARE_UNUSED(name) \
  struct PJRT_##name##_Args;          \
  using PJRT_##name##_Fn = PJRT_Error* (*)(PJRT_##name##_Args*);
TPU_PJRT_DECLARE_FN(Error_GetCode)

// Function types of the slots we call (Error_Destroy/Message/GetCode above).
TPU_PJRT_DECLARE_FN(Plugin_Initialize)
TPU_PJRT_DECLARE_FN(Plugin_Attributes)
TPU_PJRT_DECLARE_FN(Event_Destroy)
TPU_PJRT_DECLARE_FN(Event_IsReady)
TPU_PJRT_DECLARE_FN(Event_Error)
TPU_PJRT_DECLARE_FN(Event_Await)
TPU_PJRT_DECLARE_FN(Event_OnReady)
TPU_PJRT_DECLARE_FN(Client_Create)
TPU_PJRT_DECLARE_FN(Client_Destroy)
TPU_PJRT_DECLARE_FN(Client_PlatformName)
TPU_PJRT_DECLARE_FN(Client_PlatformVersion)
TPU_PJRT_DECLARE_FN(Client_AddressableDevices)
TPU_PJRT_DECLARE_FN(Client_Compile)
TPU_PJRT_DECLARE_FN(Client_BufferFromHostBuffer)
TPU_PJRT_DECLARE_FN(DeviceDescription_Id)
TPU_PJRT_DECLARE_FN(DeviceDescription_Kind)
TPU_PJRT_DECLARE_FN(DeviceDescription_DebugString)
TPU_PJRT_DECLARE_FN(Device_GetDescription)
TPU_PJRT_DECLARE_FN(Device_LocalHardwareId)
TPU_PJRT_DECLARE_FN(Device_MemoryStats)
TPU_PJRT_DECLARE_FN(Executable_Destroy)
TPU_PJRT_DECLARE_FN(Executable_NumOutputs)
TPU_PJRT_DECLARE_FN(Executable_Serialize)
TPU_PJRT_DECLARE_FN(LoadedExecutable_Destroy)
TPU_PJRT_DECLARE_FN(LoadedExecutable_GetExecutable)
TPU_PJRT_DECLARE_FN(LoadedExecutable_Execute)
TPU_PJRT_DECLARE_FN(Executable_DeserializeAndLoad)
TPU_PJRT_DECLARE_FN(Buffer_Destroy)
TPU_PJRT_DECLARE_FN(Buffer_ElementType)
TPU_PJRT_DECLARE_FN(Buffer_Dimensions)
TPU_PJRT_DECLARE_FN(Buffer_OnDeviceSizeInBytes)
TPU_PJRT_DECLARE_FN(Buffer_CopyToDevice)
TPU_PJRT_DECLARE_FN(Buffer_ToHostBuffer)
TPU_PJRT_DECLARE_FN(Buffer_ReadyEvent)

#define TPU_PJRT_NOOP(name)
TPU_PJRT_API_SLOTS(TPU_PJRT_NOOP, TPU_PJRT_DECLARE_UNUSED)

struct PJRT_Api {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Api_Version pjrt_api_version;
#define TPU_PJRT_MEMBER(name) PJRT_##name##_Fn PJRT_##name;
  TPU_PJRT_API_SLOTS(TPU_PJRT_MEMBER, TPU_PJRT_MEMBER)
#undef TPU_PJRT_MEMBER
};

using GetPjrtApiFn = const PJRT_Api* (*)();

}  // namespace tpu::pjrt::c
