// The catalogue's numbers: memory in MiB as NVML reports it on these boards,
// and dense peaks from NVIDIA's data sheets (A100: 312 bf16 / 156 tf32 / 19.5
// fp32; H100 SXM: 989 / 495 / 67; H100 PCIe: 756 / 378 / 51; H200 as H100
// SXM; L40S: 362 / 183 / 91.6; A40: 149.7 / 74.8 / 37.4; A30: 165 / 82 /
// 10.3; L4: 121 / 60 / 30.3; V100: 125 fp16, no bf16 or tf32, 15.7 fp32),
// and compute capabilities from NVIDIA's CUDA GPU table (A100, A30 8.0; A40
// 8.6; L4, L40S 8.9; H100, H200 9.0; V100 7.0).
#include "common/planner/gpu_catalogue.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_replace.h"

namespace xl::planner {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

struct Entry {
  GpuSpec spec;
  // Lower-case names that select it: short names and NVML names.
  std::vector<std::string> aliases;
};

const std::vector<Entry>& Entries() {
  static const std::vector<Entry>* entries = new std::vector<Entry>{
      {{"H200-141GB", 143771 * kMiB, 989, 989, 495, 67, 9, 0},
       {"h200-141gb", "h200", "nvidia h200", "h200-141gb-hbm3e"}},
      {{"H100-SXM-80GB", 81559 * kMiB, 989, 989, 495, 67, 9, 0},
       {"h100-sxm-80gb", "h100-80gb", "h100", "h100-sxm",
        "nvidia h100 80gb hbm3", "nvidia h100-sxm5-80gb"}},
      {{"H100-PCIe-80GB", 81559 * kMiB, 756, 756, 378, 51, 9, 0},
       {"h100-pcie-80gb", "h100-pcie", "nvidia h100 pcie"}},
      {{"A100-80GB", 81920 * kMiB, 312, 312, 156, 19.5, 8, 0},
       {"a100-80gb", "a100-sxm-80gb", "a100-sxm4-80gb", "nvidia a100-sxm4-80gb",
        "nvidia a100 80gb pcie", "nvidia a100-pcie-80gb"}},
      {{"A100-40GB", 40960 * kMiB, 312, 312, 156, 19.5, 8, 0},
       {"a100-40gb", "a100", "a100-sxm-40gb", "a100-sxm4-40gb",
        "nvidia a100-sxm4-40gb", "nvidia a100-pcie-40gb"}},
      {{"L40S-48GB", 46068 * kMiB, 362, 362, 183, 91.6, 8, 9},
       {"l40s-48gb", "l40s", "nvidia l40s"}},
      {{"A40-48GB", 46068 * kMiB, 149.7, 149.7, 74.8, 37.4, 8, 6},
       {"a40-48gb", "a40", "nvidia a40"}},
      {{"A30-24GB", 24576 * kMiB, 165, 165, 82, 10.3, 8, 0},
       {"a30-24gb", "a30", "nvidia a30"}},
      {{"L4-24GB", 23034 * kMiB, 121, 121, 60, 30.3, 8, 9},
       {"l4-24gb", "l4", "nvidia l4"}},
      {{"V100-32GB", 32768 * kMiB, 0, 125, 0, 15.7, 7, 0},
       {"v100-32gb", "v100", "v100-sxm2-32gb", "tesla v100-sxm2-32gb",
        "tesla v100-pcie-32gb", "tesla v100s-pcie-32gb",
        "nvidia v100-sxm2-32gb"}},
  };
  return *entries;
}

}  // namespace

double GpuSpec::PeakTflops(v1::Precision precision) const {
  switch (precision) {
    case v1::FP32:
      return fp32_tflops;
    case v1::FP16:
      return fp16_tflops;
    default:
      return bf16_tflops;
  }
}

const std::vector<GpuSpec>& GpuCatalogue() {
  static const std::vector<GpuSpec>* specs = [] {
    auto* v = new std::vector<GpuSpec>;
    for (const Entry& e : Entries()) v->push_back(e.spec);
    return v;
  }();
  return *specs;
}

std::optional<GpuSpec> FindGpu(absl::string_view name) {
  std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  // "H100_80GB" and "H100 80GB" are read as "H100-80GB".
  std::string dashed = absl::StrReplaceAll(key, {{"_", "-"}, {" ", "-"}});
  for (const Entry& e : Entries()) {
    for (const std::string& alias : e.aliases) {
      if (alias == key || alias == dashed) return e.spec;
    }
  }
  return std::nullopt;
}

}  // namespace xl::planner
