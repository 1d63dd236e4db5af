#include "agent/worker/loop/step_end.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xl::worker {

StepEnd::StepEnd(const TrainConfig& config, Options options)
    : steps_(config.steps),
      metrics_every_(config.metrics_every),
      checkpoint_every_(config.checkpoint_every),
      options_(std::move(options)),
      writer_(PeriodicCheckpoints(options_.checkpoint_dir, options_.fingerprint,
                                  options_.keep_checkpoints)) {}

bool StepEnd::MetricsDue(int64_t done, bool stopping) const {
  return options_.rank == 0 &&
         ((metrics_every_ > 0 && done % metrics_every_ == 0) ||
          done == steps_ || stopping);
}

absl::Status StepEnd::Checkpoint(
    int64_t done, bool stopping, int32_t batch_per_rank,
    const std::function<absl::Status(TrainState*)>& fill) {
  const bool periodic = checkpoint_every_ > 0 && done % checkpoint_every_ == 0;
  if (options_.rank != 0 || options_.checkpoint_dir.empty() ||
      !(periodic || stopping)) {
    return absl::OkStatus();
  }
  // One write at a time: a disk that does not keep up slows the loop.
  (void)writer_.Wait();  // Its failure was said when it happened.
  TrainState state;
  state.step = done;
  state.batch_per_rank = batch_per_rank;
  RETURN_IF_ERROR(fill(&state));
  if (!stopping) {
    writer_.Submit(std::move(state));
    return absl::OkStatus();
  }
  absl::Status st =
      WriteCheckpoint(options_.checkpoint_dir, state, options_.fingerprint,
                      options_.keep_checkpoints);
  if (!st.ok()) return Annotate(st, "final checkpoint");
  return absl::OkStatus();
}

absl::Status StepEnd::Stopped(int64_t done) const {
  return absl::CancelledError(absl::StrCat(
      "stopped by SIGTERM after step ", done,
      options_.checkpoint_dir.empty()
          ? " (no checkpoint dir, nothing saved)"
          : absl::StrCat("; checkpoint ",
                         CheckpointPath(options_.checkpoint_dir, done))));
}

absl::Status StepEnd::CrashPoint(int64_t done) const {
  if (options_.crash_after_steps > 0 && done == options_.crash_after_steps) {
    return absl::AbortedError(
        absl::StrCat("simulated crash after step ", done));
  }
  return absl::OkStatus();
}

}  // namespace xl::worker
