// ResolveTrainSpec (defaults, errors naming fields) and the counter RNG and
// synthetic data that both backends must reproduce.
#include "agent/worker/loop/train_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "agent/worker/data/data.h"

namespace xl::worker {
namespace {

TEST(ResolveTrainSpec, Defaults) {
  auto c = ResolveTrainSpec(v1::TrainSpec(), /*node_has_gpus=*/false);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->input_dim, 256);
  EXPECT_EQ(c->hidden_dim, 1024);
  EXPECT_EQ(c->hidden_layers, 2);
  EXPECT_EQ(c->classes, 16);
  EXPECT_EQ(c->batch_per_rank, 64);
  EXPECT_EQ(c->steps, 100);
  EXPECT_DOUBLE_EQ(c->learning_rate, 1e-3);
  EXPECT_DOUBLE_EQ(c->weight_decay, 0.01);
  EXPECT_EQ(c->seed, 1u);
  EXPECT_EQ(c->metrics_every, 10);
  EXPECT_EQ(c->bucket_bytes, 25ull << 20);
  EXPECT_EQ(c->collective_timeout, absl::ZeroDuration());
  EXPECT_EQ(c->device, "cpu");
  EXPECT_EQ(c->precision, v1::FP32);
  EXPECT_EQ(c->Widths(), (std::vector<int>{256, 1024, 1024, 16}));
  EXPECT_EQ(c->ParamCount(),
            256 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 16 + 16);

  auto g = ResolveTrainSpec(v1::TrainSpec(), /*node_has_gpus=*/true);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->device, "cuda");
  EXPECT_EQ(g->precision, v1::BF16);
}

TEST(ResolveTrainSpec, ErrorsNameTheField) {
  struct Case {
    void (*set)(v1::TrainSpec*);
    const char* field;
  };
  const Case cases[] = {
      {[](v1::TrainSpec* s) { s->set_hidden_dim(-1); }, "train.hidden_dim"},
      {[](v1::TrainSpec* s) { s->set_hidden_dim(100000); }, "train.hidden_dim"},
      {[](v1::TrainSpec* s) { s->set_input_dim(-3); }, "train.input_dim"},
      {[](v1::TrainSpec* s) { s->set_hidden_layers(-1); },
       "train.hidden_layers"},
      {[](v1::TrainSpec* s) { s->set_classes(1); }, "train.classes"},
      {[](v1::TrainSpec* s) { s->set_batch_per_rank(-8); },
       "train.batch_per_rank"},
      {[](v1::TrainSpec* s) { s->set_steps(-1); }, "train.steps"},
      {[](v1::TrainSpec* s) { s->set_learning_rate(-0.1); },
       "train.learning_rate"},
      {[](v1::TrainSpec* s) { s->set_weight_decay(2); }, "train.weight_decay"},
      {[](v1::TrainSpec* s) { s->set_checkpoint_every(-5); },
       "train.checkpoint_every"},
      {[](v1::TrainSpec* s) { s->set_metrics_every(-1); },
       "train.metrics_every"},
      {[](v1::TrainSpec* s) { s->set_bucket_bytes(10); }, "train.bucket_bytes"},
      {[](v1::TrainSpec* s) { s->mutable_collective_timeout()->set_nanos(5000); },
       "train.collective_timeout"},
      {[](v1::TrainSpec* s) {
         s->mutable_collective_timeout()->set_seconds(2 * 24 * 3600);
       },
       "train.collective_timeout"},
      {[](v1::TrainSpec* s) { s->set_device("tpu"); }, "train.device"},
      {[](v1::TrainSpec* s) {
         s->mutable_data()->set_synthetic(true);
         s->mutable_data()->set_shards("/x/*");
       },
       "train.data"},
  };
  for (const Case& c : cases) {
    v1::TrainSpec spec;
    c.set(&spec);
    auto r = ResolveTrainSpec(spec, false);
    ASSERT_FALSE(r.ok()) << c.field;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind(c.field, 0), 0u)
        << r.status().message();
  }
}

TEST(ResolveTrainSpec, HalfPrecisionOnCpuIsRejected) {
  for (v1::Precision p : {v1::BF16, v1::FP16}) {
    v1::TrainSpec spec;
    spec.set_precision(p);
    spec.set_device("cpu");
    auto r = ResolveTrainSpec(spec, true);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("train.precision"), std::string::npos);
    EXPECT_NE(r.status().message().find("fp32"), std::string::npos);
    spec.set_device("cuda");
    auto ok = ResolveTrainSpec(spec, true);
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->precision, p);
  }
}

