// The GPU training loop; see cuda_trainer.h. Per step: the batch (made on
// host threads while the previous step ran) is copied on the copy stream;
// forward and backward run on the compute stream; after each bucket's last
// layer an event lets the NCCL stream all-reduce that bucket while backward
// goes on; the optimizer waits for the last bucket. The host waits for each
// step by polling (NcclCollective::WaitEvent), so a hung peer aborts the
// communicator instead of blocking forever.
#include "agent/worker/cuda_trainer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/worker/checkpoint.h"
#include "agent/worker/cuda_check.h"
#include "agent/worker/cuda_mlp.h"
#include "agent/worker/data.h"
#include "agent/worker/data_shards.h"
#include "agent/worker/nccl_collective.h"
#include "common/duration.h"
#include "common/status.h"

namespace xl::worker {
namespace {

double Seconds(absl::Time a, absl::Time b) {
  return absl::ToDoubleSeconds(b - a);
}

// W_l from the counter RNG (InitWeight), b_l = 0, as Mlp::Init; on threads,
// since a width-8192 model has hundreds of millions of weights.
std::vector<float> InitialParams(const TrainConfig& config,
                                 const std::vector<LayerSpan>& layers) {
  std::vector<float> params(config.ParamCount(), 0.0f);
  const int threads =
      std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t l = 0; l < layers.size(); ++l) {
        const LayerSpan& s = layers[l];
        float* w = params.data() + s.w_offset;
        const int64_t chunk = (s.w_size + threads - 1) / threads;
        const int64_t end = std::min(s.w_size, (t + 1) * chunk);
        for (int64_t i = t * chunk; i < end; ++i) {
          w[i] = InitWeight(config.seed, static_cast<int>(l) + 1, i, s.in);
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  return params;
}

// Makes rank `rank`'s batch of a step on several host threads. Sample n =
// step*W*B + rank*B + i is the same as sample n of sub-batch s of B/k
// samples for "rank" rank*k+s of "world" W*k, so each thread calls
// SyntheticData::Batch on its slice and the batch is bitwise the same.
class BatchMaker {
 public:
  BatchMaker(const TrainConfig& config, int rank, int world)
      : config_(config), rank_(rank), world_(world) {
    const int b = config.batch_per_rank;
    const int max_k =
        std::max(1u, std::min(8u, std::thread::hardware_concurrency() / 2));
    for (int k = max_k; k >= 1; --k) {
      if (b % k == 0) {
        parts_ = k;
        break;
      }
    }
    TrainConfig sub = config;
    sub.batch_per_rank = b / parts_;
    for (int s = 0; s < parts_; ++s) {
      sources_.push_back(std::make_unique<SyntheticData>(sub));
    }
  }

  absl::Status Open(int64_t first_step) {
    if (config_.shards.empty()) return absl::OkStatus();
    auto r =
        ShardReader::Open(config_.shards, config_, rank_, world_, first_step);
    if (!r.ok()) return r.status();
    reader_ = *std::move(r);
    return absl::OkStatus();
  }

  // Called for steps in increasing order (the shard reader is sequential).
  absl::Status Make(int64_t step, float* x, int32_t* labels) {
    if (reader_) return reader_->Next(x, labels);
    const int sub_b = config_.batch_per_rank / parts_;
    std::vector<std::thread> pool;
    for (int s = 0; s < parts_; ++s) {
      pool.emplace_back([&, s] {
        sources_[s]->Batch(
            step, rank_ * parts_ + s, world_ * parts_,
            x + static_cast<size_t>(s) * sub_b * config_.input_dim,
            labels + static_cast<size_t>(s) * sub_b);
      });
    }
    for (auto& t : pool) t.join();
    return absl::OkStatus();
  }

 private:
  TrainConfig config_;
  int rank_;
  int world_;
  int parts_ = 1;
  std::vector<std::unique_ptr<SyntheticData>> sources_;
  std::unique_ptr<ShardReader> reader_;
};

// CUDA objects of one run, freed in the destructor.
struct DeviceResources {
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  std::vector<cudaEvent_t> events;
  std::vector<void*> device;
  std::vector<void*> pinned;

  ~DeviceResources() {
    if (compute) cudaStreamSynchronize(compute);
    if (copy) cudaStreamSynchronize(copy);
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (void* p : device) cudaFree(p);
    for (void* p : pinned) cudaFreeHost(p);
    if (compute) cudaStreamDestroy(compute);
    if (copy) cudaStreamDestroy(copy);
  }
  absl::Status Event(cudaEvent_t* e, bool timing) {
    XL_CUDA_CHECK(cudaEventCreateWithFlags(
        e, timing ? cudaEventDefault : cudaEventDisableTiming));
    events.push_back(*e);
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Device(T** p, size_t bytes) {
    XL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(p), bytes));
    device.push_back(*p);
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Pinned(T** p, size_t bytes) {
    XL_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(p), bytes));
    pinned.push_back(*p);
    return absl::OkStatus();
  }
};

float ElapsedSeconds(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ms / 1000.0f;
}

int LocalRank() {
  const char* s = std::getenv("LOCAL_RANK");
  int v = 0;
  if (s != nullptr && absl::SimpleAtoi(s, &v) && v >= 0) return v;
  return 0;
}

absl::Status Train(const TrainConfig& config, const RankInfo& info,
                   Rendezvous* rendezvous, MetricsSink* sink,
                   const std::string& checkpoint_dir,
                   const CudaTrainOptions& options) {
  const int rank = info.rank;
  const int world = info.world;
  const int batch = config.batch_per_rank;
  SetCheckRank(rank);
  const int gpus = CudaDeviceCount();
  if (gpus == 0) {
    return absl::FailedPreconditionError(
        "train.device is cuda but no GPU is visible (CUDA_VISIBLE_DEVICES, "
        "driver)");
  }
  const int device = options.device >= 0 ? options.device : LocalRank() % gpus;
  XL_CUDA_CHECK(cudaSetDevice(device));
  ASSIGN_OR_RETURN(GpuPeak peak, LookupGpuPeak(device));

  // Device memory in use before this worker allocates anything (the CUDA
  // context, other processes): peak memory is reported above it.
  XL_CUDA_CHECK(cudaFree(nullptr));  // creates the context
  uint64_t used_before = 0;
  {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      used_before = total_b - free_b;
    }
  }

