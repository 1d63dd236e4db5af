// Which GPUs xl-train, the built-in worker, runs on: its CUDA build carries
// code for compute capability 8.0, 8.6, 8.9 and 9.0 (and PTX that the driver
// compiles for newer GPUs), built with CUDA 13, which dropped Volta and older.
// The planner says so per GPU model; the worker can check its GPU at start.
// Constant data; safe from any thread.
#ifndef XL_COMMON_PLANNER_XL_TRAIN_GPUS_H_
#define XL_COMMON_PLANNER_XL_TRAIN_GPUS_H_

#include <string>

namespace xl::planner {

// Returns whether xl-train's CUDA code runs on a GPU of compute capability
// `major`.`minor` (as cudaDeviceProp or NVML report it). When it does not
// and `why` is not null, sets `why` to the reason in words and the way out,
// for example for 7.0: "compute capability 7.0 (Volta): CUDA 13, which
// xl-train is built with, dropped Volta and older GPUs (7.2 and below);
// ...". Leaves `why` as it is when the GPU is supported.
bool XlTrainSupportsComputeCapability(int major, int minor, std::string* why);

}  // namespace xl::planner

#endif  // XL_COMMON_PLANNER_XL_TRAIN_GPUS_H_
