// Store: the scheduler's durable state behind one interface, so the control
// layer never speaks SQL and tests can put a fault-injecting store in front
// of the real one (FaultyStore).
//
// Writes are grouped: Write() queues a function; the store runs queued
// functions inside one transaction, commits once, and only then calls each
// function's `done`, in queue order. A write that fails on its own (a
// constraint) undoes only itself; any other failure fails its whole group
// and every write after it until a Probe() commits. Effects of a write (messages
// to agents, answers to callers, notifications) belong in `done`, and only
// when its status is OK. All methods are thread-safe.
#ifndef XL_SERVER_STORE_STORE_H_
#define XL_SERVER_STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "xl/v1/job.pb.h"
#include "xl/v1/node.pb.h"
#include "xl/v1/queue.pb.h"

namespace xl::store {

struct StoredNode {
  std::string name;
  v1::NodeInventory inventory;
  bool drained = false;
  std::string state_reason;
  absl::Time register_time;
};

// Resources an attempt of a job holds on a node until its ranks there have
// exited: allocation.ranks are the ranks not yet known to be gone.
struct StoredHold {
  int64_t job_id = 0;
  int32_t attempt = 0;
  v1::Allocation allocation;
};

// Decayed GPU-seconds of a queue (user empty) or of a user in a queue.
struct StoredUsage {
  std::string queue;
  std::string user;
  double gpu_seconds = 0;
  absl::Time as_of;
};

// A row of the tokens table (server/auth/token_store.h) as stored: times in
// Unix seconds, 0 for none; groups comma-separated.
struct StoredAuthToken {
  std::string id;
  std::string kind;
  std::string user;
  bool admin = false;
  std::string hash;
  int64_t created = 0;
  int64_t expires = 0;
  int64_t revoked = 0;
  std::string used_by;
  std::string groups;
};

struct StoredState {
  std::vector<v1::Job> jobs;          // in id order
  std::vector<v1::JobEvent> events;   // in (job, seq) order
  std::vector<StoredNode> nodes;
  std::vector<StoredHold> holds;
  // Job id -> XL_RENDEZVOUS_TOKEN of its current attempt.
  std::map<int64_t, std::string> tokens;
  // Job id -> bytes of stored output (for retention by size).
  std::map<int64_t, int64_t> log_bytes;
  // job id -> bytes of its stored metrics points.
  std::map<int64_t, int64_t> metrics_bytes;
  // Jobs scheduled or running: how far each rank's output of each attempt
  // is stored, (job id, attempt, rank, stream) -> highest end_offset.
  std::map<std::tuple<int64_t, int32_t, int32_t, int32_t>, int64_t> log_ends;
  // The highest job id ever given (jobs may have been deleted since): the
  // highest stored, or deleted.
  int64_t last_job_id = 0;
  // Defined queues (spec, version, update_time, updated_by), by name.
  std::vector<v1::Queue> queues;
  // The latest changes to queues, oldest first (at most kLoadedQueueChanges).
  std::vector<v1::QueueChange> queue_changes;
  std::vector<StoredUsage> usage;
  // A replica: the last entry of the replicated log applied here (0: none).
  uint64_t applied_index = 0;
};

inline constexpr int kLoadedQueueChanges = 1000;

// The writes of one transaction; valid only inside a Write() function.
class Tx {
 public:
  virtual ~Tx() = default;
  // Inserts or replaces the job (its id is the row id).
  virtual absl::Status PutJob(const v1::Job& job) = 0;
  // Records how a rank of an attempt ended (Load merges it into the job's
  // rank_exits when that attempt is the job's current one).
  virtual absl::Status PutRankExit(int64_t job_id, int32_t attempt,
                                   const v1::RankExit& exit) = 0;
  // Sets the rendezvous token of the job's current attempt (a secret: kept
  // out of the Job message, which users read).
  virtual absl::Status PutToken(int64_t job_id, const std::string& token) = 0;
  virtual absl::Status AddEvent(const v1::JobEvent& event) = 0;
  virtual absl::Status PutNode(const StoredNode& node) = 0;
  // Inserts or replaces the hold of (node, job, attempt).
  virtual absl::Status PutHold(const StoredHold& hold) = 0;
  virtual absl::Status DeleteHold(const std::string& node, int64_t job_id,
                                  int32_t attempt) = 0;
  // Appends the chunk and sets its seq; a chunk whose (job, attempt, rank,
  // stream, end_offset > 0) is already stored is skipped and gets seq 0.
  virtual absl::Status AppendLog(v1::LogChunk* chunk) = 0;
  virtual absl::Status AppendMetrics(const v1::TrainMetrics& metrics) = 0;
  // Retention: removes a job's output, or the job with everything it has.
  virtual absl::Status DeleteLogs(int64_t job_id) = 0;
  // A job over its output budget: deletes its oldest log chunks, then (if
  // that is not enough) its oldest metrics points, until at least `bytes`
  // of their data are gone; says how many of each went.
  struct Trimmed {
    int64_t log_bytes = 0;
    int64_t metrics_bytes = 0;
  };
  virtual absl::StatusOr<Trimmed> TrimOutput(int64_t job_id,
                                             int64_t bytes) = 0;
  // Deletes the job with everything it has; its id stays given (Load's
  // last_job_id).
  virtual absl::Status DeleteJob(int64_t job_id) = 0;
  // Inserts or replaces a queue (its spec and version), or deletes one.
  virtual absl::Status PutQueue(const v1::Queue& queue) = 0;
  virtual absl::Status DeleteQueue(const std::string& name) = 0;
  // Records a change to a queue (its seq given by the caller).
  virtual absl::Status AddQueueChange(const v1::QueueChange& change) = 0;
  // Inserts or replaces a usage row; gpu_seconds 0 deletes it.
  virtual absl::Status PutUsage(const StoredUsage& usage) = 0;
  // Inserts or replaces a user or join token's row (replicated schedulers
  // write tokens through the log; a single one writes them itself).
  virtual absl::Status PutAuthToken(const StoredAuthToken& token) = 0;
  // A replica: the replicated log's entry `index` is applied (with the
  // transaction's other writes). Not a change of the scheduler's state.
  virtual absl::Status SetAppliedIndex(uint64_t index) = 0;
  // A small write that touches the disk: tells whether writes work again.
  virtual absl::Status Probe() = 0;
};

// The changes of one transaction (changes.h).
struct ChangeBatch;

class Store {
 public:
  using WriteFn = std::function<absl::Status(Tx&)>;
  using DoneFn = std::function<void(absl::Status)>;

