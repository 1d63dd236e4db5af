// Kernels of the CUDA MLP; see kernels.h for the contract of each launcher.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "agent/worker/cuda/kernels.h"

namespace xl::worker {
namespace {

constexpr double kBeta1 = 0.9;
constexpr double kBeta2 = 0.999;

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float ToF(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ float FromF<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half FromF<__half>(float x) {
  return __float2half_rn(x);
}

int GridFor(size_t n, int threads) {
  size_t blocks = (n + threads - 1) / threads;
  // Grid-stride loops cover the rest; this bound keeps every SM busy.
  return static_cast<int>(std::min<size_t>(blocks, 65535 * 8));
}

template <typename Tin, typename Tout>
__global__ void BiasActivationKernel(const Tin* z, const float* bias, Tout* y,
                                     int rows, int cols, bool relu) {
  size_t n = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = ToF(z[i]) + bias[i % cols];
    if (relu) v = fmaxf(v, 0.0f);
    y[i] = FromF<Tout>(v);
  }
}

// Block (32, 8): 32 columns per block, 8 row lanes; blockIdx.y picks a
// slice of rows. Each block writes one partial sum per column.
constexpr int kBgCols = 32;
constexpr int kBgLanes = 8;
constexpr int kBgRowsPerSlice = 256;

int BiasGradSlices(int rows) {
  return std::max(1, (rows + kBgRowsPerSlice - 1) / kBgRowsPerSlice);
}

template <typename T>
__global__ void ReluBackwardPartialKernel(const T* dy, const T* y, T* dz,
                                          float* partial, int rows, int cols) {
  __shared__ float sums[kBgLanes][kBgCols];
  int col = blockIdx.x * kBgCols + threadIdx.x;
  int begin = blockIdx.y * kBgRowsPerSlice;
  int end = min(rows, begin + kBgRowsPerSlice);
  float acc = 0.0f;
  if (col < cols) {
    for (int r = begin + threadIdx.y; r < end; r += kBgLanes) {
      size_t i = static_cast<size_t>(r) * cols + col;
      float g = ToF(dy[i]);
      if (y != nullptr && !(ToF(y[i]) > 0.0f)) g = 0.0f;
      dz[i] = FromF<T>(g);
      acc += g;
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float s = 0.0f;
    for (int l = 0; l < kBgLanes; ++l) s += sums[l][threadIdx.x];
    partial[static_cast<size_t>(blockIdx.y) * cols + col] = s;
  }
}

__global__ void SumSlicesKernel(const float* partial, float* db, int slices,
                                int cols, bool accumulate) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float s = 0.0f;
  for (int k = 0; k < slices; ++k)
    s += partial[static_cast<size_t>(k) * cols + col];
  db[col] = accumulate ? db[col] + s : s;
}

// One warp per row.
template <typename T>
__global__ void SoftmaxCrossEntropyKernel(const T* z, const float* bias,
                                          const int32_t* labels,
                                          float* row_loss, T* dlogits, int rows,
                                          int cols, int grad_rows,
                                          const OptimizerState* state) {
  const size_t warp =
      (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (warp >= static_cast<size_t>(rows)) return;
  const T* zr = z + static_cast<size_t>(warp) * cols;
  float mx = -FLT_MAX;
  for (int c = lane; c < cols; c += 32) mx = fmaxf(mx, ToF(zr[c]) + bias[c]);
  for (int o = 16; o > 0; o /= 2)
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
  for (int c = lane; c < cols; c += 32) sum += expf(ToF(zr[c]) + bias[c] - mx);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  int label = labels[warp];
  // Same operations as SoftmaxCrossEntropy in mlp.cc.
  const float log_sum = logf(sum);
  const float inv_rows = 1.0f / static_cast<float>(grad_rows);
  const float scale = state != nullptr ? state->loss_scale : 1.0f;
  T* dr = dlogits + static_cast<size_t>(warp) * cols;
  for (int c = lane; c < cols; c += 32) {
    float p = expf(ToF(zr[c]) + bias[c] - mx - log_sum);
    dr[c] = FromF<T>((p - (c == label ? 1.0f : 0.0f)) * inv_rows * scale);
  }
  if (lane == 0) {
    float zl = (label >= 0 && label < cols) ? ToF(zr[label]) + bias[label] : mx;
    row_loss[warp] = log_sum - (zl - mx);
  }
}

__global__ void MeanLossKernel(const float* row_loss, int rows, int divisor,
                               bool accumulate, float* mean) {
  __shared__ float sums[256];
  float s = 0.0f;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) s += row_loss[r];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sums[threadIdx.x] += sums[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float part = sums[0] / static_cast<float>(divisor);
    *mean = accumulate ? *mean + part : part;
  }
}

__global__ void UnscaleAndCheckKernel(float* g, size_t n,
                                      OptimizerState* state) {
  float inv = 1.0f / state->loss_scale;
  bool bad = false;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = g[i] * inv;
    if (!isfinite(v)) bad = true;
    g[i] = v;
  }
  if (__any_sync(0xffffffffu, bad) && threadIdx.x % 32 == 0) {
    atomicOr(&state->found_inf, 1);
  }
}

__global__ void PrepareOptimizerStepKernel(OptimizerState* state,
                                           bool dynamic) {
  if (state->found_inf != 0) {
    state->skip = 1;
    if (dynamic) {
      state->loss_scale = fmaxf(state->loss_scale * 0.5f, 1.0f);
      state->good_steps = 0;
    }
    return;
  }
  state->skip = 0;
  state->t += 1;
  double t = static_cast<double>(state->t);
  state->bias_correction1 = static_cast<float>(1.0 - pow(kBeta1, t));
  state->bias_correction2 = static_cast<float>(1.0 - pow(kBeta2, t));
  if (dynamic && ++state->good_steps >= kLossScaleGrowthInterval) {
    if (isfinite(state->loss_scale * 2.0f)) state->loss_scale *= 2.0f;
    state->good_steps = 0;
  }
}

__global__ void ResetFoundInfKernel(OptimizerState* state) {
  state->found_inf = 0;
}

// Mirrors AdamW::Step (adamw.h) operation by operation; the explicit _rn
// intrinsics stop nvcc from contracting into FMAs so fp32 results match the
// CPU path bit for bit (up to the bias corrections' last ulp).
template <typename T>
__global__ void AdamWKernel(float* w, const float* g, float* m, float* v,
                            T* w_low, size_t n, float lr, float lr_wd,
                            const OptimizerState* state) {
  if (state->skip != 0) return;
  const float bc1 = state->bias_correction1;
  const float bc2 = state->bias_correction2;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float gi = g[i];
    float mi = __fadd_rn(__fmul_rn(0.9f, m[i]), __fmul_rn(0.1f, gi));
    float vi = __fadd_rn(__fmul_rn(0.999f, v[i]),
                         __fmul_rn(0.001f, __fmul_rn(gi, gi)));
    m[i] = mi;
    v[i] = vi;
    float wi = w[i];
    if (lr_wd != 0.0f) wi = __fsub_rn(wi, __fmul_rn(lr_wd, wi));
    float num = __fmul_rn(lr, __fdiv_rn(mi, bc1));
    float den = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, bc2)), 1e-8f);
    wi = __fsub_rn(wi, __fdiv_rn(num, den));
    w[i] = wi;
    if (w_low != nullptr) w_low[i] = FromF<T>(wi);
  }
}

