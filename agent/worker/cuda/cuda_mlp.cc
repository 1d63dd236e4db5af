#include "agent/worker/cuda/cuda_mlp.h"

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "agent/worker/cuda/cuda_check.h"

namespace xl::worker {
namespace {

template <typename T>
cudaDataType_t CudaType();
template <>
cudaDataType_t CudaType<float>() {
  return CUDA_R_32F;
}
template <>
cudaDataType_t CudaType<__nv_bfloat16>() {
  return CUDA_R_16BF;
}
template <>
cudaDataType_t CudaType<__half>() {
  return CUDA_R_16F;
}

size_t ElementSize(v1::Precision p) { return p == v1::FP32 ? 4 : 2; }

// Column-major cuBLAS on row-major buffers: a row-major [r x c] matrix is a
// column-major [c x r] one, so every row-major product below is computed
// as its transpose. A and B are of type T, C of type `c_type`, fp32
// accumulation; with `accumulate` the product is added to C (beta 1).
template <typename T>
absl::Status Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                  int m, int n, int k, const T* a, int lda, const T* b, int ldb,
                  void* c, cudaDataType_t c_type, int ldc,
                  bool accumulate = false) {
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  XL_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &alpha, a, CudaType<T>(),
                               lda, b, CudaType<T>(), ldb, &beta, c, c_type,
                               ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

// Y [B x out] = X [B x in] W^T, W [out x in]:  Y^T = W X^T (col-major).
template <typename T>
absl::Status GemmForward(cublasHandle_t h, const T* x, const T* w, T* y,
                         int batch, int in, int out) {
  return Gemm<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, w, in, x, in, y,
                 CudaType<T>(), out);
}

// dX [B x in] = dY [B x out] W:  dX^T = W^T dY^T (col-major).
template <typename T>
absl::Status GemmInputGrad(cublasHandle_t h, const T* dy, const T* w, T* dx,
                           int batch, int in, int out) {
  return Gemm<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, w, in, dy, out,
                 dx, CudaType<T>(), in);
}

// dW [out x in] (+)= dY^T X (fp32):  dW^T = X^T dY (col-major).
template <typename T>
absl::Status GemmWeightGrad(cublasHandle_t h, const T* dy, const T* x,
                            float* dw, int batch, int in, int out,
                            bool accumulate) {
  return Gemm<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, x, in, dy, out,
                 dw, CUDA_R_32F, in, accumulate);
}

}  // namespace

v1::Precision GpuPrecision(v1::Precision p) {
  return p == v1::PRECISION_UNSPECIFIED ? v1::BF16 : p;
}

CudaMlp::CudaMlp(const TrainConfig& config, int max_batch, cudaStream_t stream)
    : config_(config),
      precision_(GpuPrecision(config.precision)),
      layers_(LayerSpans(config)),
      count_(config.ParamCount()),
      max_batch_(max_batch),
      stream_(stream) {
  for (const LayerSpan& s : layers_) {
    max_width_ = std::max({max_width_, s.in, s.out});
  }
}

CudaMlp::~CudaMlp() {
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  for (void* p : allocations_) cudaFree(p);
}

absl::StatusOr<std::unique_ptr<CudaMlp>> CudaMlp::Create(
    const TrainConfig& config, int max_batch, cudaStream_t stream) {
  std::unique_ptr<CudaMlp> mlp(new CudaMlp(config, max_batch, stream));
  absl::Status st = mlp->Allocate();
  if (!st.ok()) return st;
  return mlp;
}

absl::Status CudaMlp::Malloc(void** p, size_t bytes) {
  bytes = std::max<size_t>(bytes, 256);
  cudaError_t err = cudaMalloc(p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return absl::ResourceExhaustedError(
        absl::StrCat("GPU out of memory allocating ", bytes, " bytes after ",
                     allocated_, " bytes (", free_b, " of ", total_b,
                     " free); lower train.batch_per_rank or the model size"));
  }
  XL_CUDA_CHECK(err);
  allocations_.push_back(*p);
  allocated_ += bytes;
  return absl::OkStatus();
}

