// The GPU catalogue of the capacity planner: common data-centre GPUs with
// their memory (as NVML reports it) and dense peak TFLOP/s per precision, and
// the lookup of a catalogue entry from a short name ("H100-80GB") or an NVML
// name ("NVIDIA H100 80GB HBM3"). Constant data; safe from any thread.
#ifndef XL_COMMON_PLANNER_GPU_CATALOGUE_H_
#define XL_COMMON_PLANNER_GPU_CATALOGUE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "xl/v1/plan.pb.h"

namespace xl::planner {

// One GPU model. Peaks are dense (no 2:4 sparsity) tensor-core numbers from
// the vendor's data sheets, in TFLOP/s; 0 means the precision is not
// supported (V100 has no bf16).
struct GpuSpec {
  const char* name;       // short, catalogue name: "H100-SXM-80GB"
  uint64_t memory_bytes;  // total device memory as NVML reports it
  double bf16_tflops;     // bf16 tensor core, fp32 accumulation
  double fp16_tflops;     // fp16 tensor core, fp32 accumulation
  double tf32_tflops;     // tf32 tensor core
  double fp32_tflops;     // plain fp32 (CUDA cores)
  // CUDA compute capability, from NVIDIA's published table (A100 8.0, H100
  // 9.0, V100 7.0): what CUDA builds can run on it (xl_train_gpus.h).
  int compute_major;
  int compute_minor;

  // The dense peak at `precision` (BF16, FP16 or FP32; FP32 means plain fp32,
  // not tf32, as xl-train's reference mode runs). 0 when unsupported.
  double PeakTflops(v1::Precision precision) const;
};

// Every catalogue entry, in a fixed order (newest first).
const std::vector<GpuSpec>& GpuCatalogue();

// Returns the entry for `name`: a short name ("H100-80GB", "A100-40GB",
// "H200", "L40S", any case, with or without the memory suffix where that is
// unambiguous) or an NVML name ("NVIDIA H100 80GB HBM3", "NVIDIA
// A100-SXM4-40GB", "Tesla V100-SXM2-32GB"). nullopt when unknown.
std::optional<GpuSpec> FindGpu(absl::string_view name);

}  // namespace xl::planner

#endif  // XL_COMMON_PLANNER_GPU_CATALOGUE_H_