template <typename Tin, typename Tout>
__global__ void CastKernel(const Tin* in, Tout* out, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = FromF<Tout>(ToF(in[i]));
  }
}

}  // namespace

template <typename Tin, typename Tout>
cudaError_t LaunchBiasActivation(const Tin* z, const float* bias, Tout* y,
                                 int rows, int cols, bool relu,
                                 cudaStream_t stream) {
  size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return cudaSuccess;
  BiasActivationKernel<Tin, Tout>
      <<<GridFor(n, 256), 256, 0, stream>>>(z, bias, y, rows, cols, relu);
  return cudaGetLastError();
}

size_t BiasGradScratchFloats(int rows, int cols) {
  return static_cast<size_t>(BiasGradSlices(rows)) * cols;
}

template <typename T>
cudaError_t LaunchReluBackwardBiasGrad(const T* dy, const T* y, T* dz,
                                       float* db, float* scratch, int rows,
                                       int cols, cudaStream_t stream,
                                       bool accumulate) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  int slices = BiasGradSlices(rows);
  dim3 grid((cols + kBgCols - 1) / kBgCols, slices);
  dim3 block(kBgCols, kBgLanes);
  ReluBackwardPartialKernel<T>
      <<<grid, block, 0, stream>>>(dy, y, dz, scratch, rows, cols);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  SumSlicesKernel<<<(cols + 255) / 256, 256, 0, stream>>>(scratch, db, slices,
                                                          cols, accumulate);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSoftmaxCrossEntropy(const T* z, const float* bias,
                                      const int32_t* labels, float* row_loss,
                                      T* dlogits, int rows, int cols,
                                      const OptimizerState* state,
                                      cudaStream_t stream, int grad_rows) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kThreads = 256;  // 8 rows per block
  int blocks = static_cast<int>(
      (static_cast<size_t>(rows) * 32 + kThreads - 1) / kThreads);
  SoftmaxCrossEntropyKernel<T><<<blocks, kThreads, 0, stream>>>(
      z, bias, labels, row_loss, dlogits, rows, cols,
      grad_rows > 0 ? grad_rows : rows, state);
  return cudaGetLastError();
}