absl::Status CudaMlp::Allocate() {
  XL_CUBLAS_CHECK(cublasCreate(&cublas_));
  XL_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // FP32 is the reference mode: no TF32, no reduced-precision reductions.
  XL_CUBLAS_CHECK(cublasSetMathMode(cublas_, precision_ == v1::FP32
                                                 ? CUBLAS_PEDANTIC_MATH
                                                 : CUBLAS_DEFAULT_MATH));
  const size_t pbytes = static_cast<size_t>(count_) * sizeof(float);
  const size_t es = ElementSize(precision_);
  auto alloc = [&](auto** p, size_t bytes) {
    return Malloc(reinterpret_cast<void**>(p), bytes);
  };
  absl::Status st;
  if (!(st = alloc(&params_, pbytes)).ok()) return st;
  if (!(st = alloc(&grads_, pbytes)).ok()) return st;
  if (!(st = alloc(&m_, pbytes)).ok()) return st;
  if (!(st = alloc(&v_, pbytes)).ok()) return st;
  XL_CUDA_CHECK(cudaMemsetAsync(grads_, 0, pbytes, stream_));
  XL_CUDA_CHECK(cudaMemsetAsync(m_, 0, pbytes, stream_));
  XL_CUDA_CHECK(cudaMemsetAsync(v_, 0, pbytes, stream_));
  if (precision_ == v1::FP32) {
    params_low_ = params_;
  } else if (!(st = alloc(&params_low_, static_cast<size_t>(count_) * es))
                  .ok()) {
    return st;
  }
  const size_t b = static_cast<size_t>(max_batch_);
  acts_.assign(layers_.size(), nullptr);
  for (size_t l = 0; l < layers_.size(); ++l) {
    // FP32 reads x in place for layer 0.
    if (l == 0 && precision_ == v1::FP32) continue;
    if (!(st = alloc(&acts_[l], b * layers_[l].in * es)).ok()) return st;
  }
  if (!(st = alloc(&logits_, b * config_.classes * es)).ok()) return st;
  if (!(st = alloc(&dz_a_, b * max_width_ * es)).ok()) return st;
  if (!(st = alloc(&dz_b_, b * max_width_ * es)).ok()) return st;
  if (!(st = alloc(&row_loss_, b * sizeof(float))).ok()) return st;
  if (!(st = alloc(&loss_, sizeof(float))).ok()) return st;
  if (!(st = alloc(
            &bias_scratch_,
            BiasGradScratchFloats(max_batch_, max_width_) * sizeof(float)))
           .ok()) {
    return st;
  }
  if (!(st = alloc(&state_, sizeof(OptimizerState))).ok()) return st;
  OptimizerState init{};
  init.loss_scale = precision_ == v1::FP16 ? kInitialLossScale : 1.0f;
  XL_CUDA_CHECK(cudaMemcpyAsync(state_, &init, sizeof(init),
                                cudaMemcpyHostToDevice, stream_));
  XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaMlp::RefreshLowCopy() {
  const size_t n = static_cast<size_t>(count_);
  if (precision_ == v1::BF16) {
    XL_CUDA_CHECK(LaunchCastFromFloat(
        params_, static_cast<__nv_bfloat16*>(params_low_), n, stream_));
  } else if (precision_ == v1::FP16) {
    XL_CUDA_CHECK(LaunchCastFromFloat(
        params_, static_cast<__half*>(params_low_), n, stream_));
  }
  return absl::OkStatus();
}

absl::Status CudaMlp::SetParams(const float* host_params) {
  XL_CUDA_CHECK(cudaMemcpyAsync(params_, host_params,
                                static_cast<size_t>(count_) * sizeof(float),
                                cudaMemcpyHostToDevice, stream_));
  absl::Status st = RefreshLowCopy();
  if (!st.ok()) return st;
  XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaMlp::SetOptimizerState(const float* host_m,
                                        const float* host_v, int64_t adam_t,
                                        float loss_scale, int64_t good_steps) {
  const size_t bytes = static_cast<size_t>(count_) * sizeof(float);
  // Every copy on the model's (non-blocking) stream, then a sync: a plain
  // cudaMemcpy from pageable memory may return before its DMA lands, and
  // the next kernel on stream_ would not wait for it.
  XL_CUDA_CHECK(cudaMemcpyAsync(m_, host_m, bytes, cudaMemcpyHostToDevice,
                                stream_));
  XL_CUDA_CHECK(cudaMemcpyAsync(v_, host_v, bytes, cudaMemcpyHostToDevice,
                                stream_));
  OptimizerState s{};
  XL_CUDA_CHECK(cudaMemcpyAsync(&s, state_, sizeof(s), cudaMemcpyDeviceToHost,
                                stream_));
  XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  s.t = adam_t;
  if (precision_ == v1::FP16 && loss_scale > 0) {
    s.loss_scale = loss_scale;
    s.good_steps = static_cast<int>(good_steps);
  }
  XL_CUDA_CHECK(cudaMemcpyAsync(state_, &s, sizeof(s), cudaMemcpyHostToDevice,
                                stream_));
  XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaMlp::GetParams(float* host_params) const {
  XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  XL_CUDA_CHECK(cudaMemcpy(host_params, params_,
                           static_cast<size_t>(count_) * sizeof(float),
                           cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CudaMlp::SetGrads(const float* host_grads) {
  XL_CUDA_CHECK(cudaMemcpyAsync(grads_, host_grads,
                                static_cast<size_t>(count_) * sizeof(float),
                                cudaMemcpyHostToDevice, stream_));
  XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaMlp::GetGrads(float* host_grads) const {
  XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  XL_CUDA_CHECK(cudaMemcpy(host_grads, grads_,
                           static_cast<size_t>(count_) * sizeof(float),
                           cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CudaMlp::GetOptimizerState(float* host_m, float* host_v,
                                        int64_t* adam_t, float* loss_scale,
                                        int64_t* good_steps) const {
  const size_t bytes = static_cast<size_t>(count_) * sizeof(float);
  XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  XL_CUDA_CHECK(cudaMemcpy(host_m, m_, bytes, cudaMemcpyDeviceToHost));
  XL_CUDA_CHECK(cudaMemcpy(host_v, v_, bytes, cudaMemcpyDeviceToHost));
  OptimizerState s{};
  XL_CUDA_CHECK(cudaMemcpy(&s, state_, sizeof(s), cudaMemcpyDeviceToHost));
  *adam_t = s.t;
  if (loss_scale != nullptr) {
    *loss_scale = precision_ == v1::FP16 ? s.loss_scale : 0.0f;
  }
  if (good_steps != nullptr) {
    *good_steps = precision_ == v1::FP16 ? s.good_steps : 0;
  }
  return absl::OkStatus();
}

absl::StatusOr<float> CudaMlp::Loss() const {
  float loss = 0;
  XL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  XL_CUDA_CHECK(
      cudaMemcpy(&loss, loss_, sizeof(float), cudaMemcpyDeviceToHost));
  return loss;
}

absl::Status CudaMlp::ForwardBackward(
    const float* x, const int32_t* labels, int batch,
    const std::function<absl::Status(int)>& on_layer_grads, MicroBatch micro) {
  if (batch <= 0 || batch > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " outside [1, ", max_batch_, "]"));
  }
  if (micro.count < 1 || micro.index < 0 || micro.index >= micro.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch ", micro.index, " of ", micro.count, " is out of range"));
  }
  // The step's rows divide the gradient as a float: exact up to 2^24.
  if (int64_t{batch} * micro.count > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        batch, " x ", micro.count, " samples per step is over 2^24"));
  }
  switch (precision_) {
    case v1::BF16:
      return ForwardBackwardT<__nv_bfloat16>(x, labels, batch, on_layer_grads,
                                             micro);
    case v1::FP16:
      return ForwardBackwardT<__half>(x, labels, batch, on_layer_grads, micro);
    default:
      return ForwardBackwardT<float>(x, labels, batch, on_layer_grads, micro);
  }
}

template <typename T>
absl::Status CudaMlp::ForwardBackwardT(
    const float* x, const int32_t* labels, int batch,
    const std::function<absl::Status(int)>& cb, MicroBatch micro) {
  // Micro-batches after the first add to the gradients and the loss; the
  // gradient and the loss are means over the step's micro.count * batch.
  const bool acc = micro.index > 0;
  const int step_rows = batch * micro.count;
  const int L = static_cast<int>(layers_.size());
  const T* w_low = static_cast<const T*>(params_low_);
  const OptimizerState* scale_state = precision_ == v1::FP16 ? state_ : nullptr;
  absl::Status st;

  // Forward. acts_[0] holds x in T (FP32 uses x itself).
  const T* a0;
  if constexpr (std::is_same_v<T, float>) {
    a0 = x;
  } else {
    XL_CUDA_CHECK(LaunchCastFromFloat(
        x, static_cast<T*>(acts_[0]),
        static_cast<size_t>(batch) * layers_[0].in, stream_));
    a0 = static_cast<const T*>(acts_[0]);
  }
  auto act = [&](int l) -> const T* {
    return l == 0 ? a0 : static_cast<const T*>(acts_[l]);
  };
  for (int l = 0; l < L; ++l) {
    const LayerSpan& s = layers_[l];
    const bool last = l == L - 1;
    T* z = last ? static_cast<T*>(logits_) : static_cast<T*>(acts_[l + 1]);
    st = GemmForward<T>(cublas_, act(l), w_low + s.w_offset, z, batch, s.in,
                        s.out);
    if (!st.ok()) return st;
    const float* bias = params_ + s.b_offset;
    if (!last) {
      XL_CUDA_CHECK(LaunchBiasActivation<T, T>(z, bias, z, batch, s.out,
                                               /*relu=*/true, stream_));
    } else {
      XL_CUDA_CHECK(LaunchSoftmaxCrossEntropy<T>(
          z, bias, labels, row_loss_, static_cast<T*>(dz_a_), batch, s.out,
          scale_state, stream_, step_rows));
      XL_CUDA_CHECK(
          LaunchMeanLoss(row_loss_, batch, loss_, stream_, step_rows, acc));
    }
  }

  // Backward. dz: gradient of the current layer's pre-activation.
  T* dz = static_cast<T*>(dz_a_);
  T* spare = static_cast<T*>(dz_b_);
  XL_CUDA_CHECK(LaunchReluBackwardBiasGrad<T>(
      dz, nullptr, dz, grads_ + layers_[L - 1].b_offset, bias_scratch_, batch,
      layers_[L - 1].out, stream_, acc));
  for (int l = L - 1; l >= 0; --l) {
    const LayerSpan& s = layers_[l];
    st = GemmWeightGrad<T>(cublas_, dz, act(l), grads_ + s.w_offset, batch,
                           s.in, s.out, acc);
    if (!st.ok()) return st;
    if (cb) {
      st = cb(l);
      if (!st.ok()) return st;
    }
    if (l == 0) break;  // no one needs dX of the input
    st = GemmInputGrad<T>(cublas_, dz, w_low + s.w_offset, spare, batch, s.in,
                          s.out);
    if (!st.ok()) return st;
    // Layer l's input is layer l-1's post-ReLU output: its mask.
    XL_CUDA_CHECK(LaunchReluBackwardBiasGrad<T>(
        spare, act(l), spare, grads_ + layers_[l - 1].b_offset, bias_scratch_,
        batch, s.in, stream_, acc));
    std::swap(dz, spare);
  }
  return absl::OkStatus();
}

absl::Status CudaMlp::Step() {
  switch (precision_) {
    case v1::BF16:
      return StepT<__nv_bfloat16>();
    case v1::FP16:
      return StepT<__half>();
    default:
      return StepT<float>();
  }
}

template <typename T>
absl::Status CudaMlp::StepT() {
  const bool dynamic = precision_ == v1::FP16;
  if (dynamic) {
    XL_CUDA_CHECK(LaunchUnscaleAndCheck(grads_, static_cast<size_t>(count_),
                                        state_, stream_));
  }
  XL_CUDA_CHECK(LaunchPrepareOptimizerStep(state_, dynamic, stream_));
  const float lr = static_cast<float>(config_.learning_rate);
  const float lr_wd =
      static_cast<float>(config_.learning_rate * config_.weight_decay);
  // FP32 has no separate copy: the master weights are what the GEMMs read.
  T* low = std::is_same_v<T, float> ? nullptr : static_cast<T*>(params_low_);
  for (const LayerSpan& s : layers_) {
    XL_CUDA_CHECK(LaunchAdamW<T>(
        params_ + s.w_offset, grads_ + s.w_offset, m_ + s.w_offset,
        v_ + s.w_offset, low == nullptr ? nullptr : low + s.w_offset,
        static_cast<size_t>(s.w_size), lr, lr_wd, state_, stream_));
    // Biases are read in fp32 by the kernels: no low-precision copy.
    XL_CUDA_CHECK(LaunchAdamW<T>(params_ + s.b_offset, grads_ + s.b_offset,
                                 m_ + s.b_offset, v_ + s.b_offset, nullptr,
                                 static_cast<size_t>(s.b_size), lr, 0.0f,
                                 state_, stream_));
  }
  if (dynamic) XL_CUDA_CHECK(LaunchResetFoundInf(state_, stream_));
  return absl::OkStatus();
}

}  // namespace xl::worker
