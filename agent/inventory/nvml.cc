#include "agent/inventory/nvml.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "agent/log.h"
#include "common/status.h"

namespace xl::agent {
namespace {

// The few NVML declarations the agent needs, copied from nvml.h (ABI stable
// since the _v2 entry points of CUDA 5.5) so no NVIDIA header is required.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;  // NOLINT(runtime/int): NVML's ABI.
  unsigned long long free;   // NOLINT(runtime/int)
  unsigned long long used;   // NOLINT(runtime/int)
};

constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlUninitialized = 1;
constexpr nvmlReturn_t kNvmlInvalidArgument = 2;
constexpr nvmlReturn_t kNvmlNotSupported = 3;
constexpr nvmlReturn_t kNvmlNoPermission = 4;
constexpr nvmlReturn_t kNvmlNotFound = 6;
constexpr nvmlReturn_t kNvmlInsufficientSize = 7;
constexpr nvmlReturn_t kNvmlDriverNotLoaded = 9;
constexpr nvmlReturn_t kNvmlTimeout = 10;
constexpr nvmlReturn_t kNvmlLibraryNotFound = 12;
constexpr nvmlReturn_t kNvmlFunctionNotFound = 13;
constexpr nvmlReturn_t kNvmlGpuIsLost = 15;
constexpr nvmlReturn_t kNvmlResetRequired = 16;
constexpr nvmlReturn_t kNvmlLibRmVersionMismatch = 18;
constexpr nvmlReturn_t kNvmlInUse = 19;
constexpr nvmlReturn_t kNvmlMemory = 20;
constexpr nvmlReturn_t kNvmlNotReady = 27;

constexpr unsigned kNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

struct NvmlApi {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*get_count)(unsigned int*);
  nvmlReturn_t (*get_handle)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*get_uuid)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*get_cc)(nvmlDevice_t, int*, int*);
  const char* (*error_string)(nvmlReturn_t);
};

template <typename Fn>
absl::Status Bind(void* handle, const char* symbol, Fn* fn) {
  void* p = dlsym(handle, symbol);
  if (p == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("NVML has no symbol ", symbol,
                     "; the driver is too old for this agent, or pass "
                     "--inventory to describe the node by hand"));
  }
  *fn = reinterpret_cast<Fn>(p);
  return absl::OkStatus();
}

absl::Status BindAll(void* handle, NvmlApi* api) {
  RETURN_IF_ERROR(Bind(handle, "nvmlInit_v2", &api->init));
  RETURN_IF_ERROR(Bind(handle, "nvmlShutdown", &api->shutdown));
  RETURN_IF_ERROR(Bind(handle, "nvmlDeviceGetCount_v2", &api->get_count));
  RETURN_IF_ERROR(
      Bind(handle, "nvmlDeviceGetHandleByIndex_v2", &api->get_handle));
  RETURN_IF_ERROR(Bind(handle, "nvmlDeviceGetName", &api->get_name));
  RETURN_IF_ERROR(Bind(handle, "nvmlDeviceGetUUID", &api->get_uuid));
  RETURN_IF_ERROR(Bind(handle, "nvmlDeviceGetMemoryInfo", &api->get_memory));
  RETURN_IF_ERROR(
      Bind(handle, "nvmlDeviceGetCudaComputeCapability", &api->get_cc));
  RETURN_IF_ERROR(Bind(handle, "nvmlErrorString", &api->error_string));
  return absl::OkStatus();
}

class NvmlSession {
 public:
  explicit NvmlSession(const NvmlApi& api) : api_(api) {}
  ~NvmlSession() {
    if (initialized_) api_.shutdown();
  }
  void set_initialized() { initialized_ = true; }
  absl::Status Check(nvmlReturn_t code, const std::string& call) const {
    return NvmlStatus(code, code == kNvmlSuccess ? "" : api_.error_string(code),
                      call);
  }

 private:
  const NvmlApi& api_;
  bool initialized_ = false;
};

}  // namespace