cudaError_t LaunchMeanLoss(const float* row_loss, int rows, float* mean,
                           cudaStream_t stream, int divisor_rows,
                           bool accumulate) {
  MeanLossKernel<<<1, 256, 0, stream>>>(
      row_loss, rows, divisor_rows > 0 ? divisor_rows : rows, accumulate,
      mean);
  return cudaGetLastError();
}

cudaError_t LaunchUnscaleAndCheck(float* g, size_t n, OptimizerState* state,
                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  UnscaleAndCheckKernel<<<GridFor(n, 256), 256, 0, stream>>>(g, n, state);
  return cudaGetLastError();
}

cudaError_t LaunchPrepareOptimizerStep(OptimizerState* state, bool dynamic,
                                       cudaStream_t stream) {
  PrepareOptimizerStepKernel<<<1, 1, 0, stream>>>(state, dynamic);
  return cudaGetLastError();
}

cudaError_t LaunchResetFoundInf(OptimizerState* state, cudaStream_t stream) {
  ResetFoundInfKernel<<<1, 1, 0, stream>>>(state);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchAdamW(float* w, const float* g, float* m, float* v, T* w_low,
                        size_t n, float lr, float lr_wd,
                        const OptimizerState* state, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AdamWKernel<T><<<GridFor(n, 256), 256, 0, stream>>>(w, g, m, v, w_low, n, lr,
                                                      lr_wd, state);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchCastFromFloat(const float* in, T* out, size_t n,
                                cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  CastKernel<float, T><<<GridFor(n, 256), 256, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchCastToFloat(const T* in, float* out, size_t n,
                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  CastKernel<T, float><<<GridFor(n, 256), 256, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}

#define XL_INSTANTIATE(T)                                                   \
  template cudaError_t LaunchBiasActivation<T, T>(                          \
      const T*, const float*, T*, int, int, bool, cudaStream_t);            \
  template cudaError_t LaunchBiasActivation<float, T>(                      \
      const float*, const float*, T*, int, int, bool, cudaStream_t);        \
  template cudaError_t LaunchReluBackwardBiasGrad<T>(                       \
      const T*, const T*, T*, float*, float*, int, int, cudaStream_t, bool);\
  template cudaError_t LaunchSoftmaxCrossEntropy<T>(                        \
      const T*, const float*, const int32_t*, float*, T*, int, int,         \
      const OptimizerState*, cudaStream_t, int);                            \
  template cudaError_t LaunchAdamW<T>(float*, const float*, float*, float*, \
                                      T*, size_t, float, float,             \
                                      const OptimizerState*, cudaStream_t); \
  template cudaError_t LaunchCastFromFloat<T>(const float*, T*, size_t,     \
                                              cudaStream_t);                \
  template cudaError_t LaunchCastToFloat<T>(const T*, float*, size_t,       \
                                            cudaStream_t);

XL_INSTANTIATE(__nv_bfloat16)
XL_INSTANTIATE(__half)
// float: the <float, float> activation instantiation comes from the first
// line of the macro; spell the rest out to avoid instantiating it twice.
template cudaError_t LaunchBiasActivation<float, float>(const float*,
                                                        const float*, float*,
                                                        int, int, bool,
                                                        cudaStream_t);
template cudaError_t LaunchReluBackwardBiasGrad<float>(const float*,
                                                       const float*, float*,
                                                       float*, float*, int, int,
                                                       cudaStream_t, bool);
template cudaError_t LaunchSoftmaxCrossEntropy<float>(
    const float*, const float*, const int32_t*, float*, float*, int, int,
    const OptimizerState*, cudaStream_t, int);
template cudaError_t LaunchAdamW<float>(float*, const float*, float*, float*,
                                        float*, size_t, float, float,
                                        const OptimizerState*, cudaStream_t);
template cudaError_t LaunchCastFromFloat<float>(const float*, float*, size_t,
                                                cudaStream_t);
template cudaError_t LaunchCastToFloat<float>(const float*, float*, size_t,
                                              cudaStream_t);

#undef XL_INSTANTIATE

cudaError_t ProbeKernelImage() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, MeanLossKernel);
}

}  // namespace xl::worker
