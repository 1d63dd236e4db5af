// Host-array entry points for the GPU tests (cuda_host_ops.h), and the
// table of GPU peaks behind MFU (cuda_trainer.h).
#include "agent/worker/cuda/cuda_host_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/worker/comm/nccl_collective.h"
#include "agent/worker/cuda/cuda_check.h"
#include "agent/worker/cuda/cuda_mlp.h"
#include "agent/worker/cuda/cuda_trainer.h"
#include "agent/worker/cuda/kernels.h"
#include "common/status.h"

namespace xl::worker {
namespace {

struct PeakRow {
  const char* match;  // substring of cudaDeviceProp::name
  int sm_count;       // 0: any
  double bf16_tflops;  // dense tensor-core bf16, the same as fp16
  double fp32_tflops;  // CUDA cores, no TF32 (xl-train's FP32 is pedantic)
};

// Dense (no sparsity) peaks from the vendor data sheets. First match wins,
// so more specific names come first.
constexpr PeakRow kPeaks[] = {
    {"GH200", 0, 989.0, 67.0},      {"H200 NVL", 0, 835.0, 60.0},
    {"H200", 0, 989.0, 67.0},       {"H100 NVL", 0, 835.0, 60.0},
    {"H100 PCIe", 0, 756.0, 51.0},  {"H100", 114, 756.0, 51.0},
    {"H100", 0, 989.0, 67.0},  // 132 SMs: SXM
    {"H800", 0, 989.0, 67.0},       {"B200", 0, 2250.0, 80.0},
    {"A100", 0, 312.0, 19.5},       {"A800", 0, 312.0, 19.5},
    {"A30", 0, 165.0, 10.3},        {"A40", 0, 149.7, 37.4},
    {"L40S", 0, 362.0, 91.6},       {"L40", 0, 181.0, 90.5},
    {"L4", 0, 121.0, 30.3},         {"A10G", 0, 70.0, 31.2},
    {"A10", 0, 125.0, 31.2},        {"RTX 6000 Ada", 0, 364.0, 91.1},
};

// A device buffer freed at scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
};

template <typename T>
absl::Status Upload(const std::vector<float>& host, DeviceBuffer* buf) {
  std::vector<T> tmp(host.size());
  for (size_t i = 0; i < host.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      tmp[i] = host[i];
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      tmp[i] = __float2bfloat16_rn(host[i]);
    } else {
      tmp[i] = __float2half_rn(host[i]);
    }
  }
  XL_CUDA_CHECK(
      cudaMalloc(&buf->p, std::max<size_t>(1, tmp.size()) * sizeof(T)));
  XL_CUDA_CHECK(cudaMemcpy(buf->p, tmp.data(), tmp.size() * sizeof(T),
                           cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return before the DMA lands, and
  // the caller's next stream (NCCL's, non-blocking) would not wait for it.
  XL_CUDA_CHECK(cudaDeviceSynchronize());
  return absl::OkStatus();
}

template <typename T>
absl::Status Download(const DeviceBuffer& buf, size_t n,
                      std::vector<float>* out) {
  std::vector<T> tmp(n);
  XL_CUDA_CHECK(
      cudaMemcpy(tmp.data(), buf.p, n * sizeof(T), cudaMemcpyDeviceToHost));
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      (*out)[i] = tmp[i];
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      (*out)[i] = __bfloat162float(tmp[i]);
    } else {
      (*out)[i] = __half2float(tmp[i]);
    }
  }
  return absl::OkStatus();
}

absl::Status Alloc(DeviceBuffer* buf, size_t bytes) {
  XL_CUDA_CHECK(cudaMalloc(&buf->p, std::max<size_t>(bytes, 4)));
  XL_CUDA_CHECK(cudaMemset(buf->p, 0, std::max<size_t>(bytes, 4)));
  return absl::OkStatus();
}

absl::Status RequireGpu() {
  if (CudaDeviceCount() == 0) {
    return absl::FailedPreconditionError("no CUDA device");
  }
  XL_CUDA_CHECK(cudaSetDevice(0));
  return absl::OkStatus();
}

template <typename T>
absl::Status BiasActivationT(const std::vector<float>& z,
                             const std::vector<float>& bias, int rows, int cols,
                             bool relu, std::vector<float>* y) {
  DeviceBuffer dz, db;
  RETURN_IF_ERROR(Upload<T>(z, &dz));
  RETURN_IF_ERROR(Upload<float>(bias, &db));
  XL_CUDA_CHECK(LaunchBiasActivation<T, T>(
      static_cast<T*>(dz.p), static_cast<float*>(db.p), static_cast<T*>(dz.p),
      rows, cols, relu, nullptr));
  XL_CUDA_CHECK(cudaDeviceSynchronize());
  return Download<T>(dz, z.size(), y);
}

