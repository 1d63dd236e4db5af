// The CPU model's gradients against central finite differences, AdamW's
// update against the formula, the init and the gradient buckets.
#include "agent/worker/model/mlp.h"

#include <gtest/gtest.h>

#include <cmath>

#include "agent/worker/data/data.h"
#include "agent/worker/loop/trainer.h"
#include "agent/worker/model/adamw.h"

namespace xl::worker {
namespace {

TrainConfig Small() {
  TrainConfig c;
  c.input_dim = 5;
  c.hidden_dim = 7;
  c.hidden_layers = 2;  // three layers: first, middle, last
  c.classes = 4;
  c.batch_per_rank = 6;
  c.seed = 3;
  return c;
}

// Central differences in float with h = 1e-3. Loss is ~1.4; its float
// rounding (~1e-7 relative) contributes < 1e-4 to a difference quotient and
// the O(h^2) truncation error is < 1e-6 here, so we demand per tensor
// ||g - fd|| <= 1e-2 ||fd|| and per element |g - fd| <= 2e-4 + 1e-2 |fd|.
// h is small so that a step crosses a ReLU kink (a pre-activation within
// h x |input| of zero) rarely: at 1e-2 one of the 84 crossed for most data
// seeds. A wrong transpose, sign or a missing ReLU mask breaks both by far.
void CheckRange(Mlp& mlp, const float* x, const int32_t* labels, int batch,
                int64_t off, int64_t n, const char* what) {
  std::vector<float> g(mlp.grads().begin() + off,
                       mlp.grads().begin() + off + n);
  const float h = 1e-3f;
  double diff2 = 0, ref2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    float& p = mlp.params()[off + i];
    const float saved = p;
    p = saved + h;
    const double lp = mlp.Loss(x, labels, batch);
    p = saved - h;
    const double lm = mlp.Loss(x, labels, batch);
    p = saved;
    const double fd = (lp - lm) / (2.0 * h);
    EXPECT_NEAR(g[i], fd, 2e-4 + 1e-2 * std::fabs(fd))
        << what << "[" << i << "]";
    diff2 += (g[i] - fd) * (g[i] - fd);
    ref2 += fd * fd;
  }
  EXPECT_GT(ref2, 1e-8) << what << ": gradient is all zero, test is vacuous";
  EXPECT_LE(std::sqrt(diff2), 1e-2 * std::sqrt(ref2)) << what;
}

TEST(Mlp, GradientsMatchFiniteDifferences) {
  TrainConfig c = Small();
  Mlp mlp(c);
  mlp.Init();
  // Non-zero biases so the bias path is exercised off the init point.
  for (const LayerSpan& s : mlp.layers()) {
    for (int64_t i = 0; i < s.b_size; ++i) {
      mlp.params()[s.b_offset + i] = 0.05f * static_cast<float>(i % 3) - 0.02f;
    }
  }
  std::vector<float> x(c.batch_per_rank * c.input_dim);
  std::vector<int32_t> labels(c.batch_per_rank);
  SyntheticBatch(c, 0, 0, 1, x.data(), labels.data());
  const float loss =
      mlp.ForwardBackward(x.data(), labels.data(), c.batch_per_rank);
  EXPECT_NEAR(loss, mlp.Loss(x.data(), labels.data(), c.batch_per_rank), 1e-6);
  ASSERT_EQ(mlp.layers().size(), 3u);
  const char* names[] = {"first", "middle", "last"};
  for (size_t l = 0; l < 3; ++l) {
    const LayerSpan& s = mlp.layers()[l];
    SCOPED_TRACE(names[l]);
    CheckRange(mlp, x.data(), labels.data(), c.batch_per_rank, s.w_offset,
               s.w_size, "W");
    CheckRange(mlp, x.data(), labels.data(), c.batch_per_rank, s.b_offset,
               s.b_size, "b");
  }
}

TEST(SoftmaxCrossEntropy, LogitGradientMatchesFiniteDifferences) {
  const int batch = 3, classes = 5;
  std::vector<float> z(batch * classes), d(batch * classes);
  for (int i = 0; i < batch * classes; ++i) z[i] = CounterNormal(1, 77, i);
  const int32_t labels[batch] = {0, 4, 2};
  const float loss =
      SoftmaxCrossEntropy(z.data(), labels, batch, classes, d.data());
  // Reference loss in double.
  double ref = 0;
  for (int i = 0; i < batch; ++i) {
    double s = 0;
    for (int c = 0; c < classes; ++c) s += std::exp(double(z[i * classes + c]));
    ref += std::log(s) - z[i * classes + labels[i]];
  }
  EXPECT_NEAR(loss, ref / batch, 1e-6);
  const float h = 1e-3f;
  for (int i = 0; i < batch * classes; ++i) {
    const float saved = z[i];
    z[i] = saved + h;
    double lp = SoftmaxCrossEntropy(z.data(), labels, batch, classes, nullptr);
    z[i] = saved - h;
    double lm = SoftmaxCrossEntropy(z.data(), labels, batch, classes, nullptr);
    z[i] = saved;
    EXPECT_NEAR(d[i], (lp - lm) / (2 * h), 2e-4) << i;
  }
  // Each row of d sums to zero (softmax minus one-hot, over the batch).
  for (int i = 0; i < batch; ++i) {
    double s = 0;
    for (int c = 0; c < classes; ++c) s += d[i * classes + c];
    EXPECT_NEAR(s, 0, 1e-6);
  }
}

TEST(Mlp, InitFollowsTheCounterRng) {
  TrainConfig c = Small();
  Mlp mlp(c);
  mlp.Init();
  const LayerSpan& mid = mlp.layers()[1];
  EXPECT_EQ(mid.w_offset, 5 * 7 + 7);
  EXPECT_EQ(
      mlp.params()[mid.w_offset + 4],
      static_cast<float>((2.0 * CounterUniform(3, kInitStream + 2, 4) - 1) /
                         std::sqrt(7.0)));
  for (int64_t i = 0; i < mid.b_size; ++i) {
    EXPECT_EQ(mlp.params()[mid.b_offset + i], 0.0f);
  }
  EXPECT_EQ(mlp.param_count(), c.ParamCount());
}

TEST(AdamW, MatchesTheFormulaAndDecaysOnlyWeights) {
  TrainConfig c = Small();
  auto layers = LayerSpans(c);
  auto mask = AdamW::WeightMask(layers, c.ParamCount());
  EXPECT_EQ(mask[layers[0].w_offset], 1);
  EXPECT_EQ(mask[layers[0].b_offset], 0);
  const double lr = 0.01, wd = 0.1;
  AdamW opt(mask, lr, wd);
  std::vector<float> p(c.ParamCount(), 0.5f), g(c.ParamCount());
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = 0.01f * static_cast<float>(i % 7) - 0.03f;
  // Double reference over two steps.
  std::vector<double> rp(p.begin(), p.end()), rm(p.size()), rv(p.size());
  for (int t = 1; t <= 2; ++t) {
    opt.Step(p.data(), g.data());
    for (size_t i = 0; i < p.size(); ++i) {
      rm[i] = 0.9 * rm[i] + 0.1 * g[i];
      rv[i] = 0.999 * rv[i] + 0.001 * g[i] * g[i];
      if (mask[i]) rp[i] -= lr * wd * rp[i];
      rp[i] -= lr * (rm[i] / (1 - std::pow(0.9, t))) /
               (std::sqrt(rv[i] / (1 - std::pow(0.999, t))) + 1e-8);
    }
  }
  EXPECT_EQ(opt.t(), 2);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], rp[i], 1e-6) << i;
  // With zero gradient a bias keeps its value and a weight decays by lr*wd.
  AdamW fresh(mask, lr, wd);
  std::vector<float> q(c.ParamCount(), 0.5f), zero(c.ParamCount(), 0.0f);
  fresh.Step(q.data(), zero.data());
  EXPECT_EQ(q[layers[0].b_offset], 0.5f);
  EXPECT_EQ(q[layers[0].w_offset], 0.5f - static_cast<float>(lr * wd) * 0.5f);
}

