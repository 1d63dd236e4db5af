// The CUDA kernels and CudaMlp against the CPU path (mlp.h, adamw.h) on the
// same inputs: FP32 within 1e-4 relative (most checks far tighter), BF16 and
// FP16 within the looser tolerances stated at each check.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "agent/worker/cuda/cuda_host_ops.h"
#include "agent/worker/cuda/cuda_trainer.h"
#include "agent/worker/data/data.h"
#include "agent/worker/model/adamw.h"
#include "agent/worker/model/mlp.h"
#include "tests/worker/gpu/gpu_test_util.h"

namespace xl::worker {
namespace {

using testing::Cosine;
using testing::ScaledMaxError;

std::vector<float> RandomVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TrainConfig SmallConfig(v1::Precision p) {
  TrainConfig c;
  c.input_dim = 32;
  c.hidden_dim = 64;
  c.hidden_layers = 2;
  c.classes = 10;
  c.batch_per_rank = 48;
  c.precision = p;
  c.seed = 7;
  return c;
}

TEST(CudaKernels, BiasReluForwardMatchesCpu) {
  XL_SKIP_WITHOUT_GPU();
  const int rows = 130, cols = 77;
  auto z = RandomVector(rows * cols, 1);
  auto bias = RandomVector(cols, 2);
  std::vector<float> want(z.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      want[r * cols + c] = std::max(0.0f, z[r * cols + c] + bias[c]);
    }
  }
  std::vector<float> y;
  ASSERT_TRUE(
      CudaBiasActivationForTest(z, bias, rows, cols, true, v1::FP32, &y).ok());
  EXPECT_LE(ScaledMaxError(y, want), 1e-6);
  // BF16: input and output each rounded to 8 significant bits.
  ASSERT_TRUE(
      CudaBiasActivationForTest(z, bias, rows, cols, true, v1::BF16, &y).ok());
  EXPECT_LE(ScaledMaxError(y, want), 2e-2);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_GE(y[i], 0.0f);
}

TEST(CudaKernels, ReluBackwardAndBiasGradMatchCpu) {
  XL_SKIP_WITHOUT_GPU();
  const int rows = 1000, cols = 77;  // several row slices, a partial tile
  auto dy = RandomVector(rows * cols, 3);
  auto y = RandomVector(rows * cols, 4);
  for (float& v : y) v = std::max(v, 0.0f);  // post-ReLU activations
  std::vector<float> want_dz(dy.size());
  std::vector<double> want_db(cols, 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      float g = y[r * cols + c] > 0 ? dy[r * cols + c] : 0.0f;
      want_dz[r * cols + c] = g;
      want_db[c] += g;
    }
  }
  std::vector<float> dz, db;
  ASSERT_TRUE(
      CudaReluBackwardForTest(dy, y, rows, cols, v1::FP32, &dz, &db).ok());
  EXPECT_EQ(dz, want_dz);
  std::vector<float> want_db_f(want_db.begin(), want_db.end());
  EXPECT_LE(ScaledMaxError(db, want_db_f), 1e-5);
  // No mask: plain column sums.
  ASSERT_TRUE(
      CudaReluBackwardForTest(dy, {}, rows, cols, v1::FP32, &dz, &db).ok());
  EXPECT_EQ(dz, dy);
}

