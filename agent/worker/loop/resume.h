// The resume protocol of xl-train, one for the CPU and the GPU loop: rank 0
// finds and verifies the newest valid checkpoint (LoadNewestCheckpoint, which
// skips corrupt and truncated files), every rank learns rank 0's outcome, and
// rank 0's state is broadcast, so all ranks start from bitwise the same step
// and state, or all start fresh, or all fail. Free functions over a
// Collective, called on each rank's own thread in the same order on all ranks.
#ifndef XL_AGENT_WORKER_LOOP_RESUME_H_
#define XL_AGENT_WORKER_LOOP_RESUME_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/worker/comm/collective.h"
#include "agent/worker/loop/checkpoint.h"

namespace xl::worker {

// Lets every rank learn whether all got past a step that may fail on one
// rank alone (its own memory, its own GPU, rank 0's checkpoint directory),
// so that no rank waits out the collective timeout for a peer that gave up:
// one all-reduce of a failure flag (a mean of zeros is exactly 0 at any
// world size). Returns `own` on the rank that failed; FAILED_PRECONDITION
// "another rank failed <what> ...; <fix>" on the others; the collective's
// error when the all-reduce fails. `collective` null: a world of one.
absl::Status AgreeAllOk(Collective* collective, const absl::Status& own,
                        absl::string_view what, absl::string_view fix);

// Where a run starts, the same on every rank once AgreeResumePoint returns.
struct ResumePoint {
  bool found = false;  // false: start fresh at step 0
  // step, adam_t, loss_scale, good_steps and batch_per_rank on every rank;
  // params, m and v on rank 0 only, until ShareResumeState hands them out.
  TrainState state;
  std::string path;   // the file rank 0 loaded (rank 0 only)
  int64_t count = 0;  // parameters, as given to AgreeResumePoint
};

// Step one, before the model's memory is allocated (a resumed run keeps its
// batch_per_rank): rank 0 loads the newest valid checkpoint of `dir` (empty:
// none, start fresh) for `fingerprint` and `count` parameters and says where
// it resumes; then every rank agrees on the outcome (AgreeAllOk, an
// all-reduce, the first collective of a GPU run) and receives rank 0's
// scalars (a broadcast). Other ranks never read `dir`: rank 0 writes the
// checkpoints, so only its directory holds them. When rank 0 cannot read
// `dir`, rank 0 returns that error and its peers FAILED_PRECONDITION naming
// it. `collective` is not owned; null: a world of one (this is rank 0).
absl::StatusOr<ResumePoint> AgreeResumePoint(Collective* collective,
                                             const std::string& dir,
                                             uint64_t fingerprint,
                                             int64_t count);

// Step two, where the caller has room for the state: when point->found,
// fills *params, *m and *v (resized to point->count) with rank 0's
// checkpoint on every rank: moved out of point->state on rank 0, broadcast
// into the vectors' own memory on the others. Does nothing for a fresh
// start. Errors are the collective's.
absl::Status ShareResumeState(Collective* collective, ResumePoint* point,
                              std::vector<float>* params, std::vector<float>* m,
                              std::vector<float>* v);

}  // namespace xl::worker

#endif  // XL_AGENT_WORKER_LOOP_RESUME_H_
