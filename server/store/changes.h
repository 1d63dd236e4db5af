// Changes: the closed set of durable changes the scheduler makes, as data.
//
// The control layer says what changes (a job stored, an event added, a hold
// put or deleted, ...) as a list of these values; one function, Write(),
// turns a list into one transaction's calls on Tx. A list is therefore the
// unit the store commits, and the unit a replicated log would carry: it holds
// no code, only what is to be written. Two changes give something back to
// the writer (AppendLog its seq, TrimOutput what it removed); they say so in
// an out field that only the writer reads.
#ifndef XL_SERVER_STORE_CHANGES_H_
#define XL_SERVER_STORE_CHANGES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"
#include "server/store/store.h"
#include "xl/v1/job.pb.h"
#include "xl/v1/node.pb.h"
#include "xl/v1/queue.pb.h"

namespace xl::store {

namespace change {

// Inserts or replaces the job (shared: the model keeps the same snapshot as
// the job's committed state).
struct PutJob {
  std::shared_ptr<const v1::Job> job;
};
struct AddEvent {
  v1::JobEvent event;
};
struct PutRankExit {
  int64_t job_id = 0;
  int32_t attempt = 0;
  v1::RankExit exit;
};
struct PutToken {
  int64_t job_id = 0;
  std::string token;
};
struct PutNode {
  StoredNode node;
};
struct PutHold {
  StoredHold hold;
};
struct DeleteHold {
  std::string node;
  int64_t job_id = 0;
  int32_t attempt = 0;
};
// `chunk->seq` is set by the write (0: already stored).
struct AppendLog {
  std::shared_ptr<v1::LogChunk> chunk;
};
struct AppendMetrics {
  std::shared_ptr<const v1::TrainMetrics> point;
};
// Removes at least `bytes` of the job's oldest output; `*trimmed` says what
// went (set by the write).
struct TrimOutput {
  int64_t job_id = 0;
  int64_t bytes = 0;
  std::shared_ptr<Tx::Trimmed> trimmed;
};
struct DeleteLogs {
  int64_t job_id = 0;
};
struct DeleteJob {
  int64_t job_id = 0;
};
struct PutQueue {
  v1::Queue queue;
};
struct DeleteQueue {
  std::string name;
};
struct AddQueueChange {
  v1::QueueChange change;
};
// gpu_seconds 0 deletes the row.
struct PutUsage {
  StoredUsage usage;
};
struct PutAuthToken {
  StoredAuthToken token;
};

}  // namespace change

using Change =
    std::variant<change::PutJob, change::AddEvent,
                 change::PutRankExit, change::PutToken, change::PutNode,
                 change::PutHold, change::DeleteHold, change::AppendLog,
                 change::AppendMetrics, change::TrimOutput, change::DeleteLogs,
                 change::DeleteJob, change::PutQueue, change::DeleteQueue,
                 change::AddQueueChange, change::PutUsage,
                 change::PutAuthToken>;
using Changes = std::vector<Change>;

// What Store::WriteChanges takes: one transaction's changes.
struct ChangeBatch {
  Changes changes;
};

// `m` serialized with maps in key order: the same message gives the same
// bytes in every process (rows and log entries that replicas compare).
std::string DeterministicBytes(const google::protobuf::MessageLite& m);

// Makes the changes in order inside `tx`; stops at the first error.
absl::Status WriteChanges(const Changes& changes, Tx& tx);

}  // namespace xl::store

#endif  // XL_SERVER_STORE_CHANGES_H_
