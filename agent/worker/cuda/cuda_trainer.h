// The GPU data-parallel training loop of xl-train (one process per GPU,
// NCCL gradient all-reduce overlapped with backward in layer-aligned
// buckets) and the GPU peaks behind MFU; the GPU tests' host-array entry
// points are in cuda_host_ops.h. No CUDA headers here: train_main.cc
// includes this under XL_HAVE_CUDA and compiles with the host compiler. Each
// function runs on the calling thread and uses the device it selects; errors
// from CUDA, cuBLAS and NCCL carry the library's message, the host and the
// rank.
#ifndef XL_AGENT_WORKER_CUDA_CUDA_TRAINER_H_
#define XL_AGENT_WORKER_CUDA_CUDA_TRAINER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/worker/comm/rendezvous.h"
#include "agent/worker/loop/metrics.h"
#include "agent/worker/loop/train_config.h"
#include "agent/worker/loop/trainer.h"

namespace xl::worker {

// Trains `config` on the GPU LOCAL_RANK picks among CUDA_VISIBLE_DEVICES,
// with NCCL over `rendezvous` (not owned). Same contract as RunTraining
// (trainer.h): OK after config.steps; CANCELLED after SIGTERM (checkpoint
// written); UNAVAILABLE / DEADLINE_EXCEEDED when NCCL fails or hangs (the
// communicator is aborted); FAILED_PRECONDITION when there is no GPU.
absl::Status RunCudaTraining(const TrainConfig& config, const RankInfo& info,
                             Rendezvous* rendezvous, MetricsSink* sink,
                             const std::string& checkpoint_dir);

// What one run measured, for tests and the benchmark.
struct CudaRunStats {
  int64_t steps_run = 0;
  double samples_per_second = 0;  // global, over the timed steps
  double step_seconds = 0;        // mean over the timed steps
  double mfu = 0;                 // 6 * params * samples / s / peak
  double peak_tflops = 0;         // one device's, in the precision used
  std::string device_name;
  uint64_t peak_memory_bytes = 0;
  float last_loss = 0;
  int batch_per_rank = 0;  // as run (batch_per_rank auto resolved)
};

struct CudaTrainOptions {
  TrainOptions base;  // stop flag, crash_after_steps, final_params, keep
  int device = -1;    // -1: LOCAL_RANK (default 0) modulo visible GPUs
  // Steps excluded from samples/s and MFU (warm-up: cuBLAS heuristics,
  // NCCL connection setup).
  int64_t warmup_steps = 0;
  CudaRunStats* stats = nullptr;  // filled when set
};

absl::Status RunCudaTraining(const TrainConfig& config, const RankInfo& info,
                             Rendezvous* rendezvous, MetricsSink* sink,
                             const std::string& checkpoint_dir,
                             const CudaTrainOptions& options);

// Visible CUDA devices; 0 when there is no driver or no GPU.
int CudaDeviceCount();

// The device's dense peaks, looked up by name (then SM count), and its
// compute capability.
struct GpuPeak {
  std::string name;
  int sm_count = 0;
  int major = 0;
  int minor = 0;
  double bf16_tflops = 0;  // tensor cores, = fp16; 0: not in the table
  double fp32_tflops = 0;  // CUDA cores (xl-train's FP32 runs without TF32)
  // The peak of the precision the GEMMs run in.
  double Tflops(v1::Precision precision) const;
};
absl::StatusOr<GpuPeak> LookupGpuPeak(int device);
// The table LookupGpuPeak uses, one "name: N TFLOP/s" per line.
std::string GpuPeakTable();
// Model FLOPs utilization: 6 * params * samples_per_second / peak.
double ModelFlopsUtilization(int64_t params, double samples_per_second,
                             double peak_tflops);

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_CUDA_CUDA_TRAINER_H_
