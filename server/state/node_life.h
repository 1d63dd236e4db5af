// A node's life as functions of the model: an agent registers and is
// reconciled with what its node holds, the ranks it reports are sorted by
// what the scheduler knows of them, a rank that is gone gives its share
// back, and the node is drained by people or by its own failures. Each
// changes the model (or, for the checks and the sorting, only reads it) and
// returns what the store must record; the control layer runs them under its
// lock, hands the changes to its one door for state changes
// (control/effects.h), and does the talking: replies, stops, logs.
//
// No lock, no store, no clock, no I/O: a unit test calls these on a Model
// (tests/server/node_life_test.cc). Thread-compatible.
#ifndef XL_SERVER_STATE_NODE_LIFE_H_
#define XL_SERVER_STATE_NODE_LIFE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/state/lifecycle.h"
#include "server/state/model.h"
#include "server/store/changes.h"
#include "xl/v1/agent.pb.h"

namespace xl::state {

// The node's row as the store keeps it: a drain or resume still being
// written is the latest word, so a row written meanwhile carries it.
store::StoredNode StoredNodeOf(const NodeRecord& node);

// What a Register did.
struct Registered {
  NodeRecord* node = nullptr;
  // The session it replaced (the same agent reconnecting): the caller
  // closes it, outside its lock.
  std::shared_ptr<AgentConnection> replaced;
  bool was_lost = false;
};

// Checks a Register before anything of it is taken, and gives the node's
// name (the inventory's hostname when it names none). Refused: a name that
// is empty, longer than 253 characters or unprintable; an agent version or
// instance id over 128 characters or unprintable; more than 64 GPUs; an
// inventory with control characters or a GPU index twice. Reads only the
// message: callers run it before taking their lock.
absl::StatusOr<std::string> CheckRegister(const v1::Register& reg);

// An agent registers node `name` (from CheckRegister of `reg`) over
// `conn`. Refused, changing nothing: a node whose session is alive (heard
// from within `heartbeat_timeout`) served by another agent process (another
// instance id). Otherwise the node takes the inventory, address (the
// inventory's, else the peer's), liveness and the agent's promises, is no
// longer lost, and its capacity in the ledger is the new inventory's.
absl::StatusOr<Registered> Register(Model* model, const std::string& name,
                                    const v1::Register& reg,
                                    std::shared_ptr<AgentConnection> conn,
                                    absl::Duration heartbeat_timeout, Now now);

// A rank of an attempt on a node: (job, attempt, rank).
struct RankRef {
  int64_t job = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  bool operator<(const RankRef& o) const {
    return std::tie(job, attempt, rank) < std::tie(o.job, o.attempt, o.rank);
  }
  bool operator==(const RankRef& o) const {
    return job == o.job && attempt == o.attempt && rank == o.rank;
  }
};

// Reconcile, first half (before the Register's statuses are handled): the
// live ranks `node` holds that its agent does not report. An exit the node
// reported before and that waits, parked, for its output (jobs in
// `parked_jobs`) counts as reported; one the agent no longer knows of (its
// state was wiped) has nothing running any more, and is marked so.
std::vector<RankRef> UnreportedRanks(Model* model, const NodeRecord& node,
                                     const v1::Register& reg,
                                     const std::set<int64_t>& parked_jobs);

// Reconcile, second half: of the unreported ranks, those of each current
// attempt (active, not stopping) that the agent never reported at all (the
// StartRanks never reached it: `undelivered`) and those it reported running
// before (they vanished: `vanished`). Ranks that exited are neither.
struct Unreported {
  std::map<int64_t, std::vector<int>> undelivered;
  std::map<int64_t, std::vector<int>> vanished;
};
Unreported SortUnreported(const Model& model,
                          const std::vector<RankRef>& missing);

// What a rank status from a node is, to the scheduler.
struct RankStatusKind {
  enum Kind {
    kOther,           // neither running nor over (starting): nothing to do
    kRunningUnknown,  // running, and no hold on the node accounts for it
    kRunningStale,    // running, of an attempt that is over (still held)
    kRunning,         // running, of the current attempt
    kExitNotHeld,     // over, and not held here (any more): its share is
                      // back already; a rank nobody knew of may be gone
    kExitHeld,        // over, and held here
  };
  Kind kind = kOther;
  // The rank's attempt is the job's current one (active, not stopping).
  bool current = false;
  // kExitHeld of a current attempt, and the rank's first exit: it counts.
  bool first_exit = false;
};
RankStatusKind KindOf(const Model& model, const NodeRecord& node,
                      const v1::RankStatus& st);

// Whether (job `rec`, `attempt`, `rank`) ran on `node`: its hold there
// lists the rank, or, once the hold is gone, the current attempt's
// allocation on the node does. What a node sends of a rank it never ran
// (output, metrics) is refused.
bool RankWasOnNode(const Model& model, const NodeRecord& node,
                   const JobRecord& rec, int32_t attempt, int32_t rank);

// Whether output the exit `st` says its rank wrote before exiting is not
// all stored yet (only for RANK_EXITED: a rank that never started wrote
// nothing).
bool OutputBehind(const JobRecord& rec, const v1::RankStatus& st);

// What the ledger did when a rank was gone, and what to record.
struct Released {
  // The rank was held on the node (false: nothing changed).
  bool found = false;
  // That was the hold's last live rank: its resources are free again.
  bool freed = false;
  // DeleteHold when freed, else PutHold with the ranks left.
  store::Changes changes;
};
Released ReleaseRank(Model* model, const std::string& node, int64_t job_id,
                     int32_t attempt, int rank);

// When a node drains itself: ranks of `jobs` different jobs failed to start
// on it for reasons of the node within `window`.
struct BadNodePolicy {
  int jobs = 3;  // 0: never
  absl::Duration window = absl::Hours(1);
};

// A rank of `job_id` failed on `node`; `node_fault` says the agent puts it
// down to the node. Counts it against the node (one count per job, in the
// window before `now_mono`) and drains the node once `policy.jobs`
// different jobs have failed there: true then, with the node's drain reason
// set (taken into the model at once: it only stops new work there) and the
// row to record in *changes. A node drained, or being drained, counts
// nothing.
bool CountNodeFailure(NodeRecord* node, int64_t job_id, bool node_fault,
                      const BadNodePolicy& policy, absl::Time now_mono,
                      store::Changes* changes);

// A person drains (or resumes: `drained` false) the node: the change is
// written first and the model takes it only once it is on disk
// (CommitDrain), so a failed write leaves the node as every reader saw it.
// `seq` orders drains and resumes still being written; the row to record.
store::Changes BeginDrain(NodeRecord* node, bool drained,
                          const std::string& reason, uint64_t seq);

// The drain or resume `seq` is on disk: the node takes it unless a later
// one is on its way (false then, nothing changed). Either forgets the
// node's failures (a drained node counts none; a resumed one starts anew).
bool CommitDrain(NodeRecord* node, uint64_t seq);

}  // namespace xl::state

#endif  // XL_SERVER_STATE_NODE_LIFE_H_
