// What a training loop does once a step has ended, the same for the CPU
// loop (loop/trainer.cc) and the CUDA loop (cuda/cuda_trainer.cc): rank 0
// reports metrics every `metrics_every` steps, at the last step and at a
// stop; rank 0 checkpoints every `checkpoint_every` steps off the loop (one
// write at a time: a disk that does not keep up slows the loop) and, at a
// stop, writes a final checkpoint itself (its failure is the run's); a stop
// ends the run CANCELLED naming the checkpoint; a simulated crash
// (--crash-after-steps) ends it ABORTED.
//
// The loop keeps what differs: how it reads its state (host vectors, or a
// copy from the GPU) and what its metrics carry. Thread-compatible.
#ifndef XL_AGENT_WORKER_LOOP_STEP_END_H_
#define XL_AGENT_WORKER_LOOP_STEP_END_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "agent/worker/loop/checkpoint.h"
#include "agent/worker/loop/train_config.h"

namespace xl::worker {

class StepEnd {
 public:
  struct Options {
    int rank = 0;
    // Where checkpoints go ("" for none).
    std::string checkpoint_dir;
    uint64_t fingerprint = 0;
    int keep_checkpoints = 3;
    // Ends the run ABORTED after this step (0: never).
    int64_t crash_after_steps = 0;
  };
  StepEnd(const TrainConfig& config, Options options);
  StepEnd(const StepEnd&) = delete;
  StepEnd& operator=(const StepEnd&) = delete;

  // Whether this rank reports metrics after step `done`.
  bool MetricsDue(int64_t done, bool stopping) const;

  // Rank 0 checkpoints after step `done` when a periodic one is due or the
  // run is stopping; `fill` gives the training state (step and
  // batch_per_rank are set here) and is called only then. A periodic
  // checkpoint is handed to the writer; a stop's is written before this
  // returns, and its failure is returned.
  absl::Status Checkpoint(int64_t done, bool stopping, int32_t batch_per_rank,
                          const std::function<absl::Status(TrainState*)>& fill);

  // The status a run stopped after step `done` ends with.
  absl::Status Stopped(int64_t done) const;

  // ABORTED when the run is to crash after step `done`; OK otherwise.
  absl::Status CrashPoint(int64_t done) const;

  // Waits for the periodic write in flight (the destructor does too).
  absl::Status Wait() { return writer_.Wait(); }

 private:
  const int64_t steps_;
  const int64_t metrics_every_;
  const int64_t checkpoint_every_;
  const Options options_;
  CheckpointWriter writer_;
};

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_LOOP_STEP_END_H_