template <typename T>
absl::Status ReluBackwardT(const std::vector<float>& dy,
                           const std::vector<float>& y, int rows, int cols,
                           std::vector<float>* dz, std::vector<float>* db) {
  DeviceBuffer ddy, dyv, ddb, scratch;
  RETURN_IF_ERROR(Upload<T>(dy, &ddy));
  if (!y.empty()) RETURN_IF_ERROR(Upload<T>(y, &dyv));
  RETURN_IF_ERROR(Alloc(&ddb, cols * sizeof(float)));
  RETURN_IF_ERROR(
      Alloc(&scratch, BiasGradScratchFloats(rows, cols) * sizeof(float)));
  XL_CUDA_CHECK(LaunchReluBackwardBiasGrad<T>(
      static_cast<T*>(ddy.p), static_cast<T*>(dyv.p), static_cast<T*>(ddy.p),
      static_cast<float*>(ddb.p), static_cast<float*>(scratch.p), rows, cols,
      nullptr));
  XL_CUDA_CHECK(cudaDeviceSynchronize());
  RETURN_IF_ERROR(Download<T>(ddy, dy.size(), dz));
  return Download<float>(ddb, cols, db);
}

template <typename T>
absl::Status SoftmaxT(const std::vector<float>& logits,
                      const std::vector<int32_t>& labels, int rows, int cols,
                      float* loss, std::vector<float>* dlogits) {
  DeviceBuffer dz, dbias, dl, drow, dloss, dd;
  RETURN_IF_ERROR(Upload<T>(logits, &dz));
  RETURN_IF_ERROR(Alloc(&dbias, cols * sizeof(float)));
  XL_CUDA_CHECK(cudaMalloc(&dl.p, labels.size() * sizeof(int32_t)));
  XL_CUDA_CHECK(cudaMemcpy(dl.p, labels.data(), labels.size() * sizeof(int32_t),
                           cudaMemcpyHostToDevice));
  RETURN_IF_ERROR(Alloc(&drow, rows * sizeof(float)));
  RETURN_IF_ERROR(Alloc(&dloss, sizeof(float)));
  RETURN_IF_ERROR(Alloc(&dd, logits.size() * sizeof(T)));
  XL_CUDA_CHECK(LaunchSoftmaxCrossEntropy<T>(
      static_cast<T*>(dz.p), static_cast<float*>(dbias.p),
      static_cast<int32_t*>(dl.p), static_cast<float*>(drow.p),
      static_cast<T*>(dd.p), rows, cols, nullptr, nullptr));
  XL_CUDA_CHECK(LaunchMeanLoss(static_cast<float*>(drow.p), rows,
                               static_cast<float*>(dloss.p), nullptr));
  XL_CUDA_CHECK(cudaDeviceSynchronize());
  XL_CUDA_CHECK(
      cudaMemcpy(loss, dloss.p, sizeof(float), cudaMemcpyDeviceToHost));
  return Download<T>(dd, logits.size(), dlogits);
}

// Calls f(T{}) with T the element type of `precision` (BF16 otherwise).
template <typename F>
absl::Status WithElementType(v1::Precision precision, F&& f) {
  switch (precision) {
    case v1::FP32:
      return f(float{});
    case v1::FP16:
      return f(__half{});
    default:
      return f(__nv_bfloat16{});
  }
}

}  // namespace

absl::StatusOr<GpuPeak> LookupGpuPeak(int device) {
  cudaDeviceProp prop;
  XL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  GpuPeak peak;
  peak.name = prop.name;
  peak.sm_count = prop.multiProcessorCount;
  peak.major = prop.major;
  peak.minor = prop.minor;
  for (const PeakRow& row : kPeaks) {
    if (absl::StrContains(peak.name, row.match) &&
        (row.sm_count == 0 || row.sm_count == peak.sm_count)) {
      peak.bf16_tflops = row.bf16_tflops;
      peak.fp32_tflops = row.fp32_tflops;
      break;
    }
  }
  return peak;
}

std::string GpuPeakTable() {
  std::string out =
      "dense peak table (TFLOP/s bf16 = fp16 / fp32, first match by name):\n";
  for (const PeakRow& row : kPeaks) {
    absl::StrAppend(&out, "  ", row.match,
                    row.sm_count > 0 ? absl::StrCat(" (", row.sm_count, " SMs)")
                                     : std::string(),
                    ": ", row.bf16_tflops, " / ", row.fp32_tflops, "\n");
  }
  return out;
}

double GpuPeak::Tflops(v1::Precision precision) const {
  return precision == v1::FP32 ? fp32_tflops : bf16_tflops;
}

double ModelFlopsUtilization(int64_t params, double samples_per_second,
                             double peak_tflops) {
  if (peak_tflops <= 0) return 0;
  return 6.0 * static_cast<double>(params) * samples_per_second /
         (peak_tflops * 1e12);
}