// The vectorized update (AVX-512, AVX2 or baseline clone, whichever this CPU
// runs) computes adamw.h's float formula bit for bit, element by element: a
// reference in scalar float, over runs of odd lengths (vector tails, and runs
// that start mid-vector) and values spanning many exponents.
TEST(AdamW, IsBitwiseTheScalarFloatFormula) {
  std::vector<uint8_t> mask;
  for (int run : {37, 1, 130, 3, 16, 17, 255, 2}) {
    const uint8_t decay = mask.empty() || mask.back() == 0 ? 1 : 0;
    mask.insert(mask.end(), run, decay);
  }
  const double lr = 3e-3, wd = 0.05;
  AdamW opt(mask, lr, wd);
  const size_t n = mask.size();
  std::vector<float> p(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] =
        std::ldexp(static_cast<float>(i % 13) - 6.0f, -static_cast<int>(i % 9));
  }
  std::vector<float> rp = p, rm(n, 0.0f), rv(n, 0.0f);
  for (int t = 1; t <= 3; ++t) {
    for (size_t i = 0; i < n; ++i) {
      g[i] = std::ldexp(static_cast<float>((i * 7 + t) % 11) - 5.0f,
                        -static_cast<int>((i + t) % 17));
    }
    opt.Step(p.data(), g.data());
    const float bc1 = static_cast<float>(1.0 - std::pow(0.9, t));
    const float bc2 = static_cast<float>(1.0 - std::pow(0.999, t));
    const float flr = static_cast<float>(lr);
    const float decay = static_cast<float>(lr * wd);
    for (size_t i = 0; i < n; ++i) {
      const float m = 0.9f * rm[i] + 0.1f * g[i];
      const float v = 0.999f * rv[i] + 0.001f * (g[i] * g[i]);
      rm[i] = m;
      rv[i] = v;
      float w = rp[i];
      if (mask[i]) w = w - decay * w;
      w = w - flr * (m / bc1) / (std::sqrt(v / bc2) + 1e-8f);
      rp[i] = w;
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(p[i], rp[i]) << "step " << t << " element " << i;
      ASSERT_EQ(opt.m()[i], rm[i]) << "step " << t << " element " << i;
      ASSERT_EQ(opt.v()[i], rv[i]) << "step " << t << " element " << i;
    }
  }
}

TEST(GradientBuckets, LayerAlignedLastLayerFirst) {
  TrainConfig c = Small();
  auto layers = LayerSpans(c);
  // Tiny buckets: one per layer, last layer first.
  auto one = GradientBuckets(layers, 4);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_EQ(one[0].first, layers[2].w_offset);
  EXPECT_EQ(one[2].first, 0);
  int64_t total = 0;
  for (auto& [off, n] : one) total += n;
  EXPECT_EQ(total, c.ParamCount());
  // Huge buckets: everything in one.
  auto all = GradientBuckets(layers, 1 << 30);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first, 0);
  EXPECT_EQ(all[0].second, c.ParamCount());
}

}  // namespace
}  // namespace xl::worker