  DeviceResources res;
  XL_CUDA_CHECK(cudaStreamCreateWithFlags(&res.compute, cudaStreamNonBlocking));
  XL_CUDA_CHECK(cudaStreamCreateWithFlags(&res.copy, cudaStreamNonBlocking));
  ASSIGN_OR_RETURN(std::unique_ptr<CudaMlp> model,
                   CudaMlp::Create(config, batch, res.compute));
  const int64_t count = model->param_count();
  const uint64_t fingerprint = ConfigFingerprint(config);
  // Periodic checkpoints are written off the loop: it pays only for the
  // copy from the GPU.
  CheckpointWriter writer(PeriodicCheckpoints(
      checkpoint_dir, fingerprint, options.base.keep_checkpoints));

  std::unique_ptr<NcclCollective> nccl;
  if (world > 1) {
    NcclOptions options = NcclOptions::FromEnv();
    if (config.collective_timeout > absl::ZeroDuration()) {
      options.timeout = config.collective_timeout;
    }
    ASSIGN_OR_RETURN(nccl,
                     NcclCollective::Create(rank, world, rendezvous, options));
  }

  // Init or resume. Rank 0 reads the newest checkpoint and broadcasts it
  // (as the CPU path does), so every rank holds bitwise the same state.
  int64_t start = 0;
  {
    std::vector<float> params = InitialParams(config, model->layers());
    TrainState loaded;
    // wire: [found, step, adam_t and good_steps as the bits of three int64,
    // loss_scale].
    float wire[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t meta[3] = {0, 0, 0};
    static_assert(sizeof(meta) == 6 * sizeof(float));
    if (rank == 0 && !checkpoint_dir.empty()) {
      ASSIGN_OR_RETURN(
          LoadedCheckpoint r,
          LoadNewestCheckpoint(checkpoint_dir, fingerprint, count));
      if (r.state.has_value()) {
        loaded = *std::move(r.state);
        wire[0] = 1;
        meta[0] = loaded.step;
        meta[1] = loaded.adam_t;
        meta[2] = loaded.good_steps;
        std::memcpy(&wire[1], meta, sizeof(meta));
        wire[7] = loaded.loss_scale;
        std::printf("xl-train: resuming from %s (step %lld) on GPU\n",
                    r.path.c_str(), static_cast<long long>(loaded.step));
      }
    }
    if (nccl) RETURN_IF_ERROR(nccl->Broadcast(wire, 8, 0));
    if (wire[0] == 1) {
      std::memcpy(meta, &wire[1], sizeof(meta));
      start = meta[0];
      if (rank != 0) {
        loaded.params.assign(count, 0.0f);
        loaded.m.assign(count, 0.0f);
        loaded.v.assign(count, 0.0f);
      }
      if (nccl) {
        for (auto* vec : {&loaded.params, &loaded.m, &loaded.v}) {
          RETURN_IF_ERROR(nccl->Broadcast(vec->data(), count, 0));
        }
      }
      RETURN_IF_ERROR(model->SetParams(loaded.params.data()));
      RETURN_IF_ERROR(model->SetOptimizerState(
          loaded.m.data(), loaded.v.data(), meta[1], wire[7], meta[2]));
    } else {
      RETURN_IF_ERROR(model->SetParams(params.data()));
    }
  }

  // Data: two pinned host slots and two device slots.
  const size_t x_bytes =
      static_cast<size_t>(batch) * config.input_dim * sizeof(float);
  const size_t l_bytes = static_cast<size_t>(batch) * sizeof(int32_t);
  float* hx[2];
  int32_t* hl[2];
  float* dx[2];
  int32_t* dl[2];
  for (int s = 0; s < 2; ++s) {
    RETURN_IF_ERROR(res.Pinned(&hx[s], x_bytes));
    RETURN_IF_ERROR(res.Pinned(&hl[s], l_bytes));
    RETURN_IF_ERROR(res.Device(&dx[s], x_bytes));
    RETURN_IF_ERROR(res.Device(&dl[s], l_bytes));
  }
  // scalars: [loss, stop vote], all-reduced after the gradients.
  float* d_scalars = nullptr;
  float* h_scalars = nullptr;
  RETURN_IF_ERROR(res.Device(&d_scalars, 2 * sizeof(float)));
  RETURN_IF_ERROR(res.Pinned(&h_scalars, 2 * sizeof(float)));

  cudaEvent_t ev_copy_start, ev_copy_done, ev_start, ev_bwd_done, ev_ar_start,
      ev_ar_done, ev_step_done, ev_scalars;
  RETURN_IF_ERROR(res.Event(&ev_copy_start, true));
  RETURN_IF_ERROR(res.Event(&ev_copy_done, true));
  RETURN_IF_ERROR(res.Event(&ev_start, true));
  RETURN_IF_ERROR(res.Event(&ev_bwd_done, true));
  RETURN_IF_ERROR(res.Event(&ev_ar_start, true));
  RETURN_IF_ERROR(res.Event(&ev_ar_done, true));
  RETURN_IF_ERROR(res.Event(&ev_step_done, true));
  RETURN_IF_ERROR(res.Event(&ev_scalars, false));

  // Buckets, last layer first; bucket b is ready after the layer whose W
  // starts it has its gradients (layers come in reverse order).
  const auto buckets = GradientBuckets(model->layers(), config.bucket_bytes);
  std::vector<int> bucket_of_layer(model->layers().size(), -1);
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (size_t l = 0; l < model->layers().size(); ++l) {
      if (model->layers()[l].w_offset == buckets[b].first) {
        bucket_of_layer[l] = static_cast<int>(b);
      }
    }
  }
  std::vector<cudaEvent_t> bucket_ready(buckets.size());
  for (auto& e : bucket_ready) RETURN_IF_ERROR(res.Event(&e, false));