absl::Status CudaBiasActivationForTest(const std::vector<float>& z,
                                       const std::vector<float>& bias, int rows,
                                       int cols, bool relu,
                                       v1::Precision precision,
                                       std::vector<float>* y) {
  RETURN_IF_ERROR(RequireGpu());
  return WithElementType(precision, [&](auto tag) {
    using T = decltype(tag);
    return BiasActivationT<T>(z, bias, rows, cols, relu, y);
  });
}

absl::Status CudaReluBackwardForTest(const std::vector<float>& dy,
                                     const std::vector<float>& y, int rows,
                                     int cols, v1::Precision precision,
                                     std::vector<float>* dz,
                                     std::vector<float>* db) {
  RETURN_IF_ERROR(RequireGpu());
  return WithElementType(precision, [&](auto tag) {
    using T = decltype(tag);
    return ReluBackwardT<T>(dy, y, rows, cols, dz, db);
  });
}

absl::Status CudaSoftmaxCrossEntropyForTest(const std::vector<float>& logits,
                                            const std::vector<int32_t>& labels,
                                            int rows, int cols,
                                            v1::Precision precision,
                                            float* loss,
                                            std::vector<float>* dlogits) {
  RETURN_IF_ERROR(RequireGpu());
  return WithElementType(precision, [&](auto tag) {
    using T = decltype(tag);
    return SoftmaxT<T>(logits, labels, rows, cols, loss, dlogits);
  });
}

absl::Status CudaAdamWStepForTest(const TrainConfig& config,
                                  std::vector<float>* params,
                                  const std::vector<float>& grads,
                                  std::vector<float>* m, std::vector<float>* v,
                                  int64_t* adam_t) {
  RETURN_IF_ERROR(RequireGpu());
  cudaStream_t stream;
  XL_CUDA_CHECK(cudaStreamCreate(&stream));
  absl::Status st = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<CudaMlp> mlp,
                     CudaMlp::Create(config, 1, stream));
    RETURN_IF_ERROR(mlp->SetParams(params->data()));
    RETURN_IF_ERROR(mlp->SetOptimizerState(m->data(), v->data(), *adam_t));
    RETURN_IF_ERROR(mlp->SetGrads(grads.data()));
    RETURN_IF_ERROR(mlp->Step());
    RETURN_IF_ERROR(mlp->GetParams(params->data()));
    return mlp->GetOptimizerState(m->data(), v->data(), adam_t);
  }();
  cudaStreamDestroy(stream);
  return st;
}

absl::Status CudaForwardBackwardForTest(
    const TrainConfig& config, const std::vector<float>& params,
    const std::vector<float>& x, const std::vector<int32_t>& labels, int batch,
    float* loss, std::vector<float>* grads, int micro_batches) {
  RETURN_IF_ERROR(RequireGpu());
  if (micro_batches < 1 || batch % micro_batches != 0) {
    return absl::InvalidArgumentError("micro_batches must divide batch");
  }
  const int micro = batch / micro_batches;
  cudaStream_t stream;
  XL_CUDA_CHECK(cudaStreamCreate(&stream));
  absl::Status st = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<CudaMlp> mlp,
                     CudaMlp::Create(config, micro, stream));
    RETURN_IF_ERROR(mlp->SetParams(params.data()));
    DeviceBuffer dx, dl;
    RETURN_IF_ERROR(Upload<float>(x, &dx));
    XL_CUDA_CHECK(cudaMalloc(&dl.p, labels.size() * sizeof(int32_t)));
    XL_CUDA_CHECK(cudaMemcpy(dl.p, labels.data(),
                             labels.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice));
    for (int m = 0; m < micro_batches; ++m) {
      RETURN_IF_ERROR(mlp->ForwardBackward(
          static_cast<float*>(dx.p) +
              static_cast<size_t>(m) * micro * config.input_dim,
          static_cast<int32_t*>(dl.p) + static_cast<size_t>(m) * micro, micro,
          nullptr, CudaMlp::MicroBatch{m, micro_batches}));
    }
    ASSIGN_OR_RETURN(*loss, mlp->Loss());
    grads->resize(mlp->param_count());
    return mlp->GetGrads(grads->data());
  }();
  cudaStreamDestroy(stream);
  return st;
}

absl::Status CudaAllReduceForTest(int device, int rank, int world,
                                  Rendezvous* rendezvous,
                                  const std::string& key,
                                  std::vector<float>* data) {
  XL_CUDA_CHECK(cudaSetDevice(device));
  NcclOptions options = NcclOptions::FromEnv();
  options.key = key;
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCollective> nccl,
                   NcclCollective::Create(rank, world, rendezvous, options));
  DeviceBuffer d;
  RETURN_IF_ERROR(Upload<float>(*data, &d));
  RETURN_IF_ERROR(nccl->AllReduceMean(static_cast<float*>(d.p), data->size()));
  return Download<float>(d, data->size(), data);
}

}  // namespace xl::worker
