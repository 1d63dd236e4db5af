// xl-train's GPU floor. SASS built for sm_XY runs on every GPU of major X
// with minor Y or above, so sm_80, sm_86, sm_89 and sm_90 cover 8.x and 9.x;
// compute_90 PTX covers 10.0 and newer (compiled by the driver at first
// start). Below 8.0 nothing in the build runs: Turing (7.5) is still a CUDA
// 13 target but not one xl-train is built for, and Volta (7.0, 7.2),
// Pascal, Maxwell and Kepler are targets CUDA 13 can no longer build for.
// Keep kOldestMajor in step with the worker's CMAKE_CUDA_ARCHITECTURES.
#include "common/planner/xl_train_gpus.h"

#include "absl/strings/str_cat.h"

namespace xl::planner {
namespace {

constexpr int kOldestMajor = 8;  // sm_80, the A100

const char* ArchitectureName(int major, int minor) {
  switch (major) {
    case 3:
      return "Kepler";
    case 5:
      return "Maxwell";
    case 6:
      return "Pascal";
    case 7:
      return minor >= 5 ? "Turing" : "Volta";
    default:
      return nullptr;
  }
}

}  // namespace

bool XlTrainSupportsComputeCapability(int major, int minor, std::string* why) {
  if (major >= kOldestMajor && minor >= 0) return true;
  if (why == nullptr) return false;
  if (major <= 0 || minor < 0) {
    *why = absl::StrCat(major, ".", minor,
                        " is not a compute capability; give the GPU's "
                        "(nvidia-smi --query-gpu=compute_cap)");
    return false;
  }
  const char* arch = ArchitectureName(major, minor);
  const std::string cc = absl::StrCat(
      "compute capability ", major, ".", minor,
      arch != nullptr ? absl::StrCat(" (", arch, ")") : std::string());
  const std::string way_out =
      "xl-train needs 8.0 or newer (A100, A30, A40, L4, L40S, H100, H200, "
      "B200); a program of your own can still run here";
  if (major == 7 && minor >= 5) {
    *why = absl::StrCat(cc,
                        ": xl-train's CUDA 13 build has code for 8.0, 8.6, "
                        "8.9 and 9.0 (PTX for newer GPUs) and none for 7.x; ",
                        way_out);
  } else {
    *why = absl::StrCat(cc,
                        ": CUDA 13, which xl-train is built with, dropped "
                        "Volta and older GPUs (7.2 and below); ",
                        way_out, " if built with CUDA 12");
  }
  return false;
}

}  // namespace xl::planner
