// GPU MLP benchmark: trains xl-train's bf16 MLP of width 8192 on one GPU
// and prints samples/s and MFU (6 x params x samples/s over the device's
// dense peak in the precision run) beside the goal of >= 60% MFU, and the
// planner's predicted peak memory beside the measured one (goal: within
// 10%). The last line, "ROW ...", is for tests/gpu/run_on_device.sh. Not
// run by ctest.
//   gpu_mlp_bench [--hidden 8192] [--layers 8] [--input 512] [--batch 8192|auto]
//                 [--steps 30] [--warmup 5] [--precision bf16|fp16|fp32]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "agent/worker/cuda/cuda_trainer.h"
#include "common/planner/planner.h"

int main(int argc, char** argv) {
  using namespace xl::worker;
  TrainConfig c;
  c.input_dim = 512;
  c.hidden_dim = 8192;
  c.hidden_layers = 8;
  c.classes = 16;
  c.batch_per_rank = 8192;
  c.steps = 30;
  c.precision = xl::v1::BF16;
  c.device = "cuda";
  c.metrics_every = 1000000;
  int warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--hidden")
      c.hidden_dim = std::atoi(v);
    else if (k == "--layers")
      c.hidden_layers = std::atoi(v);
    else if (k == "--input")
      c.input_dim = std::atoi(v);
    else if (k == "--batch" && std::strcmp(v, "auto") == 0)
      c.batch_auto = true;  // FitBatch picks it on the device
    else if (k == "--batch")
      c.batch_per_rank = std::atoi(v);
    else if (k == "--steps")
      c.steps = std::atoi(v);
    else if (k == "--warmup")
      warmup = std::atoi(v);
    else if (k == "--precision") {
      c.precision = std::strcmp(v, "fp32") == 0   ? xl::v1::FP32
                    : std::strcmp(v, "fp16") == 0 ? xl::v1::FP16
                                                  : xl::v1::BF16;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (CudaDeviceCount() == 0) {
    std::printf("gpu_mlp_bench: no CUDA device; nothing measured\n");
    return 0;
  }
  CudaRunStats stats;
  CudaTrainOptions o;
  o.device = 0;
  o.warmup_steps = warmup;
  o.stats = &stats;
  InMemoryRendezvous rdv;
  absl::Status st = RunCudaTraining(c, RankInfo{}, &rdv, nullptr, "", o);
  if (!st.ok()) {
    std::fprintf(stderr, "gpu_mlp_bench: %s\n",
                 std::string(st.message()).c_str());
    return 1;
  }
  std::printf("\n%-34s %14s %14s\n", "", "measured", "goal");
  std::printf("%-34s %14lld %14s\n", "params",
              static_cast<long long>(c.ParamCount()), "");
  std::printf("%-34s %14.0f %14s\n", "samples/s", stats.samples_per_second, "");
  std::printf("%-34s %14.2f %14s\n", "step ms", stats.step_seconds * 1e3, "");
  std::printf("%-34s %13.1f%% %13s\n",
              ("MFU vs " + std::to_string(static_cast<int>(stats.peak_tflops)) +
               " TFLOP/s (" + stats.device_name + ")")
                  .c_str(),
              stats.mfu * 100, ">= 60%");
  std::printf("%-34s %14.2f %14s\n", "peak GPU memory GiB",
              stats.peak_memory_bytes / double(1ull << 30), "");
  // The planner's model of this run (xlctl plan --mlp ...), plus the two
  // device input slots the trainer keeps.
  xl::v1::MlpShape shape;
  shape.set_input_dim(c.input_dim);
  shape.set_hidden_dim(c.hidden_dim);
  shape.set_hidden_layers(c.hidden_layers);
  shape.set_classes(c.classes);
  const int batch = stats.batch_per_rank;
  const double predicted =
      static_cast<double>(
          xl::planner::MlpMemory(shape, batch, c.precision, false)
              .total_bytes()) +
      2.0 * batch * (4.0 * c.input_dim + 4);
  const double measured = static_cast<double>(stats.peak_memory_bytes);
  const double off = measured > 0 ? 100 * (predicted - measured) / measured : 0;
  std::printf("%-34s %14.2f %14s\n", "predicted memory GiB (planner)",
              predicted / double(1ull << 30), "");
  std::printf("%-34s %13.1f%% %14s\n", "prediction vs measured", off,
              "within 10%");
  std::printf("%s", GpuPeakTable().c_str());
  std::printf(
      "ROW precision=%s batch=%d samples_s=%.0f step_ms=%.2f mfu_pct=%.1f "
      "peak_tflops=%.0f measured_gib=%.2f predicted_gib=%.2f off_pct=%.1f\n",
      xl::v1::Precision_Name(c.precision).c_str(), batch,
      stats.samples_per_second, stats.step_seconds * 1e3, stats.mfu * 100,
      stats.peak_tflops, measured / double(1ull << 30),
      predicted / double(1ull << 30), off);
  return 0;
}