  BatchMaker maker(config, rank, world);
  RETURN_IF_ERROR(maker.Open(start));
  auto make_async = [&](int64_t step) {
    const int slot = static_cast<int>(step % 2);
    return std::async(std::launch::async, [&maker, step, slot, &hx, &hl] {
      return maker.Make(step, hx[slot], hl[slot]);
    });
  };
  std::future<absl::Status> next_batch;
  if (start < config.steps) next_batch = make_async(start);

  const uint64_t grad_bytes = static_cast<uint64_t>(count) * sizeof(float);
  uint64_t peak_used = 0;
  auto sample_memory = [&] {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess &&
        total_b - free_b > used_before) {
      // The model, NCCL's and cuBLAS's buffers, the batches; not the
      // context or other processes on the GPU.
      peak_used =
          std::max<uint64_t>(peak_used, total_b - free_b - used_before);
    }
    peak_used = std::max<uint64_t>(peak_used, model->allocated_bytes());
  };
  sample_memory();

  MetricsInterval interval({info.job_id, info.attempt, rank, world, batch,
                            grad_bytes, start, config.steps,
                            static_cast<uint64_t>(count),
                            peak.bf16_tflops * 1e12});
  absl::Time timed_start = absl::Now();
  int64_t timed_steps = 0;
  const int64_t first_timed = start + options.warmup_steps;
  float last_loss = 0;
  const std::atomic<bool>* stop = options.base.stop;

  for (int64_t step = start; step < config.steps; ++step) {
    if (step == first_timed) timed_start = absl::Now();
    const absl::Time t0 = absl::Now();
    const int slot = static_cast<int>(step % 2);
    RETURN_IF_ERROR(next_batch.get());
    const absl::Time t1 = absl::Now();
    XL_CUDA_CHECK(cudaEventRecord(ev_copy_start, res.copy));
    XL_CUDA_CHECK(cudaMemcpyAsync(dx[slot], hx[slot], x_bytes,
                                  cudaMemcpyHostToDevice, res.copy));
    XL_CUDA_CHECK(cudaMemcpyAsync(dl[slot], hl[slot], l_bytes,
                                  cudaMemcpyHostToDevice, res.copy));
    XL_CUDA_CHECK(cudaEventRecord(ev_copy_done, res.copy));
    // The other host slot was last copied during the previous step, which
    // has completed: the next batch can be made there now, overlapping
    // this step's GPU work.
    if (step + 1 < config.steps) next_batch = make_async(step + 1);

    XL_CUDA_CHECK(cudaStreamWaitEvent(res.compute, ev_copy_done, 0));
    XL_CUDA_CHECK(cudaEventRecord(ev_start, res.compute));
    bool ar_started = false;
    auto on_layer = [&](int l) -> absl::Status {
      const int b = bucket_of_layer[l];
      if (!nccl || b < 0) return absl::OkStatus();
      XL_CUDA_CHECK(cudaEventRecord(bucket_ready[b], res.compute));
      if (!ar_started) {
        XL_CUDA_CHECK(cudaStreamWaitEvent(nccl->stream(), bucket_ready[b], 0));
        XL_CUDA_CHECK(cudaEventRecord(ev_ar_start, nccl->stream()));
        ar_started = true;
      }
      return nccl->EnqueueAllReduceMean(model->grads() + buckets[b].first,
                                        buckets[b].second, bucket_ready[b]);
    };
    RETURN_IF_ERROR(
        model->ForwardBackward(dx[slot], dl[slot], batch, on_layer));
    XL_CUDA_CHECK(cudaEventRecord(ev_bwd_done, res.compute));

    // Loss and stop vote: one tiny all-reduce after the gradients.
    h_scalars[1] = (stop != nullptr && stop->load(std::memory_order_relaxed))
                       ? 1.0f
                       : 0.0f;
    XL_CUDA_CHECK(cudaMemcpyAsync(d_scalars, model->loss_device(),
                                  sizeof(float), cudaMemcpyDeviceToDevice,
                                  res.compute));
    XL_CUDA_CHECK(cudaMemcpyAsync(d_scalars + 1, h_scalars + 1, sizeof(float),
                                  cudaMemcpyHostToDevice, res.compute));
    if (nccl) {
      XL_CUDA_CHECK(cudaEventRecord(ev_scalars, res.compute));
      RETURN_IF_ERROR(nccl->EnqueueAllReduceMean(d_scalars, 2, ev_scalars));
      XL_CUDA_CHECK(cudaEventRecord(ev_ar_done, nccl->stream()));
      XL_CUDA_CHECK(cudaStreamWaitEvent(res.compute, ev_ar_done, 0));
    } else {
      XL_CUDA_CHECK(cudaEventRecord(ev_ar_start, res.compute));
      XL_CUDA_CHECK(cudaEventRecord(ev_ar_done, res.compute));
    }
    RETURN_IF_ERROR(model->Step());
    XL_CUDA_CHECK(cudaMemcpyAsync(h_scalars, d_scalars, 2 * sizeof(float),
                                  cudaMemcpyDeviceToHost, res.compute));
    XL_CUDA_CHECK(cudaEventRecord(ev_step_done, res.compute));
    if (nccl) {
      RETURN_IF_ERROR(nccl->WaitEvent(ev_step_done));
    } else {
      XL_CUDA_CHECK(cudaEventSynchronize(ev_step_done));
    }
    const absl::Time t4 = absl::Now();
    const float loss = h_scalars[0];
    const bool stopping = h_scalars[1] > 0;
    last_loss = loss;

    interval.AddStep(
        Seconds(t0, t1) + ElapsedSeconds(ev_copy_start, ev_copy_done),
        ElapsedSeconds(ev_start, ev_bwd_done) +
            ElapsedSeconds(ev_ar_done, ev_step_done),
        ElapsedSeconds(ev_ar_start, ev_ar_done), Seconds(t0, t4));
    if (step >= first_timed) ++timed_steps;
    const int64_t done = step + 1;

    if (rank == 0 && (done % config.metrics_every == 0 ||
                      done == config.steps || stopping)) {
      sample_memory();
      v1::TrainMetrics m = interval.Finish(done, loss, peak_used);
      if (sink != nullptr) sink->Report(m);
    }

    const bool periodic =
        config.checkpoint_every > 0 && done % config.checkpoint_every == 0;
    if (rank == 0 && !checkpoint_dir.empty() && (periodic || stopping)) {
      // One write at a time: a disk that does not keep up slows the loop.
      (void)writer.Wait();  // Its failure was said when it happened.
      TrainState s;
      s.step = done;
      s.params.resize(count);
      s.m.resize(count);
      s.v.resize(count);
      RETURN_IF_ERROR(model->GetParams(s.params.data()));
      RETURN_IF_ERROR(model->GetOptimizerState(
          s.m.data(), s.v.data(), &s.adam_t, &s.loss_scale, &s.good_steps));
      if (stopping) {
        absl::Status st = WriteCheckpoint(checkpoint_dir, s, fingerprint,
                                          options.base.keep_checkpoints);
        if (!st.ok()) return Annotate(st, "final checkpoint");
      } else {
        writer.Submit(std::move(s));
      }
    }
    if (stopping) {
      if (next_batch.valid()) next_batch.wait();
      if (options.base.final_params) {
        options.base.final_params->resize(count);
        RETURN_IF_ERROR(model->GetParams(options.base.final_params->data()));
      }
      return absl::CancelledError(absl::StrCat(
          "stopped by SIGTERM after step ", done,
          checkpoint_dir.empty()
              ? " (no checkpoint dir, nothing saved)"
              : absl::StrCat("; checkpoint ",
                             CheckpointPath(checkpoint_dir, done))));
    }
    if (options.base.crash_after_steps > 0 &&
        done == options.base.crash_after_steps) {
      if (next_batch.valid()) next_batch.wait();
      return absl::AbortedError(
          absl::StrCat("simulated crash after step ", done));
    }
  }
  const double timed_wall = Seconds(timed_start, absl::Now());
  sample_memory();
  if (options.base.final_params) {
    options.base.final_params->resize(count);
    RETURN_IF_ERROR(model->GetParams(options.base.final_params->data()));
  }
  const double sps =
      timed_steps > 0 && timed_wall > 0
          ? static_cast<double>(timed_steps) * world * batch / timed_wall
          : 0;
  const double mfu =
      ModelFlopsUtilization(count, sps / world, peak.bf16_tflops);
  if (options.stats != nullptr) {
    CudaRunStats& st = *options.stats;
    st.steps_run = config.steps - start;
    st.samples_per_second = sps;
    st.step_seconds = timed_steps > 0 ? timed_wall / timed_steps : 0;
    st.mfu = mfu;
    st.peak_tflops = peak.bf16_tflops;
    st.device_name = peak.name;
    st.peak_memory_bytes = peak_used;
    st.last_loss = last_loss;
  }
  if (rank == 0) {
    std::printf(
        "xl-train: done, %lld steps on %s; %.0f samples/s, MFU %.1f%% of "
        "%.0f TFLOP/s dense bf16 per GPU (%s), peak GPU memory %.2f GiB\n",
        static_cast<long long>(config.steps), peak.name.c_str(), sps,
        100.0 * mfu, peak.bf16_tflops,
        peak.bf16_tflops > 0 ? "table below" : "device not in the table",
        static_cast<double>(peak_used) / (1ull << 30));
    std::printf("%s", GpuPeakTable().c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

absl::Status RunCudaTraining(const TrainConfig& config, const RankInfo& info,
                             Rendezvous* rendezvous, MetricsSink* sink,
                             const std::string& checkpoint_dir,
                             const CudaTrainOptions& options) {
  return Train(config, info, rendezvous, sink, checkpoint_dir, options);
}

absl::Status RunCudaTraining(const TrainConfig& config, const RankInfo& info,
                             Rendezvous* rendezvous, MetricsSink* sink,
                             const std::string& checkpoint_dir) {
  CudaTrainOptions options;
  options.base.stop = SigtermFlag();
  return Train(config, info, rendezvous, sink, checkpoint_dir, options);
}

}  // namespace xl::worker