TEST(CudaKernels, SoftmaxCrossEntropyMatchesCpu) {
  XL_SKIP_WITHOUT_GPU();
  const int rows = 70, cols = 45;  // more classes than a warp
  auto logits = RandomVector(rows * cols, 5, 3.0f);
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = (r * 7) % cols;
  std::vector<float> want(logits.size());
  const float want_loss = SoftmaxCrossEntropy(logits.data(), labels.data(),
                                              rows, cols, want.data());
  float loss = 0;
  std::vector<float> d;
  ASSERT_TRUE(CudaSoftmaxCrossEntropyForTest(logits, labels, rows, cols,
                                             v1::FP32, &loss, &d)
                  .ok());
  EXPECT_NEAR(loss, want_loss, 1e-5 * std::fabs(want_loss));
  EXPECT_LE(ScaledMaxError(d, want), 1e-5);
  // Every row of dlogits sums to zero.
  for (int r = 0; r < rows; ++r) {
    double s = 0;
    for (int c = 0; c < cols; ++c) s += d[r * cols + c];
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
}

TEST(CudaKernels, AdamWStepMatchesCpu) {
  XL_SKIP_WITHOUT_GPU();
  TrainConfig config = SmallConfig(v1::FP32);
  config.learning_rate = 3e-3;
  config.weight_decay = 0.1;
  const size_t n = config.ParamCount();
  auto params = RandomVector(n, 6);
  auto grads = RandomVector(n, 7, 0.01f);
  auto m = RandomVector(n, 8, 0.001f);
  auto v = RandomVector(n, 9, 0.001f);
  for (float& x : v) x = x * x;
  Mlp layout(config);
  AdamW cpu(AdamW::WeightMask(layout.layers(), n), config.learning_rate,
            config.weight_decay);
  cpu.m() = m;
  cpu.v() = v;
  cpu.set_t(4);
  std::vector<float> want = params;
  cpu.Step(want.data(), grads.data());

  for (v1::Precision p : {v1::FP32, v1::BF16}) {
    config.precision = p;
    std::vector<float> got = params, gm = m, gv = v;
    int64_t t = 4;
    ASSERT_TRUE(CudaAdamWStepForTest(config, &got, grads, &gm, &gv, &t).ok());
    EXPECT_EQ(t, 5);
    // Same float operations in the same order: equal up to the last ulp of
    // the bias corrections. The master weights are fp32 in every precision.
    EXPECT_LE(ScaledMaxError(got, want), 1e-6) << v1::Precision_Name(p);
    EXPECT_LE(ScaledMaxError(gm, cpu.m()), 1e-6);
    EXPECT_LE(ScaledMaxError(gv, cpu.v()), 1e-6);
  }
}

TEST(CudaKernels, Fp16OverflowSkipsTheStep) {
  XL_SKIP_WITHOUT_GPU();
  TrainConfig config = SmallConfig(v1::FP16);
  const size_t n = config.ParamCount();
  auto params = RandomVector(n, 10);
  std::vector<float> grads(n, 1.0f);
  grads[3] = INFINITY;
  std::vector<float> m(n, 0.0f), v(n, 0.0f), got = params;
  int64_t t = 0;
  ASSERT_TRUE(CudaAdamWStepForTest(config, &got, grads, &m, &v, &t).ok());
  EXPECT_EQ(t, 0);         // skipped: AdamW's step count does not advance
  EXPECT_EQ(got, params);  // and nothing moved
}

std::vector<float> Slice(const std::vector<float>& v, int64_t offset,
                         int64_t n) {
  return std::vector<float>(v.begin() + offset, v.begin() + offset + n);
}

// SmallConfig(p)'s model initialized on the CPU, and its first batch.
struct SmallCase {
  explicit SmallCase(v1::Precision p)
      : config(SmallConfig(p)),
        cpu(config),
        batch(config.batch_per_rank),
        x(static_cast<size_t>(batch) * config.input_dim),
        labels(batch) {
    cpu.Init();
    SyntheticBatch(config, 0, 0, 1, x.data(), labels.data());
  }
  TrainConfig config;
  Mlp cpu;
  int batch;
  std::vector<float> x;
  std::vector<int32_t> labels;
};

// One whole forward and backward through cuBLAS against Mlp. FP32: every
// gradient within grad_tol of its array's scale. BF16/FP16: each gradient
// array's cosine with the CPU's at least grad_tol (a ReLU mask flipped by
// rounding moves single elements by a whole term; an emulation of the
// rounding put the worst element 31% (bf16) / 22% (fp16) off while the
// cosines stayed >= 0.995 / 0.9976).
void CompareForwardBackward(v1::Precision p, double loss_tol, double grad_tol,
                            double grad_scale) {
  SmallCase c(p);
  const TrainConfig& config = c.config;
  Mlp& cpu = c.cpu;
  const int b = c.batch;
  const std::vector<float>& x = c.x;
  const std::vector<int32_t>& labels = c.labels;
  const float want_loss = cpu.ForwardBackward(x.data(), labels.data(), b);
  float loss = 0;
  std::vector<float> grads;
  ASSERT_TRUE(CudaForwardBackwardForTest(config, cpu.params(), x, labels, b,
                                         &loss, &grads)
                  .ok());
  for (float& g : grads) g /= grad_scale;
  EXPECT_NEAR(loss, want_loss, loss_tol * std::fabs(want_loss))
      << v1::Precision_Name(p);
  for (const LayerSpan& s : cpu.layers()) {
    const std::vector<float> gw = Slice(grads, s.w_offset, s.w_size);
    const std::vector<float> cw = Slice(cpu.grads(), s.w_offset, s.w_size);
    const std::vector<float> gb = Slice(grads, s.b_offset, s.b_size);
    const std::vector<float> cb = Slice(cpu.grads(), s.b_offset, s.b_size);
    if (p == v1::FP32) {
      EXPECT_LE(ScaledMaxError(gw, cw), grad_tol)
          << "FP32 dW of layer " << s.in << "x" << s.out;
      EXPECT_LE(ScaledMaxError(gb, cb), grad_tol)
          << "FP32 db of layer " << s.in << "x" << s.out;
    } else {
      EXPECT_GE(Cosine(gw, cw), grad_tol)
          << v1::Precision_Name(p) << " dW of layer " << s.in << "x" << s.out;
      EXPECT_GE(Cosine(gb, cb), grad_tol)
          << v1::Precision_Name(p) << " db of layer " << s.in << "x" << s.out;
    }
  }
}

TEST(CudaMlp, Fp32ForwardBackwardMatchesCpuWithin1e4) {
  XL_SKIP_WITHOUT_GPU();
  CompareForwardBackward(v1::FP32, 1e-4, 1e-4, 1.0);
}

// BF16 keeps 8 significant bits in activations and weights: the loss within
// 2% and every gradient array at cosine >= 0.99 with the CPU's.
TEST(CudaMlp, Bf16ForwardBackwardMatchesCpuLoosely) {
  XL_SKIP_WITHOUT_GPU();
  CompareForwardBackward(v1::BF16, 2e-2, 0.99, 1.0);
}

// FP16 gradients come back multiplied by the initial loss scale.
TEST(CudaMlp, Fp16ForwardBackwardMatchesCpuLoosely) {
  XL_SKIP_WITHOUT_GPU();
  CompareForwardBackward(v1::FP16, 1e-2, 0.995, 65536.0);
}

// Gradient accumulation: three micro-batches of 16 give the loss and the
// gradients of one batch of 48 (FP32: within rounding; FP16: the same loss
// scale multiplies every micro-batch, so the sum is scaled once). Starting
// each micro-batch from zero instead (no accumulation) gives the last
// micro-batch's third, which this would catch.
void CompareAccumulation(v1::Precision p, double tol, double grad_scale) {
  SmallCase c(p);
  float whole_loss = 0, micro_loss = 0;
  std::vector<float> whole, micro;
  ASSERT_TRUE(CudaForwardBackwardForTest(c.config, c.cpu.params(), c.x,
                                         c.labels, c.batch, &whole_loss, &whole)
                  .ok());
  absl::Status st = CudaForwardBackwardForTest(
      c.config, c.cpu.params(), c.x, c.labels, c.batch, &micro_loss, &micro, 3);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_NEAR(micro_loss, whole_loss, tol * std::fabs(whole_loss));
  for (float& g : whole) g /= grad_scale;
  for (float& g : micro) g /= grad_scale;
  for (const LayerSpan& s : c.cpu.layers()) {
    EXPECT_LE(ScaledMaxError(Slice(micro, s.w_offset, s.w_size),
                             Slice(whole, s.w_offset, s.w_size)),
              tol)
        << v1::Precision_Name(p) << " dW of layer " << s.in << "x" << s.out;
    EXPECT_LE(ScaledMaxError(Slice(micro, s.b_offset, s.b_size),
                             Slice(whole, s.b_offset, s.b_size)),
              tol)
        << v1::Precision_Name(p) << " db of layer " << s.in << "x" << s.out;
  }
}

TEST(CudaMlp, Fp32MicroBatchesAccumulateToTheWholeBatch) {
  XL_SKIP_WITHOUT_GPU();
  CompareAccumulation(v1::FP32, 1e-5, 1.0);
}

// FP16: the micro-batches' fp16 activations are those of the whole batch's
// rows (row-wise ops), so only the fp32 sums' order differs.
TEST(CudaMlp, Fp16MicroBatchesAccumulateUnderOneLossScale) {
  XL_SKIP_WITHOUT_GPU();
  CompareAccumulation(v1::FP16, 1e-3, 65536.0);
}

}  // namespace
}  // namespace xl::worker