TEST(CounterRng, FixedValuesAndRanges) {
  // Pinned so that a change of the hash (which would silently break
  // CPU/CUDA agreement and old shard files) fails here. Values checked
  // against an independent Python implementation of data.h's definition.
  EXPECT_EQ(CounterHash(1, 0, 0), 12793040940332582595ull);
  EXPECT_EQ(CounterHash(42, kDataStream + 7, 3), 414442067629630990ull);
  EXPECT_EQ(CounterUniform(1, kInitStream + 1, 0), 0.582464337348938f);
  EXPECT_NEAR(CounterNormal(1, kDataStream, 0), 1.2138974938648979, 1e-6);
  EXPECT_NE(CounterHash(1, 0, 0), CounterHash(2, 0, 0));
  EXPECT_NE(CounterHash(1, 0, 0), CounterHash(1, 1, 0));
  EXPECT_NE(CounterHash(1, 0, 0), CounterHash(1, 0, 1));
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    float u = CounterUniform(7, kDataStream, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    float z = CounterNormal(7, kDataStream + 5, i);
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sq += static_cast<double>(z) * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
  // Normals 2p and 2p+1 use uniforms 2p and 2p+1 of their stream: the
  // cosine and the sine of one Box-Muller pair.
  double u1 = CounterUniform(3, 9, 4), u2 = CounterUniform(3, 9, 5);
  double r = std::sqrt(-2 * std::log(1 - u1));
  EXPECT_NEAR(CounterNormal(3, 9, 4),
              r * std::cos(2 * 3.14159265358979323846 * u2), 1e-6);
  EXPECT_NEAR(CounterNormal(3, 9, 5),
              r * std::sin(2 * 3.14159265358979323846 * u2), 1e-6);
  // Uniform is the top 24 bits.
  EXPECT_EQ(CounterUniform(3, 9, 10),
            static_cast<float>(CounterHash(3, 9, 10) >> 40) / 16777216.0f);
}

// xl's own log, cos and sin (data.h) against libm's: the normals equal
// libm's Box-Muller rounded to float but for a last-bit difference in the
// rare value whose double lies within about 1e-14 of a float rounding
// boundary; none is ever further off than one float ulp. Pinned values
// catch a change of the definition, which would change every job's data.
TEST(CounterRng, NormalsMatchLibmAndArePinned) {
  int differ = 0;
  const int n = 400000;
  for (int i = 0; i < n; i += 2) {
    double u1 = CounterUniform(5, kDataStream + 3, i);
    double u2 = CounterUniform(5, kDataStream + 3, i + 1);
    double r = std::sqrt(-2.0 * std::log(1.0 - u1));
    double a = 2.0 * 3.14159265358979323846 * u2;
    float want[2] = {static_cast<float>(r * std::cos(a)),
                     static_cast<float>(r * std::sin(a))};
    for (int k = 0; k < 2; ++k) {
      float got = CounterNormal(5, kDataStream + 3, i + k);
      if (got != want[k]) {
        ++differ;
        ASSERT_EQ(std::nextafter(got, want[k]), want[k])
            << "normal " << i + k << ": " << got << " vs libm " << want[k];
      }
    }
  }
  EXPECT_LT(differ, n / 10000) << differ << " of " << n << " differ";
  // The bulk path equals the one-at-a-time one, from odd and even starts.
  for (uint64_t first : {0, 1, 6, 33}) {
    for (uint64_t count : {0, 1, 2, 15, 16, 17, 40, 101}) {
      std::vector<float> out(count + 1, 7.0f);
      CounterNormals(9, 4, first, count, out.data());
      for (uint64_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], CounterNormal(9, 4, first + i))
            << "first " << first << " i " << i;
      }
      ASSERT_EQ(out[count], 7.0f) << "wrote past count";
    }
  }
  EXPECT_EQ(CounterNormal(1, kDataStream, 0), 1.21389747f);
  EXPECT_EQ(CounterNormal(1, kDataStream, 1), -0.410132796f);
  EXPECT_EQ(CounterNormal(42, kDataStream + 7, 1001), -0.89813143f);
}

TEST(SyntheticBatch, RanksSplitTheGlobalBatch) {
  TrainConfig c;
  c.input_dim = 8;
  c.classes = 5;
  c.batch_per_rank = 3;
  TrainConfig big = c;
  big.batch_per_rank = 6;
  std::vector<float> x0(3 * 8), x1(3 * 8), xb(6 * 8);
  std::vector<int32_t> l0(3), l1(3), lb(6);
  for (int64_t step : {0, 4}) {
    SyntheticBatch(c, step, 0, 2, x0.data(), l0.data());
    SyntheticBatch(c, step, 1, 2, x1.data(), l1.data());
    SyntheticBatch(big, step, 0, 1, xb.data(), lb.data());
    for (int i = 0; i < 24; ++i) {
      EXPECT_EQ(x0[i], xb[i]);
      EXPECT_EQ(x1[i], xb[24 + i]);
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(l0[i], lb[i]);
      EXPECT_EQ(l1[i], lb[3 + i]);
    }
  }
  // Labels use every class over enough samples (the teacher is not trivial).
  SyntheticData data(c);
  std::set<int32_t> seen;
  std::vector<float> x(8);
  for (uint64_t n = 0; n < 2000; ++n) {
    int32_t label;
    data.Sample(n, x.data(), &label);
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 5);
    seen.insert(label);
    if (n == 7) {
      EXPECT_EQ(x[3], CounterNormal(c.seed, kDataStream + 7, 3));
    }
  }
  EXPECT_EQ(seen.size(), 5u);
}

}  // namespace
}  // namespace xl::worker
