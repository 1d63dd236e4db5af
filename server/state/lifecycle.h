// A job's life as functions of the model: start an attempt on its
// placement, end the job, end an attempt and requeue it. Each checks its
// transition first (a refused one changes nothing), changes the model, and
// returns what the store must record and which agents must be told. The
// control layer runs them under its lock and hands the result to its one
// door for state changes (control/effects.h), which records it before
// anything is sent; a failed write reloads the model from the store.
//
// No lock, no store, no clock, no I/O: a unit test calls these on a Model
// (tests/server/lifecycle_test.cc). Thread-compatible.
#ifndef XL_SERVER_STATE_LIFECYCLE_H_
#define XL_SERVER_STATE_LIFECYCLE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/scheduler/placement.h"
#include "server/state/agent_connection.h"
#include "server/state/model.h"
#include "server/store/changes.h"

namespace xl::state {

// The controller's clocks at the step: wall for what people read (event
// and start times), monotonic for what the scheduler waits on (fences).
struct Now {
  absl::Time wall;
  absl::Time mono;
};

// What one step did to a job, beyond the job itself.
struct Step {
  // The job's new events, in order (recorded with the job's row: see
  // JobChanges).
  std::vector<v1::JobEvent> events;
  // Further changes to record with them (the attempt's token and holds).
  store::Changes extra;
  // StopJob to every connected node of an attempt that ended; sent only
  // once the step is recorded.
  Sends stops;
  // Start: the holds it put (given back should the attempt end before its
  // start is recorded).
  std::vector<store::StoredHold> holds;
  // The attempt ended: its master port is free again and its rendezvous
  // scope is the caller's to close.
  bool attempt_closed = false;
  // EndAttempt: the job went back to PENDING (false: it had no retries
  // left and FAILED).
  bool requeued = false;
};

// The job's row (`job`, the snapshot the model keeps as committed) and its
// `events`: the first changes of every step.
store::Changes JobChanges(std::shared_ptr<const v1::Job> job,
                          std::vector<v1::JobEvent> events);

// StopJob for the job's current attempt to every node of it with an agent
// connected.
Sends StopMessages(const Model& model, const JobRecord& rec,
                   const std::string& why);

// A submit that passed its checks.
struct Submission {
  std::string user;
  std::string idempotency_key;
  v1::JobSpec spec;
  // The planner's sizing (left out when it sized nothing).
  v1::Plan plan;
  // The memory per node was derived, not asked for.
  bool memory_derived = false;
};

// The job the submit creates: the next id, PENDING as attempt 1, its
// first event; its idempotency key maps to it from now on (the caller has
// checked that the key is new). The record is not in the job table yet:
// the caller inserts it once it is recorded (JobChanges of its row and
// `events[0]`), so nothing acts on a job a crash would forget.
JobRecord Submitted(Model* model, Submission submission, Now now);

// Starts the job's next attempt on `placement`: its allocations (rank 0
// kept on the node it last ran on when that node is in the placement),
// holds in the ledger, a master port, `token`, SCHEDULED.
absl::StatusOr<Step> Start(Model* model, JobRecord* rec,
                           scheduler::Placement placement,
                           const std::string& token, Now now);

// Ends the job in the final state `to`; an attempt that was running is
// stopped (except on success: its ranks are exiting) and closed.
absl::StatusOr<Step> End(Model* model, JobRecord* rec, v1::JobState to,
                         const std::string& reason, Now now);

// Why and how an attempt ends when the job is to run again.
struct Requeue {
  std::string why;
  // A retry is spent (false: the job was not at fault: a lost start, a
  // preemption, a resize).
  bool spend_retry = true;
  // The next attempt starts no sooner than this (a lost node's lease).
  absl::Duration fence = absl::ZeroDuration();
  // The attempt ends PREEMPTED (an event of its own) first.
  bool preempted = false;
};

// Ends the current attempt and requeues the job as the next one, or, when
// it spends a retry it does not have, ends it FAILED.
absl::StatusOr<Step> EndAttempt(Model* model, JobRecord* rec,
                                const Requeue& requeue, Now now);

// Whether the rank status says the rank is over (exited, or never started).
bool IsExit(const v1::RankStatus& st);

// A rank of the current attempt reports running: its status is kept (an
// exit already counted stays counted), and once every rank of a SCHEDULED
// job runs, the job is RUNNING (the step's one event; none before).
absl::StatusOr<Step> RankRunning(Model* model, JobRecord* rec,
                                 const v1::RankStatus& st, Now now);

// What one rank's first exit means for its job.
struct ExitOutcome {
  enum Kind {
    kRankDone,      // exited 0, others still run: record the exit alone
    kJobSucceeded,  // the last rank exited 0: the job SUCCEEDED
    kRequeue,       // stopped by its agent, not the job's doing: requeue
                    // without spending a retry
    kFailed,        // the attempt failed: requeue spending a retry
  };
  Kind kind = kRankDone;
  // kJobSucceeded, kRequeue, kFailed: the job's reason.
  std::string why;
  // The exit as recorded in the job (rank_exits).
  v1::RankExit exit;
  // kFailed: the agent puts the failure down to the node (a start that
  // failed for the node's reasons), which counts against the node.
  bool node_fault = false;
};

// Counts the first exit `st` of a rank of the current attempt, reported
// from `node`: the rank's status, the job's rank_exits and exit code, the
// ranks that succeeded. The caller acts on the outcome (End, EndAttempt).
ExitOutcome CountExit(JobRecord* rec, const std::string& node,
                      const v1::RankStatus& st);

}  // namespace xl::state

#endif  // XL_SERVER_STATE_LIFECYCLE_H_
