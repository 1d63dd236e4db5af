// One TrainSpec: every spec the scheduler accepts at submit, xl-train
// resolves on its ranks, and every one it refuses, xl-train refuses too
// (the architecture review's live bug: weight_decay 2 passed submit and
// failed on every rank of every attempt).
#include "common/train_spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "agent/worker/loop/train_config.h"
#include "server/scheduler/job_spec.h"

namespace xl {
namespace {

struct Verdicts {
  absl::Status submit, worker;
};

Verdicts Judge(const v1::TrainSpec& train, int gpus_per_node) {
  v1::JobSpec spec;
  spec.set_name("t");
  *spec.mutable_train() = train;
  spec.mutable_resources()->set_nodes(1);
  spec.mutable_resources()->set_gpus_per_node(gpus_per_node);
  spec.mutable_resources()->set_memory_bytes_per_node(int64_t{8} << 30);
  Verdicts v;
  v.submit = scheduler::ValidateJobSpec(&spec);
  v.worker = worker::ResolveTrainSpec(train, gpus_per_node > 0).status();
  return v;
}

void ExpectAgree(const v1::TrainSpec& train, int gpus, const std::string& what) {
  Verdicts v = Judge(train, gpus);
  // Submit may refuse more (it also checks the spec against the job's
  // resources); it must never accept what the worker refuses.
  if (v.submit.ok()) {
    EXPECT_TRUE(v.worker.ok()) << what << ": accepted at submit, refused by "
                               << "xl-train: " << v.worker;
  }
  if (!v.worker.ok()) {
    EXPECT_FALSE(v.submit.ok()) << what;
  }
}

TEST(TrainSpecTest, SubmitAndTheWorkerAgreeOnEdges) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    std::string what;
    void (*set)(v1::TrainSpec*);
    bool valid;
  };
  const std::vector<Case> cases = {
      {"defaults", [](v1::TrainSpec*) {}, true},
      {"weight_decay 2", [](v1::TrainSpec* t) { t->set_weight_decay(2); }, false},
      {"weight_decay 1", [](v1::TrainSpec* t) { t->set_weight_decay(1); }, false},
      {"weight_decay 0.5", [](v1::TrainSpec* t) { t->set_weight_decay(0.5); }, true},
      {"weight_decay -1", [](v1::TrainSpec* t) { t->set_weight_decay(-1); }, false},
      {"learning_rate 10", [](v1::TrainSpec* t) { t->set_learning_rate(10); }, false},
      {"learning_rate 9.5", [](v1::TrainSpec* t) { t->set_learning_rate(9.5); }, true},
      {"classes 1", [](v1::TrainSpec* t) { t->set_classes(1); }, false},
      {"classes 2", [](v1::TrainSpec* t) { t->set_classes(2); }, true},
      {"steps -1", [](v1::TrainSpec* t) { t->set_steps(-1); }, false},
      {"hidden_layers 300", [](v1::TrainSpec* t) { t->set_hidden_layers(300); }, false},
      {"input_dim 70000", [](v1::TrainSpec* t) { t->set_input_dim(70000); }, false},
      {"bucket_bytes 100", [](v1::TrainSpec* t) { t->set_bucket_bytes(100); }, false},
      {"collective_timeout 0.5s",
       [](v1::TrainSpec* t) { t->mutable_collective_timeout()->set_nanos(500000000); },
       false},
      {"synthetic and shards",
       [](v1::TrainSpec* t) {
         t->mutable_data()->set_synthetic(true);
         t->mutable_data()->set_shards("/d/*.xls");
       },
       false},
      {"device tpu", [](v1::TrainSpec* t) { t->set_device("tpu"); }, false},
      {"precision 99",
       [](v1::TrainSpec* t) { t->set_precision(static_cast<v1::Precision>(99)); },
       false},
      {"batch and auto",
       [](v1::TrainSpec* t) {
         t->set_batch_per_rank(8);
         t->set_batch_per_rank_auto(true);
       },
       false},
  };
  for (const Case& c : cases) {
    v1::TrainSpec t;
    t.set_device("cpu");
    c.set(&t);
    Verdicts v = Judge(t, 0);
    EXPECT_EQ(v.worker.ok(), c.valid) << c.what << ": " << v.worker;
    EXPECT_EQ(v.submit.ok(), c.valid) << c.what << ": " << v.submit;
    if (!c.valid) {
      EXPECT_NE(std::string(v.submit.message()).find("train."),
                std::string::npos)
          << c.what << ": " << v.submit;
    }
  }
  // NaN and bf16 on CPU (no device given, no GPUs asked for).
  v1::TrainSpec t;
  t.set_learning_rate(nan);
  ExpectAgree(t, 0, "learning_rate NaN");
  EXPECT_FALSE(Judge(t, 0).submit.ok());
  t = v1::TrainSpec();
  t.set_precision(v1::BF16);
  EXPECT_FALSE(Judge(t, 0).submit.ok()) << "bf16 without GPUs runs on CPU";
  ExpectAgree(t, 0, "bf16 without device or GPUs");
  EXPECT_TRUE(Judge(t, 8).submit.ok());
  ExpectAgree(t, 8, "bf16 with GPUs");
}

