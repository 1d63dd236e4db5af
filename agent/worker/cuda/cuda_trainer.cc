// Over 600 lines: the GPU loop's set-up (model, buckets, streams, resume)
// and its step are one function's state; resume is loop/resume.cc.
// The GPU training loop; see cuda_trainer.h. Per step: the batch (made
// ahead by BatchProducer's host threads) is copied on the copy stream;
// forward and backward run on the compute stream; after each bucket's last
// layer an event lets the NCCL stream all-reduce that bucket while backward
// goes on; the optimizer waits for the last bucket. The host waits for each
// step by polling (NcclCollective::WaitEvent), so a hung peer aborts the
// communicator instead of blocking forever.
#include "agent/worker/cuda/cuda_trainer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/worker/comm/nccl_collective.h"
#include "agent/worker/cuda/cuda_check.h"
#include "agent/worker/cuda/cuda_mlp.h"
#include "agent/worker/cuda/kernels.h"
#include "agent/worker/data/batch_producer.h"
#include "agent/worker/data/data.h"
#include "agent/worker/loop/batch_fit.h"
#include "agent/worker/loop/checkpoint.h"
#include "agent/worker/loop/resume.h"
#include "agent/worker/loop/step_end.h"
#include "common/duration.h"
#include "common/planner/xl_train_gpus.h"
#include "common/status.h"

