// GPU discovery through NVML, loaded with dlopen at run time so the agent
// builds and runs on machines without the NVIDIA driver. This is the one file
// that knows NVML's types and maps its return codes to absl::Status.
// Stateless between calls; safe from any thread (NVML itself is thread-safe).
#ifndef XL_AGENT_INVENTORY_NVML_H_
#define XL_AGENT_INVENTORY_NVML_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "xl/v1/node.pb.h"

namespace xl::agent {

inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

// Lists the GPUs NVML sees, in NVML index order, with uuid, model, memory and
// compute capability. When `library` cannot be loaded or the driver is not
// running, returns zero GPUs (OK) and logs one line on stderr: a machine
// without GPUs is a valid node. Other NVML failures (a lost GPU, a missing
// symbol) return the NVML error, annotated with the call that failed.
absl::StatusOr<std::vector<v1::Gpu>> DiscoverGpus(
    const std::string& library = kNvmlLibrary);

// Maps an NVML return code and its error string to a Status (exposed for
// tests; `code` is an nvmlReturn_t).
absl::Status NvmlStatus(int code, const char* error_string,
                        const std::string& call);

}  // namespace xl::agent

#endif  // XL_AGENT_INVENTORY_NVML_H_
