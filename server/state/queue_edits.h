// Queue edits as functions of the model: a create, update or delete made
// (its change number, the version it gives, what to record) and, once
// recorded, taken into the model; and what a queue still has in it. The
// control layer checks the caller's versions, orders edits to one queue,
// and hands the changes to its one door for state changes
// (control/effects.h).
//
// No lock, no store, no clock, no I/O: a unit test calls these on a Model
// (tests/server/queue_edits_test.cc). Thread-compatible.
#ifndef XL_SERVER_STATE_QUEUE_EDITS_H_
#define XL_SERVER_STATE_QUEUE_EDITS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "server/state/model.h"
#include "server/store/changes.h"
#include "xl/v1/queue.pb.h"

namespace xl::state {

// An edit made but not yet in the model.
struct QueueEdit {
  std::string name;
  bool remove = false;
  // The queue as written: its version is the change's number.
  v1::Queue queue;
  // The entry in the queue's history.
  v1::QueueChange change;
  // To record: the queue's row (or its deletion), the usage a deleted
  // queue forgets, and the history entry.
  store::Changes changes;
};

// Makes `action` ("create", "update" or "delete") of `queue` by `by` at
// `now`: the next change number, which is also the queue's new version (a
// queue's version only goes up, also across a delete and a create of the
// same name). A deleted queue's usage is forgotten, so a queue made again
// under its name starts with none. Only the change counter of the model
// moves; CommitQueueEdit takes the rest once it is recorded.
QueueEdit EditQueue(Model* model, const std::string& by,
                    const std::string& action, v1::Queue queue, absl::Time now);

// The recorded edit into the model: the queue (or its absence), its usage,
// and its history (the latest store::kLoadedQueueChanges entries).
void CommitQueueEdit(Model* model, const QueueEdit& edit);

// Jobs of the queue: pending, and active (scheduled or running).
struct QueueJobs {
  int64_t pending = 0;
  int64_t active = 0;
};
QueueJobs JobsInQueue(const Model& model, const std::string& name);

}  // namespace xl::state

#endif  // XL_SERVER_STATE_QUEUE_EDITS_H_
