// The CPU training loop. On CPU the gradient all-reduce runs after the whole
// backward pass, bucket by bucket (sequentially); overlapping it with
// backward is a GPU-path feature (streams), and on a CPU the cores that
// would overlap it are the ones doing the GEMMs anyway.
#include "agent/worker/loop/trainer.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/worker/data/batch_producer.h"
#include "agent/worker/loop/batch_fit.h"
#include "agent/worker/loop/checkpoint.h"
#include "agent/worker/loop/resume.h"
#include "agent/worker/loop/step_end.h"
#include "agent/worker/model/adamw.h"
#include "common/duration.h"
#include "common/status.h"

namespace xl::worker {
namespace {

double Seconds(absl::Time a, absl::Time b) {
  return absl::ToDoubleSeconds(b - a);
}

std::atomic<bool> g_stop{false};

void OnSigterm(int) { g_stop.store(true); }

}  // namespace

std::atomic<bool>* SigtermFlag() { return &g_stop; }

void InstallSigtermHandler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

std::vector<std::pair<int64_t, int64_t>> GradientBuckets(
    const std::vector<LayerSpan>& layers, uint64_t bucket_bytes) {
  std::vector<std::pair<int64_t, int64_t>> buckets;
  int64_t end = -1, begin = -1;
  for (size_t i = layers.size(); i-- > 0;) {
    const LayerSpan& s = layers[i];
    const int64_t layer_end = s.b_offset + s.b_size;
    if (end < 0) end = layer_end;
    begin = s.w_offset;
    if (static_cast<uint64_t>(end - begin) * sizeof(float) >= bucket_bytes) {
      buckets.emplace_back(begin, end - begin);
      end = -1;
    }
  }
  if (end >= 0) buckets.emplace_back(begin, end - begin);
  return buckets;
}

MetricsInterval::Run MetricsRunFor(
    const RankInfo& info, const TrainConfig& config,
    const std::vector<std::pair<int64_t, int64_t>>& buckets, int64_t start) {
  MetricsInterval::Run run;
  run.job_id = info.job_id;
  run.attempt = info.attempt;
  run.rank = info.rank;
  run.world = info.world;
  run.batch_per_rank = config.batch_per_rank;
  run.accumulation_steps = config.accumulation_steps;
  for (const auto& [off, n] : buckets) {
    run.bucket_bytes.push_back(static_cast<uint64_t>(n) * sizeof(float));
    run.grad_bytes += static_cast<uint64_t>(n) * sizeof(float);
  }
  run.resumed_from_step = start;
  run.total_steps = config.steps;
  return run;
}

absl::Status RunTraining(const TrainConfig& given, const RankInfo& info,
                         Collective* collective, MetricsSink* sink,
                         const std::string& checkpoint_dir,
                         const TrainOptions& options) {
  if (collective->size() != info.world || collective->rank() != info.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective is rank ", collective->rank(), " of ", collective->size(),
        ", but this is rank ", info.rank, " of ", info.world));
  }
  const int rank = info.rank;
  const int world = info.world;
  TrainConfig config = given;
  // With batch_per_rank auto the batch is known after the resume (below);
  // the model's activation buffers are sized then.
  TrainConfig model_config = config;
  if (config.batch_auto) model_config.batch_per_rank = 1;
  Mlp model(model_config);
  model.Init();
  AdamW opt(AdamW::WeightMask(model.layers(), model.param_count()),
            config.learning_rate, config.weight_decay);
  const int64_t count = model.param_count();
  const uint64_t fingerprint = ConfigFingerprint(config);
  // Metrics, checkpoints (periodic ones written off the loop), stop.
  StepEnd ends(config, {rank, checkpoint_dir, fingerprint,
                        options.keep_checkpoints, options.crash_after_steps});

  // Resume (loop/resume.h): rank 0's newest valid checkpoint, the same on
  // every rank.
  int64_t start = 0;
  int resumed_batch = 0;
  {
    absl::StatusOr<ResumePoint> point =
        AgreeResumePoint(collective, checkpoint_dir, fingerprint, count);
    if (!point.ok()) return point.status();
    if (point->found) {
      start = point->state.step;
      resumed_batch = point->state.batch_per_rank;
      if (absl::Status st = ShareResumeState(
              collective, &*point, &model.params(), &opt.m(), &opt.v());
          !st.ok()) {
        return st;
      }
      // AdamW's t equals the steps completed (one update per step).
      opt.set_t(start);
    }
  }

  // batch_per_rank auto and global_batch: every rank computes the same
  // choice (the budget comes from the job's spec, the same on every node;
  // a resumed run keeps its checkpoint's batch when it fits).
  if (config.batch_auto || config.global_batch > 0) {
    double budget = options.memory_budget_bytes;
    if (config.batch_auto && budget <= 0) {
      absl::StatusOr<double> env = CpuRankBudgetFromEnv();
      if (!env.ok()) return env.status();
      budget = *env;
    }
    std::string line;
    if (absl::Status st = FitBatchForRun(&config, world, /*cpu=*/true, budget,
                                         resumed_batch, &line);
        !st.ok()) {
      return st;
    }
    if (rank == 0) {
      std::printf("xl-train: %s\n", line.c_str());
      std::fflush(stdout);
    }
  }
  const int batch = config.batch_per_rank;
  const int micro = config.accumulation_steps;
  const int step_batch = config.StepBatch();
  model.ReserveBatch(batch);

  // Batches are made one step ahead on a producer thread (two slots), so a
  // step costs compute and all-reduce only where a core is free for it.
  const size_t x_count = static_cast<size_t>(step_batch) * config.input_dim;
  std::vector<float> x(2 * x_count);
  std::vector<int32_t> labels(2 * static_cast<size_t>(step_batch));
  std::unique_ptr<BatchProducer> producer;
  {
    std::vector<BatchSlot> slots;
    for (size_t s = 0; s < 2; ++s) {
      slots.push_back({x.data() + s * x_count, labels.data() + s * step_batch});
    }
    auto r = BatchProducer::Start(config, rank, world, start, config.steps,
                                  std::move(slots), /*threads=*/1);
    if (!r.ok()) return r.status();
    producer = *std::move(r);
  }
  const auto buckets = GradientBuckets(model.layers(), config.bucket_bytes);
  const uint64_t worker_bytes =
      model.allocated_bytes() + opt.allocated_bytes() +
      x.capacity() * sizeof(float) + labels.capacity() * sizeof(int32_t);

  MetricsInterval interval(MetricsRunFor(info, config, buckets, start));
  std::vector<double> bucket_seconds(buckets.size());

  for (int64_t step = start; step < config.steps; ++step) {
    const absl::Time t0 = absl::Now();
    absl::StatusOr<BatchSlot> in = producer->Acquire(step);
    if (!in.ok()) return in.status();
    const absl::Time t1 = absl::Now();
    // Micro-batches add their gradients; their mean is the step's.
    float loss = 0;
    for (int m = 0; m < micro; ++m) {
      loss += model.ForwardBackward(
          in->x + static_cast<size_t>(m) * batch * config.input_dim,
          in->labels + static_cast<size_t>(m) * batch, batch, m > 0);
    }
    if (micro > 1) {
      loss /= micro;
      const float inv = 1.0f / micro;
      for (float& g : model.grads()) g *= inv;
    }
    producer->Release(step);
    const absl::Time t2 = absl::Now();
    for (size_t b = 0; b < buckets.size(); ++b) {
      const absl::Time tb = absl::Now();
      absl::Status st = collective->AllReduceMean(
          model.grads().data() + buckets[b].first, buckets[b].second);
      if (!st.ok()) return st;
      bucket_seconds[b] = Seconds(tb, absl::Now());
    }
    // The step's loss (mean over ranks) and the stop vote, in one tiny
    // all-reduce, so that all ranks stop after the same step.
    const bool stop_here = options.stop != nullptr &&
                           options.stop->load(std::memory_order_relaxed);
    float scalars[2] = {loss, stop_here ? 1.0f : 0.0f};
    if (absl::Status st = collective->AllReduceMean(scalars, 2); !st.ok()) {
      return st;
    }
    const bool stopping = scalars[1] > 0;
    const absl::Time t3b = absl::Now();
    opt.Step(model.params().data(), model.grads().data());
    const absl::Time t4 = absl::Now();

    interval.AddStep(Seconds(t0, t1), Seconds(t1, t2) + Seconds(t3b, t4),
                     Seconds(t2, t3b), Seconds(t0, t4), bucket_seconds.data());
    const int64_t done = step + 1;

    if (ends.MetricsDue(done, stopping)) {
      v1::TrainMetrics m = interval.Finish(done, scalars[0], worker_bytes);
      if (sink != nullptr) sink->Report(m);
    }
    if (absl::Status st = ends.Checkpoint(done, stopping, batch,
                                          [&](TrainState* s) {
                                            s->adam_t = opt.t();
                                            s->params = model.params();
                                            s->m = opt.m();
                                            s->v = opt.v();
                                            return absl::OkStatus();
                                          });
        !st.ok()) {
      return st;
    }
    if (stopping) {
      if (options.final_params) *options.final_params = model.params();
      return ends.Stopped(done);
    }
    if (absl::Status st = ends.CrashPoint(done); !st.ok()) return st;
  }
  if (options.final_params) *options.final_params = model.params();
  if (rank == 0) {
    std::printf("xl-train: done, %lld steps; worker memory %s, peak RSS %s\n",
                static_cast<long long>(config.steps),
                HumanBytes(worker_bytes).c_str(),
                HumanBytes(ProcessPeakRssBytes()).c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace xl::worker