absl::Status NvmlStatus(int code, const char* error_string,
                        const std::string& call) {
  if (code == kNvmlSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat("NVML ", call, ": ",
                                 error_string ? error_string : "unknown error",
                                 " (nvmlReturn_t ", code, ")");
  switch (code) {
    case kNvmlInvalidArgument:
    case kNvmlInsufficientSize:
      return absl::InvalidArgumentError(msg);
    case kNvmlNotSupported:
      return absl::UnimplementedError(msg);
    case kNvmlNoPermission:
      return absl::PermissionDeniedError(msg);
    case kNvmlNotFound:
      return absl::NotFoundError(msg);
    case kNvmlTimeout:
    case kNvmlNotReady:
    case kNvmlInUse:
      return absl::UnavailableError(msg);
    case kNvmlMemory:
      return absl::ResourceExhaustedError(msg);
    case kNvmlUninitialized:
    case kNvmlDriverNotLoaded:
    case kNvmlLibraryNotFound:
    case kNvmlFunctionNotFound:
    case kNvmlGpuIsLost:
    case kNvmlResetRequired:
    case kNvmlLibRmVersionMismatch:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::UnknownError(msg);
  }
}

absl::StatusOr<std::vector<v1::Gpu>> DiscoverGpus(const std::string& library) {
  std::vector<v1::Gpu> gpus;
  // The handle is never closed: NVML keeps threads and state that do not
  // survive dlclose, and the agent loads it once.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();  // NOLINT(concurrency-mt-unsafe): per thread
    LogLine(absl::StrCat("no NVML (", err ? err : library,
                         "): reporting 0 GPUs; install the NVIDIA driver or "
                         "pass --inventory"));
    return gpus;
  }
  NvmlApi api{};
  RETURN_IF_ERROR(BindAll(handle, &api));
  NvmlSession session(api);
  nvmlReturn_t rc = api.init();
  if (rc == kNvmlDriverNotLoaded || rc == kNvmlLibraryNotFound ||
      rc == kNvmlLibRmVersionMismatch) {
    LogLine(absl::StrCat(session.Check(rc, "nvmlInit_v2").message(),
                         ": reporting 0 GPUs"));
    return gpus;
  }
  RETURN_IF_ERROR(session.Check(rc, "nvmlInit_v2"));
  session.set_initialized();

  unsigned int count = 0;
  RETURN_IF_ERROR(
      session.Check(api.get_count(&count), "nvmlDeviceGetCount_v2"));
  for (unsigned int i = 0; i < count; ++i) {
    const std::string where = absl::StrCat("(GPU ", i, ")");
    nvmlDevice_t device = nullptr;
    RETURN_IF_ERROR(session.Check(api.get_handle(i, &device),
                                  "nvmlDeviceGetHandleByIndex_v2" + where));
    v1::Gpu gpu;
    gpu.set_index(static_cast<int>(i));
    char name[kNameBufferSize] = {};
    RETURN_IF_ERROR(session.Check(api.get_name(device, name, sizeof(name)),
                                  "nvmlDeviceGetName" + where));
    gpu.set_model(name);
    char uuid[kUuidBufferSize] = {};
    RETURN_IF_ERROR(session.Check(api.get_uuid(device, uuid, sizeof(uuid)),
                                  "nvmlDeviceGetUUID" + where));
    gpu.set_uuid(uuid);
    nvmlMemory_t memory{};
    rc = api.get_memory(device, &memory);
    if (rc == kNvmlNotSupported) {
      memory.total = 0;  // Reported as unknown rather than failing the node.
    } else {
      RETURN_IF_ERROR(session.Check(rc, "nvmlDeviceGetMemoryInfo" + where));
    }
    gpu.set_memory_bytes(memory.total);
    int major = 0;
    int minor = 0;
    rc = api.get_cc(device, &major, &minor);
    if (rc == kNvmlSuccess) {
      gpu.set_compute_capability(absl::StrCat(major, ".", minor));
    } else if (rc != kNvmlNotSupported) {
      RETURN_IF_ERROR(
          session.Check(rc, "nvmlDeviceGetCudaComputeCapability" + where));
    }
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

}  // namespace xl::agent
