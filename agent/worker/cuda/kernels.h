// The CUDA kernels of xl-train's MLP (see train_config.h for the math): fused
// bias + ReLU forward and backward with a deterministic bias-gradient
// reduction, fused softmax cross-entropy, fused AdamW that also writes the
// low-precision weight copy, casts, and fp16 dynamic loss scaling. Every
// launcher enqueues on `stream` and returns the launch's cudaError_t.
// Included only by the worker's CUDA files. Element type T is float,
// __nv_bfloat16 or __half; all arithmetic is fp32.
#ifndef XL_AGENT_WORKER_CUDA_KERNELS_H_
#define XL_AGENT_WORKER_CUDA_KERNELS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace xl::worker {

// Device-resident optimizer and loss-scaling state, so a step never waits
// on the host. t counts applied (not skipped) AdamW steps.
struct OptimizerState {
  float loss_scale;  // 1 unless FP16
  int good_steps;    // finite steps since the scale last changed
  int found_inf;     // set by UnscaleAndCheck, cleared by ResetFoundInf
  int skip;          // this step's update is skipped (overflow)
  long long t;       // AdamW step count after this step
  float bias_correction1;
  float bias_correction2;
};

inline constexpr int kLossScaleGrowthInterval = 2000;
inline constexpr float kInitialLossScale = 65536.0f;

// y = relu?(z + bias) per row; z is [rows x cols] row-major, bias [cols].
// z and y may alias when Tin == Tout.
template <typename Tin, typename Tout>
cudaError_t LaunchBiasActivation(const Tin* z, const float* bias, Tout* y,
                                 int rows, int cols, bool relu,
                                 cudaStream_t stream);

// Floats of scratch LaunchReluBackwardBiasGrad needs for rows x cols.
size_t BiasGradScratchFloats(int rows, int cols);

// dz = dy * (y > 0) (or dz = dy when y is null), and db[c] = sum over rows
// of dz[., c] in fp32, in a fixed order (deterministic); with `accumulate`
// that sum is added to db[c] (gradient accumulation). dz may alias dy.
template <typename T>
cudaError_t LaunchReluBackwardBiasGrad(const T* dy, const T* y, T* dz,
                                       float* db, float* scratch, int rows,
                                       int cols, cudaStream_t stream,
                                       bool accumulate = false);

// Per row r: logits = z[r] + bias; row_loss[r] = logsumexp(logits) -
// logits[label]; dlogits[r] = (softmax(logits) - onehot(label)) / grad_rows
// * loss_scale (loss_scale read from `state`, or 1 when state is null).
// grad_rows is the rows the gradient is a mean over: `rows` when 0, the
// step's whole batch (micro-batch x micro-batches) when accumulating.
template <typename T>
cudaError_t LaunchSoftmaxCrossEntropy(const T* z, const float* bias,
                                      const int32_t* labels, float* row_loss,
                                      T* dlogits, int rows, int cols,
                                      const OptimizerState* state,
                                      cudaStream_t stream, int grad_rows = 0);

// *mean = sum(row_loss[0..rows)) / divisor_rows (rows when 0), in a fixed
// order; with `accumulate` added to *mean instead.
cudaError_t LaunchMeanLoss(const float* row_loss, int rows, float* mean,
                           cudaStream_t stream, int divisor_rows = 0,
                           bool accumulate = false);

// g *= 1 / loss_scale; sets state->found_inf when any g is inf or nan.
cudaError_t LaunchUnscaleAndCheck(float* g, size_t n, OptimizerState* state,
                                  cudaStream_t stream);

// One thread: decides whether this step applies (no overflow), advances t
// and the bias corrections, and updates the loss scale when `dynamic`
// (halve on overflow, double after kLossScaleGrowthInterval good steps).
cudaError_t LaunchPrepareOptimizerStep(OptimizerState* state, bool dynamic,
                                       cudaStream_t stream);

// Clears found_inf before the next step.
cudaError_t LaunchResetFoundInf(OptimizerState* state, cudaStream_t stream);

// AdamW (adamw.h's exact float formula) over w[0..n) unless state->skip:
// fp32 master w, m, v; lr = float(learning_rate), lr_wd = float(learning_rate
// * weight_decay) for a W and 0 for a bias; writes w_low[i] = T(w[i]) when
// w_low is non-null.
template <typename T>
cudaError_t LaunchAdamW(float* w, const float* g, float* m, float* v, T* w_low,
                        size_t n, float lr, float lr_wd,
                        const OptimizerState* state, cudaStream_t stream);

template <typename T>
cudaError_t LaunchCastFromFloat(const float* in, T* out, size_t n,
                                cudaStream_t stream);
template <typename T>
cudaError_t LaunchCastToFloat(const T* in, float* out, size_t n,
                              cudaStream_t stream);

// cudaSuccess when this build has code the current device can run (machine
// code for its architecture, or PTX the driver can compile for it);
// cudaErrorNoKernelImageForDevice (or another error) when not.
cudaError_t ProbeKernelImage();

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_CUDA_KERNELS_H_
