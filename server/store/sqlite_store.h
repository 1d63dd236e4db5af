// SqliteStore: the Store in one SQLite file (WAL, synchronous=FULL) and the
// only code that speaks SQL about jobs and nodes.
//
// One writer thread runs every queued write inside one transaction, commits
// once, and hands the `done` callbacks to a completion thread, which runs
// them in queue order while the writer already runs the next transaction
// (LevelDB's write path). Many concurrent submits thus share one fsync. A
// failure other than a write's own (a full disk, an I/O error) is sticky, as
// LevelDB's background error: later writes fail without running until a
// Probe() commits. Reads
// of logs and metrics use a second connection. All methods are thread-safe.
#ifndef XL_SERVER_STORE_SQLITE_STORE_H_
#define XL_SERVER_STORE_SQLITE_STORE_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/store/sqlite.h"
#include "server/store/store.h"

namespace xl::store {

// The row id of a job id ("42" -> 42); -1 when it is not a number.
int64_t JobRowId(const std::string& id);

struct StoreOptions {
  // PRAGMA synchronous: FULL (the default) syncs the WAL at every commit, so
  // an acknowledged write survives power loss. Tests of that fence set OFF
  // to show the loss the fence prevents.
  std::string synchronous = "FULL";
  // The SQLite VFS to open the file with; empty: the default. Tests register
  // a VFS that loses unsynced writes on a simulated power cut.
  std::string vfs;
  // PRAGMA max_page_count on the writer's connection (0: SQLite's default):
  // tests fill it to see what a full disk does (SQLITE_FULL).
  int64_t max_page_count = 0;
  // Called on the writer thread after each committed transaction with the
  // writes it grouped and the time its COMMIT (the WAL's fsync) took; must
  // not block. Empty: none.
  std::function<void(size_t writes, absl::Duration commit)> on_commit;
};

class SqliteStore : public Store {
 public:
  // Opens or creates the database at `path` and migrates it to the newest
  // schema. Errors name the file and what to do.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(
      const std::string& path, const StoreOptions& options = {});
  // Commits what is queued, then stops the writer.
  ~SqliteStore() override;

  // Call before the first Write.
  absl::StatusOr<StoredState> Load() override;
  void Write(WriteFn fn, DoneFn done) override;
  void Probe(DoneFn done) override;
  absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(int64_t job_id,
                                                     int64_t after_seq,
                                                     int rank,
                                                     int limit) override;
  absl::StatusOr<std::vector<std::pair<int64_t, v1::TrainMetrics>>>
  ReadMetrics(int64_t job_id, int64_t after_seq, int limit) override;
  int64_t commits() const override;

  // The whole database as one consistent image, of every committed write
  // (a replicated store's snapshot).
  absl::StatusOr<std::string> Serialize();
  // Replaces the whole database with `image` (a Serialize() of another):
  // Load and every connection see it from then on. Not while writes are
  // in flight.
  absl::Status ReplaceWith(absl::string_view image);

 private:
  friend class SqliteTx;
  struct PendingWrite {
    WriteFn fn;
    DoneFn done;
    bool probe = false;
  };
  SqliteStore(std::unique_ptr<Db> db, std::unique_ptr<Db> reader);
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
  std::unique_ptr<Statement> put_job_, note_job_id_, put_rank_exit_,
      delete_rank_exits_, put_token_, add_event_, put_node_,
      append_log_, put_hold_, delete_hold_, append_metrics_, probe_,
      put_queue_, delete_queue_, add_queue_change_, put_usage_, put_auth_token_, delete_usage_,
      set_applied_;
  std::unique_ptr<Statement> delete_logs_, delete_job_, delete_events_,
      delete_metrics_, delete_job_holds_;
  std::unique_ptr<Statement> savepoint_, release_, rollback_to_;

  // StoreOptions::on_commit; set before the writer starts.
  std::function<void(size_t, absl::Duration)> on_commit_;

  absl::Mutex reader_mu_;
  std::unique_ptr<Db> reader_ ABSL_GUARDED_BY(reader_mu_);
  std::unique_ptr<Statement> read_logs_ ABSL_GUARDED_BY(reader_mu_);
  std::unique_ptr<Statement> read_logs_rank_ ABSL_GUARDED_BY(reader_mu_);
  std::unique_ptr<Statement> read_metrics_ ABSL_GUARDED_BY(reader_mu_);

  mutable absl::Mutex mu_;
  std::deque<PendingWrite> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The first failure of a write or commit; until a probe commits, every
  // write fails with it without running.
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
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