  virtual ~Store() = default;

  // Reads everything the scheduler rebuilds its state from.
  virtual absl::StatusOr<StoredState> Load() = 0;

  // Queues `fn` for the next group transaction; `done` runs after the commit
  // (or with the error), in queue order, on the store's completion thread.
  // `done` may be empty.
  virtual void Write(WriteFn fn, DoneFn done) = 0;
  // Write() and wait for the commit.
  absl::Status WriteSync(WriteFn fn);

  // Queues one transaction's changes as Write() does (this default writes
  // them through Write()). A replicated store replicates the list: a
  // function cannot be replicated, so the control layer writes lists.
  virtual void WriteChanges(std::shared_ptr<const ChangeBatch> batch,
                            DoneFn done);

  // After a failure other than a write's own (a full disk, an I/O error),
  // every later write fails without running until a probe commits; this
  // queues one (Tx::Probe in its own transaction).
  virtual void Probe(DoneFn done) = 0;

  // Log chunks of a job with seq > after_seq, of one rank (or all when
  // rank < 0), at most `limit`, in seq order.
  virtual absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(
      int64_t job_id, int64_t after_seq, int rank, int limit) = 0;

  // A job's stored metrics with seq > after_seq, oldest first, at most
  // `limit`, each with its seq.
  virtual absl::StatusOr<std::vector<std::pair<int64_t, v1::TrainMetrics>>>
  ReadMetrics(int64_t job_id, int64_t after_seq, int limit) = 0;

  // Transactions committed so far (for benchmarks and tests).
  virtual int64_t commits() const = 0;
};

}  // namespace xl::store

#endif  // XL_SERVER_STORE_STORE_H_
