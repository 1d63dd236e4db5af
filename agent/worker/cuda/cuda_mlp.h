// CudaMlp: train_config.h's MLP on one GPU. fp32 master weights, gradients
// and AdamW moments in flat buffers laid out like Mlp's (LayerSpans); a
// bf16/fp16 copy of the weights feeds cuBLAS GEMMs (fp32 accumulation,
// CUBLAS_COMPUTE_32F) when the precision is BF16/FP16; FP32 runs plain fp32
// GEMMs with TF32 off (pedantic math) and is what the CPU comparison uses.
// Everything is enqueued on one compute stream; not thread-safe. Included
// only by CUDA files.
#ifndef XL_AGENT_WORKER_CUDA_CUDA_MLP_H_
#define XL_AGENT_WORKER_CUDA_CUDA_MLP_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/worker/cuda/kernels.h"
#include "agent/worker/loop/train_config.h"
#include "agent/worker/model/mlp.h"

namespace xl::worker {

// BF16 for PRECISION_UNSPECIFIED (the GPU default), else the precision.
v1::Precision GpuPrecision(v1::Precision p);

class CudaMlp {
 public:
  // Allocates every buffer on the current device for batches up to
  // `max_batch`. The stream is not owned. RESOURCE_EXHAUSTED when the
  // model does not fit.
  static absl::StatusOr<std::unique_ptr<CudaMlp>> Create(
      const TrainConfig& config, int max_batch, cudaStream_t stream);
  ~CudaMlp();
  CudaMlp(const CudaMlp&) = delete;
  CudaMlp& operator=(const CudaMlp&) = delete;

  // Copies fp32 params (param_count() floats, host) to the master weights
  // and refreshes the low-precision copy. Synchronous.
  absl::Status SetParams(const float* host_params);
  // Sets the AdamW moments and step count (resume), and for FP16 the loss
  // scale and its overflow-free step count when loss_scale > 0.
  // Synchronous.
  absl::Status SetOptimizerState(const float* host_m, const float* host_v,
                                 int64_t adam_t, float loss_scale = 0,
                                 int64_t good_steps = 0);
  // Copies master params / grads / moments to the host. Synchronous.
  // Overwrites the gradients (tests of Step). Synchronous.
  absl::Status SetGrads(const float* host_grads);
  absl::Status GetParams(float* host_params) const;
  absl::Status GetGrads(float* host_grads) const;
  absl::Status GetOptimizerState(float* host_m, float* host_v,
                                 int64_t* adam_t, float* loss_scale = nullptr,
                                 int64_t* good_steps = nullptr) const;

  // Which micro-batch of a step a ForwardBackward is (gradient
  // accumulation): index in [0, count). (No member initializers: GCC
  // cannot use them in a default argument inside the enclosing class.)
  struct MicroBatch {
    int index;
    int count;
  };

  // Enqueues forward and backward for x [batch x input_dim] (device fp32)
  // and labels [batch] (device). The first micro-batch of a step overwrites
  // grads() and loss_device(); later ones add to them. Both are means over
  // the step's micro.count * batch samples, so after the last micro-batch
  // they equal one ForwardBackward of the whole step's batch (up to
  // rounding). After layer l's (0-based) dW and db are enqueued it calls
  // on_layer_grads(l), layers in reverse order, so the caller can record an
  // event and start that bucket's all-reduce (on the last micro-batch).
  absl::Status ForwardBackward(
      const float* x, const int32_t* labels, int batch,
      const std::function<absl::Status(int)>& on_layer_grads = nullptr,
      MicroBatch micro = {0, 1});

  // Enqueues one AdamW step on grads() (already averaged over ranks): for
  // FP16, unscales and skips the step on inf/nan, adjusting the loss scale.
  absl::Status Step();

  // The mean loss of the last ForwardBackward, synchronously.
  absl::StatusOr<float> Loss() const;

  float* grads() { return grads_; }
  float* params() { return params_; }
  const float* loss_device() const { return loss_; }
  const OptimizerState* state_device() const { return state_; }
  const std::vector<LayerSpan>& layers() const { return layers_; }
  int64_t param_count() const { return count_; }
  v1::Precision precision() const { return precision_; }
  // Device bytes this model allocated.
  uint64_t allocated_bytes() const { return allocated_; }
  cudaStream_t stream() const { return stream_; }

 private:
  CudaMlp(const TrainConfig& config, int max_batch, cudaStream_t stream);
  absl::Status Allocate();
  absl::Status Malloc(void** p, size_t bytes);
  absl::Status RefreshLowCopy();
  template <typename T>
  absl::Status ForwardBackwardT(const float* x, const int32_t* labels,
                                int batch,
                                const std::function<absl::Status(int)>& cb,
                                MicroBatch micro);
  template <typename T>
  absl::Status StepT();

  TrainConfig config_;
  v1::Precision precision_;
  std::vector<LayerSpan> layers_;
  int64_t count_ = 0;
  int max_batch_ = 0;
  int max_width_ = 0;
  cudaStream_t stream_;
  cublasHandle_t cublas_ = nullptr;
  uint64_t allocated_ = 0;
  std::vector<void*> allocations_;

  float* params_ = nullptr;  // fp32 master
  float* grads_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
  void* params_low_ = nullptr;  // T copy; == params_ for FP32
  // acts_[l]: input of layer l in T ([batch x in_l]); acts_[0] is x cast.
  std::vector<void*> acts_;
  void* logits_ = nullptr;  // [batch x classes] T
  void* dz_a_ = nullptr;    // ping-pong gradients [batch x max width] T
  void* dz_b_ = nullptr;
  float* row_loss_ = nullptr;
  float* loss_ = nullptr;
  float* bias_scratch_ = nullptr;
  OptimizerState* state_ = nullptr;
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_CUDA_CUDA_MLP_H_