// Random specs from the edges of every field: the two never disagree.
TEST(TrainSpecTest, SubmitAndTheWorkerAgreeOnRandomSpecs) {
  std::mt19937 rng(7);
  const std::vector<int64_t> ints = {0, -1, 1, 2, 255, 256, 257, 1024, 65536,
                                     65537, 1 << 20, (1 << 20) + 1, 1 << 30,
                                     INT32_MAX};
  const std::vector<double> doubles = {0, -0.5, 1e-12, 0.01, 0.999, 1, 2, 9.99,
                                       10, 11};
  auto pick_int = [&] { return ints[rng() % ints.size()]; };
  auto pick_double = [&] { return doubles[rng() % doubles.size()]; };
  int accepted = 0;
  for (int i = 0; i < 5000; ++i) {
    v1::TrainSpec t;
    if (rng() % 3 == 0) t.set_input_dim(static_cast<int32_t>(pick_int()));
    if (rng() % 3 == 0) t.set_hidden_dim(static_cast<int32_t>(pick_int()));
    if (rng() % 3 == 0) t.set_hidden_layers(static_cast<int32_t>(pick_int()));
    if (rng() % 3 == 0) t.set_classes(static_cast<int32_t>(pick_int()));
    if (rng() % 3 == 0) t.set_batch_per_rank(static_cast<int32_t>(pick_int()));
    if (rng() % 3 == 0) t.set_steps(static_cast<int32_t>(pick_int()));
    if (rng() % 3 == 0) t.set_checkpoint_every(static_cast<int32_t>(pick_int()));
    if (rng() % 3 == 0) t.set_metrics_every(static_cast<int32_t>(pick_int()));
    if (rng() % 3 == 0) t.set_learning_rate(pick_double());
    if (rng() % 3 == 0) t.set_weight_decay(pick_double());
    if (rng() % 4 == 0) t.set_bucket_bytes(static_cast<uint64_t>(pick_int()));
    if (rng() % 4 == 0) t.set_precision(static_cast<v1::Precision>(rng() % 5));
    if (rng() % 4 == 0) t.set_device(rng() % 2 ? "cpu" : "cuda");
    const int gpus = rng() % 2 ? 8 : 0;
    Verdicts v = Judge(t, gpus);
    accepted += v.submit.ok();
    if (v.submit.ok()) {
      ASSERT_TRUE(v.worker.ok()) << "accepted at submit, refused by xl-train: "
                                 << v.worker << "\n" << t.DebugString()
                                 << "gpus " << gpus;
    }
  }
  // The sampler reaches both sides.
  EXPECT_GT(accepted, 100);
  EXPECT_LT(accepted, 4900);
}

}  // namespace
}  // namespace xl
