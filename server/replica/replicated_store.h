// ReplicatedStore: the store of a scheduler replicated on Raft. A
// transaction's changes (store/changes.h) are one entry of the replicated
// log (RaftLog, encoded by store/change_codec.h); every replica, this one
// included, applies the committed entries to its own SQLite database in log
// order, and writes the entry's index in the same transaction, so that an
// entry raft hands it again after a restart is applied once. The database
// is synced by raft's log, not by SQLite (synchronous=NORMAL): what a crash
// takes from it, the log gives back.
//
// Writes are the leader's: WriteChanges answers once the entry is committed
// on a majority and applied here, with the write's own outcome (a write
// refused on its own is refused alike on every replica); on a follower it
// is refused FAILED_PRECONDITION naming the leader. Reads (Load, ReadLogs,
// ReadMetrics) are this replica's database: on a follower they may be
// behind the leader.
//
// On the leader, an entry it appended itself is applied from the caller's
// own batch, so that what a write gives back (AppendLog's seq, TrimOutput's
// trimmed) reaches the caller; every other replica decodes the bytes.
//
// Applying an entry queues its transaction on the local store, which
// commits what is queued together (a group commit, as a single scheduler
// does); the leader answers a write once raft has committed it and the
// local store has applied it, in log order.
//
// Snapshots are images of this replica's SQLite database (with the index
// of the last entry in it): raft keeps the log short, and a replica too far
// behind, or a new one, is given the leader's image.
//
// Thread-safe.
#ifndef XL_SERVER_REPLICA_REPLICATED_STORE_H_
#define XL_SERVER_REPLICA_REPLICATED_STORE_H_

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "server/replica/raft_log.h"
#include "server/store/changes.h"
#include "server/store/sqlite_store.h"

namespace xl::replica {

class ReplicatedStore : public store::Store {
 public:
  // Opens (or creates) this replica's database at `db_path` and starts its
  // log with `log` (whose `apply` is this store's).
  static absl::StatusOr<std::unique_ptr<ReplicatedStore>> Open(
      const std::string& db_path, RaftLog::Options log);
  ~ReplicatedStore() override;

  // Appends the batch to the replicated log; `done` runs once it is
  // committed and applied here (on the local store's completion thread,
  // or the log's: it must not wait for either), after the answers of the
  // writes applied before it. An error answer (not applied here: no
  // leader, leadership lost) comes at once, out of that order.
  void WriteChanges(std::shared_ptr<const store::ChangeBatch> batch,
                    DoneFn done) override;

  // store::Store. Write refuses: a function cannot be replicated, only
  // changes (WriteChanges).
  absl::StatusOr<store::StoredState> Load() override { return local_->Load(); }
  void Write(WriteFn fn, DoneFn done) override;
  // A barrier through the log: answered once every write made before it is
  // settled (so that a Reload after it sees them).
  void Probe(DoneFn done) override { Barrier(std::move(done)); }
  absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(int64_t job_id,
                                                     int64_t after_seq,
                                                     int rank,
                                                     int limit) override {
    return local_->ReadLogs(job_id, after_seq, rank, limit);
  }
  absl::StatusOr<std::vector<std::pair<int64_t, v1::TrainMetrics>>> ReadMetrics(
      int64_t job_id, int64_t after_seq, int limit) override {
    return local_->ReadMetrics(job_id, after_seq, limit);
  }
  int64_t commits() const override { return local_->commits(); }

  RaftLog::State log_state() const { return log_->state(); }

  // Appends an empty entry and runs done(status) once it is committed and
  // applied here: on a new leader, every entry of earlier terms is then in
  // this replica's database (Load gives the whole committed state).
  void Barrier(DoneFn done);

  // Waits up to `timeout` until every WriteChanges made so far has been
  // answered; false if some are still out.
  bool WaitAnswered(absl::Duration timeout);

 private:
  ReplicatedStore() = default;
  // RaftLog's apply, snapshot and restore, on its thread.
  absl::Status Apply(uint64_t index, absl::string_view entry,
                     absl::Status* outcome);
  absl::StatusOr<std::string> Snapshot();
  absl::Status Restore(absl::string_view state);

  // A write of this replica's own, not answered yet.
  struct Own {
    std::string entry;
    std::shared_ptr<const store::ChangeBatch> batch;
    DoneFn done;
    // Apply queued its transaction here (it is in order_).
    bool applied = false;
    bool raft_answered = false;
    absl::Status raft_status;
    bool local_done = false;
    absl::Status local_status;
  };
  // Answers, in log order, the own writes at the front of order_ that raft
  // and the local store have both answered. Any thread; one at a time.
  void Deliver();
  // Waits until the local store has committed every transaction queued.
  absl::Status Drain();

  std::unique_ptr<store::SqliteStore> local_;
  std::unique_ptr<RaftLog> log_;
  // The log's thread only.
  uint64_t applied_ = 0;
  mutable absl::Mutex mu_;
  // Entries' nonces.
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
  // Appended and not yet applied here, in the order appended (Append's
  // order: pushed under mu_ with it).
  std::list<std::shared_ptr<Own>> own_ ABSL_GUARDED_BY(mu_);
  // Applied here, in log order, not yet answered.
  std::deque<std::shared_ptr<Own>> order_ ABSL_GUARDED_BY(mu_);
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  int64_t unanswered_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace xl::replica

#endif  // XL_SERVER_REPLICA_REPLICATED_STORE_H_