namespace xl::worker {
namespace {

// Pinned host slots of the producer: it makes two steps ahead.
constexpr int kHostSlots = 3;

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

absl::Status Train(const TrainConfig& given, const RankInfo& info,
                   Rendezvous* rendezvous, MetricsSink* sink,
                   const std::string& checkpoint_dir,
                   const CudaTrainOptions& options) {
  const int rank = info.rank;
  const int world = info.world;
  TrainConfig config = given;
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
  {
    std::string why;
    if (!planner::XlTrainSupportsComputeCapability(peak.major, peak.minor,
                                                   &why)) {
      return absl::FailedPreconditionError(
          absl::StrCat("GPU ", device, " (", peak.name, ") cannot run "
                       "xl-train: ", why));
    }
    // And this binary: a build for fewer architectures than the default
    // (CMAKE_CUDA_ARCHITECTURES) may lack this GPU's code.
    if (cudaError_t e = ProbeKernelImage(); e != cudaSuccess) {
      cudaGetLastError();
      return absl::FailedPreconditionError(absl::StrCat(
          "GPU ", device, " (", peak.name, ", compute capability ",
          peak.major, ".", peak.minor, ") cannot run this xl-train: ",
          cudaGetErrorString(e),
          "; it was built without code for this GPU: rebuild with "
          "CMAKE_CUDA_ARCHITECTURES including ", peak.major, peak.minor,
          " (the default covers 80, 86, 89 and 90 plus PTX)"));
    }
  }

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

  // Declared before the communicator so that it is destroyed after it: a
  // failed step may leave all-reduces queued on the model's gradients, and
  // the communicator's destructor aborts them (with its timeout) where
  // freeing the model first would wait on them forever.
  std::unique_ptr<CudaMlp> model;
  // The communicator first: its buffers are not the model's to fit into
  // (see the barrier below).
  std::unique_ptr<NcclCollective> nccl;
  if (world > 1) {
    NcclOptions options = NcclOptions::FromEnv();
    if (config.collective_timeout > absl::ZeroDuration()) {
      options.timeout = config.collective_timeout;
    }
    ASSIGN_OR_RETURN(nccl,
                     NcclCollective::Create(rank, world, rendezvous, options));
  }

  // Resume (loop/resume.h), step one: rank 0's newest checkpoint is agreed
  // on now, since a resumed run keeps the batch it trained with (below);
  // its state is shared after the model exists. Its agreement is the first
  // collective of every run, before any large allocation: NCCL sets up its
  // connections and staging buffer while the GPU has room, so the later
  // agreements need no new memory on a rank that ran out.
  ASSIGN_OR_RETURN(
      ResumePoint resume,
      AgreeResumePoint(nccl.get(), checkpoint_dir, ConfigFingerprint(config),
                       config.ParamCount()));

  // batch_per_rank auto / global_batch: rank 0 fits the batch to its free
  // memory and every rank takes that choice (a batch per rank that differs
  // would misalign the data); a rank with less room says so.
  if (config.batch_auto || config.global_batch > 0) {
    // NCCL connects lazily, each algorithm's buffers allocated when it is
    // first used: an all-reduce the size of a gradient bucket here, so that
    // the free memory measured is what is left after them.
    if (nccl) {
      std::vector<float> warm(
          std::min<uint64_t>(config.bucket_bytes, 64ull << 20) / sizeof(float),
          0.0f);
      RETURN_IF_ERROR(nccl->AllReduceMean(warm.data(), warm.size()));
    }
    size_t free_b = 0, total_b = 0;
    XL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    std::string line;
    // The producer pins kHostSlots host copies of a step's inputs.
    absl::Status fit = FitBatchForRun(
        &config, world, /*cpu=*/false, static_cast<double>(free_b),
        resume.found ? resume.state.batch_per_rank : 0, &line,
        PinnedStepBatchCap(config, kHostSlots));
    // [ok, batch, micro-batches]; small integers are exact in a float.
    float wire[3] = {fit.ok() ? 1.0f : 0.0f,
                     static_cast<float>(config.batch_per_rank),
                     static_cast<float>(config.accumulation_steps)};
    if (nccl) RETURN_IF_ERROR(nccl->Broadcast(wire, 3, 0));
    // Rank 0's choice decides: another rank's own fit (its memory, no
    // checkpoint) is only checked below.
    if (rank == 0 && !fit.ok()) return fit;
    if (wire[0] != 1.0f) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank 0 could not fit ",
          config.batch_auto ? "train.batch_per_rank: auto"
                            : "train.batch_per_rank with train.global_batch",
          " (its error says why)"));
    }
    config.batch_per_rank = static_cast<int>(wire[1]);
    config.accumulation_steps = static_cast<int>(wire[2]);
    absl::Status own = absl::OkStatus();
    if (config.batch_auto &&
        MaxBatchPerRank(config, false, static_cast<double>(free_b),
                        config.accumulation_steps) < config.batch_per_rank) {
      own = absl::ResourceExhaustedError(absl::StrCat(
          "train.batch_per_rank: auto: rank 0 chose ", config.batch_per_rank,
          " but GPU ", device, " of rank ", rank, " has only ", free_b >> 20,
          " MiB free (another process on it?)"));
    }
    RETURN_IF_ERROR(AgreeAllOk(
        nccl.get(), own,
        absl::StrCat("to fit rank 0's batch_per_rank auto choice ",
                     config.batch_per_rank, " in its GPU's free memory"),
        "free that GPU or set train.batch_per_rank"));
    if (rank == 0) {
      std::printf("xl-train: %s\n", line.c_str());
      std::fflush(stdout);
    }
  }
  // A step is `micro` micro-batches of `batch`: their gradients add up on
  // the GPU and are all-reduced once, during the last one's backward.
  const int batch = config.batch_per_rank;
  const int micro = std::max(1, config.accumulation_steps);
  const int step_batch = batch * micro;

  {
    absl::StatusOr<std::unique_ptr<CudaMlp>> created =
        CudaMlp::Create(config, batch, res.compute);
    RETURN_IF_ERROR(AgreeAllOk(nccl.get(), created.status(),
                               "to allocate the model on its GPU",
                               "free that GPU or lower train.batch_per_rank"));
    model = *std::move(created);
  }
  const int64_t count = model->param_count();
  const uint64_t fingerprint = ConfigFingerprint(config);
  // Metrics, checkpoints (periodic ones written off the loop: it pays only
  // for the copy from the GPU), stop.
  StepEnd ends(config,
               {rank, checkpoint_dir, fingerprint,
                options.base.keep_checkpoints, options.base.crash_after_steps});

  // Init or resume, step two: rank 0's checkpoint is broadcast, so every
  // rank holds bitwise the same state.
  int64_t start = 0;
  if (resume.found) {
    if (resume.count != count) {
      return absl::InternalError(absl::StrCat("the model has ", count,
                                              " parameters, its config says ",
                                              resume.count));
    }
    start = resume.state.step;
    std::vector<float> params, m, v;
    RETURN_IF_ERROR(ShareResumeState(nccl.get(), &resume, &params, &m, &v));
    RETURN_IF_ERROR(model->SetParams(params.data()));
    RETURN_IF_ERROR(model->SetOptimizerState(
        m.data(), v.data(), resume.state.adam_t, resume.state.loss_scale,
        resume.state.good_steps));
  } else {
    RETURN_IF_ERROR(
        model->SetParams(InitialParams(config, model->layers()).data()));
  }

  // Data: the producer's pinned host slots, a whole step's inputs each,
  // and two device slots of one micro-batch each (as batch_fit.cc counts
  // them): micro-batch u is copied into slot u % 2 while u - 1 computes.
  const size_t x_micro = static_cast<size_t>(batch) * config.input_dim;
  const size_t x_bytes = x_micro * sizeof(float);
  const size_t l_bytes = static_cast<size_t>(batch) * sizeof(int32_t);
  std::vector<BatchSlot> host_slots(kHostSlots);
  float* dx[2] = {nullptr, nullptr};
  int32_t* dl[2] = {nullptr, nullptr};
  // copied[s]: slot s holds its micro-batch; consumed[s]: the compute that
  // read it is done, so the copy stream may overwrite it.
  cudaEvent_t copied[2], consumed[2];
  // scalars: [loss, stop vote], all-reduced after the gradients.
  float* d_scalars = nullptr;
  float* h_scalars = nullptr;
  absl::Status allocated = [&]() -> absl::Status {
    for (BatchSlot& slot : host_slots) {
      RETURN_IF_ERROR(res.Pinned(&slot.x, x_bytes * micro));
      RETURN_IF_ERROR(res.Pinned(&slot.labels, l_bytes * micro));
    }
    for (int s = 0; s < 2; ++s) {
      RETURN_IF_ERROR(res.Device(&dx[s], x_bytes));
      RETURN_IF_ERROR(res.Device(&dl[s], l_bytes));
      RETURN_IF_ERROR(res.Event(&copied[s], false));
      RETURN_IF_ERROR(res.Event(&consumed[s], false));
    }
    RETURN_IF_ERROR(res.Device(&d_scalars, 2 * sizeof(float)));
    return res.Pinned(&h_scalars, 2 * sizeof(float));
  }();
  RETURN_IF_ERROR(AgreeAllOk(
      nccl.get(), allocated,
      "to allocate its input slots (pinned host and GPU memory)",
      "lower train.batch_per_rank or train.global_batch, or free memory on "
      "that node"));

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

  // Per bucket: events around its all-reduce on the NCCL stream, so its
  // own time (not the wait for backward) gives its bandwidth.
  std::vector<cudaEvent_t> bucket_start(buckets.size()),
      bucket_end(buckets.size());
  for (auto& e : bucket_start) RETURN_IF_ERROR(res.Event(&e, true));
  for (auto& e : bucket_end) RETURN_IF_ERROR(res.Event(&e, true));
  std::vector<double> bucket_seconds(buckets.size(), 0.0);

  // Batches are made ahead by a pool of host threads; what each holds
  // depends on the step alone (BatchProducerTest).
  ASSIGN_OR_RETURN(
      std::unique_ptr<BatchProducer> producer,
      BatchProducer::Start(config, rank, world, start, config.steps,
                           host_slots, ProducerThreads(16)));

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

  const double peak_tflops = peak.Tflops(model->precision());
  MetricsInterval::Run run = MetricsRunFor(info, config, buckets, start);
  run.params = static_cast<uint64_t>(count);
  run.peak_flops = peak_tflops * 1e12;
  run.precision = model->precision();
  MetricsInterval interval(run);
  absl::Time timed_start = absl::Now();
  int64_t timed_steps = 0;
  const int64_t first_timed = start + options.warmup_steps;
  float last_loss = 0;
  const std::atomic<bool>* stop = options.base.stop;

  for (int64_t step = start; step < config.steps; ++step) {
    if (step == first_timed) timed_start = absl::Now();
    const absl::Time t0 = absl::Now();
    ASSIGN_OR_RETURN(BatchSlot in, producer->Acquire(step));
    const absl::Time t1 = absl::Now();
    // Enqueues micro-batch m's copy into device slot m % 2, after the
    // compute that last read that slot (micro-batch m - 2; an earlier step's
    // work is done, the host waited for it).
    auto copy_in = [&](int m) -> absl::Status {
      const int s = m % 2;
      if (m >= 2) XL_CUDA_CHECK(cudaStreamWaitEvent(res.copy, consumed[s], 0));
      if (m == 0) XL_CUDA_CHECK(cudaEventRecord(ev_copy_start, res.copy));
      XL_CUDA_CHECK(cudaMemcpyAsync(dx[s], in.x + m * x_micro, x_bytes,
                                    cudaMemcpyHostToDevice, res.copy));
      XL_CUDA_CHECK(cudaMemcpyAsync(dl[s],
                                    in.labels + m * static_cast<size_t>(batch),
                                    l_bytes, cudaMemcpyHostToDevice, res.copy));
      XL_CUDA_CHECK(cudaEventRecord(copied[s], res.copy));
      // The first copy is what the step waits for (data time); the others
      // overlap compute.
      if (m == 0) XL_CUDA_CHECK(cudaEventRecord(ev_copy_done, res.copy));
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(copy_in(0));
    XL_CUDA_CHECK(cudaStreamWaitEvent(res.compute, copied[0], 0));
    XL_CUDA_CHECK(cudaEventRecord(ev_start, res.compute));
    bool ar_started = false;
    auto on_layer = [&](int l) -> absl::Status {
      const int b = bucket_of_layer[l];
      if (!nccl || b < 0) return absl::OkStatus();
      XL_CUDA_CHECK(cudaEventRecord(bucket_ready[b], res.compute));
      XL_CUDA_CHECK(cudaStreamWaitEvent(nccl->stream(), bucket_ready[b], 0));
      if (!ar_started) {
        XL_CUDA_CHECK(cudaEventRecord(ev_ar_start, nccl->stream()));
        ar_started = true;
      }
      XL_CUDA_CHECK(cudaEventRecord(bucket_start[b], nccl->stream()));
      RETURN_IF_ERROR(nccl->EnqueueAllReduceMean(
          model->grads() + buckets[b].first, buckets[b].second, nullptr));
      XL_CUDA_CHECK(cudaEventRecord(bucket_end[b], nccl->stream()));
      return absl::OkStatus();
    };
    for (int m = 0; m < micro; ++m) {
      const int s = m % 2;
      if (m + 1 < micro) RETURN_IF_ERROR(copy_in(m + 1));
      XL_CUDA_CHECK(cudaStreamWaitEvent(res.compute, copied[s], 0));
      // Only the last micro-batch's layers start their buckets' all-reduce.
      RETURN_IF_ERROR(model->ForwardBackward(
          dx[s], dl[s], batch,
          m + 1 == micro ? std::function<absl::Status(int)>(on_layer) : nullptr,
          CudaMlp::MicroBatch{m, micro}));
      XL_CUDA_CHECK(cudaEventRecord(consumed[s], res.compute));
    }
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
    // The step is done, its copy with it: the host slot may be refilled.
    producer->Release(step);
    for (size_t b = 0; nccl && b < buckets.size(); ++b) {
      bucket_seconds[b] = ElapsedSeconds(bucket_start[b], bucket_end[b]);
    }
    const float loss = h_scalars[0];
    const bool stopping = h_scalars[1] > 0;
    last_loss = loss;

    // Data: the wait for the producer and the first micro-batch's copy. A
    // later micro-batch's copy overlaps compute; where it is slower than
    // the compute it hides behind, the wait counts as compute.
    interval.AddStep(
        Seconds(t0, t1) + ElapsedSeconds(ev_copy_start, ev_copy_done),
        ElapsedSeconds(ev_start, ev_bwd_done) +
            ElapsedSeconds(ev_ar_done, ev_step_done),
        ElapsedSeconds(ev_ar_start, ev_ar_done), Seconds(t0, t4),
        nccl ? bucket_seconds.data() : nullptr);
    if (step >= first_timed) ++timed_steps;
    const int64_t done = step + 1;

    if (ends.MetricsDue(done, stopping)) {
      sample_memory();
      v1::TrainMetrics m = interval.Finish(done, loss, peak_used);
      if (sink != nullptr) sink->Report(m);
    }
    RETURN_IF_ERROR(ends.Checkpoint(
        done, stopping, batch, [&](TrainState* s) -> absl::Status {
          s->params.resize(count);
          s->m.resize(count);
          s->v.resize(count);
          RETURN_IF_ERROR(model->GetParams(s->params.data()));
          return model->GetOptimizerState(s->m.data(), s->v.data(),
                                          &s->adam_t, &s->loss_scale,
                                          &s->good_steps);
        }));
    if (stopping) {
      if (options.base.final_params) {
        options.base.final_params->resize(count);
        RETURN_IF_ERROR(model->GetParams(options.base.final_params->data()));
      }
      return ends.Stopped(done);
    }
    RETURN_IF_ERROR(ends.CrashPoint(done));
  }
  const double timed_wall = Seconds(timed_start, absl::Now());
  sample_memory();
  if (options.base.final_params) {
    options.base.final_params->resize(count);
    RETURN_IF_ERROR(model->GetParams(options.base.final_params->data()));
  }
  const double sps =
      timed_steps > 0 && timed_wall > 0
          ? static_cast<double>(timed_steps) * world * step_batch / timed_wall
          : 0;
  const double mfu = ModelFlopsUtilization(count, sps / world, peak_tflops);
  if (options.stats != nullptr) {
    CudaRunStats& st = *options.stats;
    st.steps_run = config.steps - start;
    st.samples_per_second = sps;
    st.step_seconds = timed_steps > 0 ? timed_wall / timed_steps : 0;
    st.mfu = mfu;
    st.peak_tflops = peak_tflops;
    st.device_name = peak.name;
    st.peak_memory_bytes = peak_used;
    st.batch_per_rank = batch;
    st.last_loss = last_loss;
  }
  if (rank == 0) {
    std::printf(
        "xl-train: done, %lld steps on %s; %.0f samples/s, MFU %.1f%% of "
        "%.0f TFLOP/s dense %s per GPU (%s), peak GPU memory %.2f GiB\n",
        static_cast<long long>(config.steps), peak.name.c_str(), sps,
        100.0 * mfu, peak_tflops,
        v1::Precision_Name(model->precision()).c_str(),
        peak_tflops > 0 ? "table below" : "device not in the table",
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
