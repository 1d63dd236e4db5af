// Store: the scheduler's durable state in one SQLite file (WAL,
// synchronous=FULL) and the only code that speaks SQL about jobs and nodes.
//
// Writes are grouped: Write() queues a function; one writer thread runs every
// queued function inside one transaction (each in its own savepoint, so one
// failing write does not undo the others), commits once, and only then calls
// each function's `done`. Many concurrent submits thus share one fsync.
// Reads of logs use a second connection. All methods are thread-safe.
#ifndef XL_SERVER_STORE_SQLITE_STORE_H_
#define XL_SERVER_STORE_SQLITE_STORE_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/sqlite.h"
#include "xl/v1/job.pb.h"
#include "xl/v1/node.pb.h"

namespace xl::store {

struct StoredNode {
  std::string name;
  v1::NodeInventory inventory;
  bool drained = false;
  std::string state_reason;
  absl::Time register_time;
};

struct StoredState {
  std::vector<v1::Job> jobs;          // in id order
  std::vector<v1::JobEvent> events;   // in (job, seq) order
  std::vector<StoredNode> nodes;
};

// The writes of one transaction; valid only inside a Write() function.
class Tx {
 public:
  // Inserts or replaces the job (its id is the row id).
  absl::Status PutJob(const v1::Job& job);
  absl::Status AddEvent(const v1::JobEvent& event);
  absl::Status PutNode(const StoredNode& node);
  // Appends the chunk and sets its seq; a chunk whose (job, attempt, rank,
  // stream, end_offset > 0) is already stored is skipped and gets seq 0.
  absl::Status AppendLog(v1::LogChunk* chunk);
  absl::Status AppendMetrics(const v1::TrainMetrics& metrics);

 private:
  friend class Store;
  explicit Tx(class Store* store) : store_(store) {}
  class Store* store_;
};

class Store {
 public:
  using WriteFn = std::function<absl::Status(Tx&)>;
  using DoneFn = std::function<void(absl::Status)>;

  // Opens or creates the database at `path` and migrates it to the newest
  // schema. Errors name the file and what to do.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  // Commits what is queued, then stops the writer.
  ~Store();

  // Reads everything the scheduler rebuilds its state from. Call before the
  // first Write.
  absl::StatusOr<StoredState> Load();

  // Queues `fn` for the next group transaction; `done` runs on the writer
  // completion thread after the commit (or with the error), in queue order,
  // while the writer already runs the next transaction. `done` may be empty.
  void Write(WriteFn fn, DoneFn done);
  // Write() and wait for the commit.
  absl::Status WriteSync(WriteFn fn);

  // Log chunks of a job with seq > after_seq, of one rank (or all when
  // rank < 0), at most `limit`, in seq order.
  absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(int64_t job_id,
                                                     int64_t after_seq,
                                                     int rank, int limit);

  // A job's stored metrics, oldest first.
  absl::StatusOr<std::vector<v1::TrainMetrics>> ReadMetrics(int64_t job_id);

  // Transactions committed so far (for benchmarks and tests).
  int64_t commits() const;

 private:
  friend class Tx;
  struct PendingWrite {
    WriteFn fn;
    DoneFn done;
  };
  explicit Store(std::unique_ptr<Db> db, std::unique_ptr<Db> reader);
  absl::Status PrepareStatements();
  void WriterLoop();
  // Runs `batch` in one transaction and commits; with `isolate`, each write
  // in its own savepoint. Without it, stops at the first failed write and
  // rolls back (results then name it).
  absl::Status RunBatch(Tx& tx, std::vector<PendingWrite>& batch, bool isolate,
                        std::vector<absl::Status>* results);
  static bool AllOk(const std::vector<absl::Status>& results);
  void CompletionLoop();

  std::unique_ptr<Db> db_;  // used by the writer thread only (and Load)
  std::unique_ptr<Statement> put_job_, add_event_, put_node_, append_log_;
  std::unique_ptr<Statement> savepoint_, release_, rollback_to_;
  std::unique_ptr<Statement> append_metrics_;

  absl::Mutex reader_mu_;
  std::unique_ptr<Db> reader_ ABSL_GUARDED_BY(reader_mu_);
  std::unique_ptr<Statement> read_logs_ ABSL_GUARDED_BY(reader_mu_);
  std::unique_ptr<Statement> read_logs_rank_ ABSL_GUARDED_BY(reader_mu_);
  std::unique_ptr<Statement> read_metrics_ ABSL_GUARDED_BY(reader_mu_);

  mutable absl::Mutex mu_;
  std::deque<PendingWrite> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;

  // Committed batches whose `done` callbacks have yet to run.
  struct Completed {
    std::vector<DoneFn> done;
    std::vector<absl::Status> results;
  };
  absl::Mutex done_mu_;
  std::deque<Completed> completed_ ABSL_GUARDED_BY(done_mu_);
  bool writer_exited_ ABSL_GUARDED_BY(done_mu_) = false;
  std::thread completer_;
};

}  // namespace xl::store

#endif  // XL_SERVER_STORE_SQLITE_STORE_H_
