#include "server/store/sqlite_store.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/duration.h"
#include "common/limits.h"
#include "common/status.h"
#include "server/store/changes.h"
#include "server/store/migrator.h"

namespace xl::store {
namespace {

// Writes taken into one transaction at most; bounds the latency of the first.
constexpr size_t kMaxGroup = 4096;

int64_t ToUs(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000000 + t.nanos() / 1000;
}

}  // namespace

int64_t JobRowId(const std::string& id) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(id, &v)) return -1;
  return v;
}

// The writes of one transaction, through the writer's prepared statements.
class SqliteTx : public Tx {
 public:
  explicit SqliteTx(SqliteStore* store) : store_(store) {}
  absl::Status PutJob(const v1::Job& job) override;
  absl::Status PutRankExit(int64_t job_id, int32_t attempt,
                           const v1::RankExit& exit) override;
  absl::Status PutToken(int64_t job_id, const std::string& token) override;
  absl::Status AddEvent(const v1::JobEvent& event) override;
  absl::Status PutNode(const StoredNode& node) override;
  absl::Status PutHold(const StoredHold& hold) override;
  absl::Status DeleteHold(const std::string& node, int64_t job_id,
                          int32_t attempt) override;
  absl::Status AppendLog(v1::LogChunk* chunk) override;
  absl::Status AppendMetrics(const v1::TrainMetrics& metrics) override;
  absl::Status DeleteLogs(int64_t job_id) override;
  absl::StatusOr<Trimmed> TrimOutput(int64_t job_id, int64_t bytes) override;
  absl::Status DeleteJob(int64_t job_id) override;
  absl::Status PutQueue(const v1::Queue& queue) override;
  absl::Status DeleteQueue(const std::string& name) override;
  absl::Status AddQueueChange(const v1::QueueChange& change) override;
  absl::Status PutUsage(const StoredUsage& usage) override;
  absl::Status PutAuthToken(const StoredAuthToken& token) override;
  absl::Status SetAppliedIndex(uint64_t index) override;
  absl::Status Probe() override;

 private:
  SqliteStore* const store_;
};

absl::Status Store::WriteSync(WriteFn fn) {
  absl::Mutex mu;
  bool finished = false;
  absl::Status result;
  Write(std::move(fn), [&](absl::Status st) {
    absl::MutexLock lock(&mu);
    result = std::move(st);
    finished = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&finished));
  return result;
}

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& path, const StoreOptions& options) {
  DbOptions db_options;
  db_options.synchronous = options.synchronous;
  db_options.vfs = options.vfs;
  ASSIGN_OR_RETURN(auto db, Db::Open(path, db_options));
  RETURN_IF_ERROR(Migrate(db.get(), SchemaMigrations()));
  if (options.max_page_count > 0) {
    RETURN_IF_ERROR(db->Exec(
        absl::StrCat("PRAGMA max_page_count=", options.max_page_count)));
  }
  std::unique_ptr<Db> reader;
  if (path == ":memory:") {
    reader = nullptr;  // logs are read through the writer's connection
  } else {
    db_options.read_only = true;
    ASSIGN_OR_RETURN(reader, Db::Open(path, db_options));
  }
  std::unique_ptr<SqliteStore> store(
      new SqliteStore(std::move(db), std::move(reader)));
  RETURN_IF_ERROR(store->PrepareStatements());
  store->on_commit_ = options.on_commit;
  store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  store->completer_ = std::thread([s = store.get()] { s->CompletionLoop(); });
  return store;
}

SqliteStore::SqliteStore(std::unique_ptr<Db> db, std::unique_ptr<Db> reader)
    : db_(std::move(db)), reader_(std::move(reader)) {}

absl::Status SqliteStore::PrepareStatements() {
  ASSIGN_OR_RETURN(put_job_,
                   db_->Prepare("INSERT INTO jobs (id, idempotency_key, user, "
                                "queue, state, create_time_us, job) VALUES "
                                "(?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE "
                                "SET state = excluded.state, "
                                "job = excluded.job"));
  ASSIGN_OR_RETURN(add_event_,
                   db_->Prepare("INSERT OR REPLACE INTO job_events (job_id, "
                                "seq, time_us, from_state, to_state, attempt, "
                                "reason) VALUES (?,?,?,?,?,?,?)"));
  ASSIGN_OR_RETURN(put_node_,
                   db_->Prepare("INSERT OR REPLACE INTO nodes (name, "
                                "inventory, drained, state_reason, "
                                "register_time_us) VALUES (?,?,?,?,?)"));
  ASSIGN_OR_RETURN(append_metrics_,
                   db_->Prepare("INSERT INTO metrics (job_id, time_us, data) "
                                "VALUES (?,?,?)"));
  ASSIGN_OR_RETURN(note_job_id_,
                   db_->Prepare("INSERT INTO meta (key, value) VALUES "
                                "('last_job_id', ?) ON CONFLICT(key) DO "
                                "UPDATE SET value = max(value, "
                                "excluded.value)"));
  ASSIGN_OR_RETURN(put_rank_exit_,
                   db_->Prepare("INSERT OR REPLACE INTO rank_exits (job_id, "
                                "attempt, rank, exit) VALUES (?,?,?,?)"));
  ASSIGN_OR_RETURN(delete_rank_exits_,
                   db_->Prepare("DELETE FROM rank_exits WHERE job_id = ?"));
  ASSIGN_OR_RETURN(put_token_,
                   db_->Prepare("UPDATE jobs SET rendezvous_token = ? "
                                "WHERE id = ?"));
  ASSIGN_OR_RETURN(put_hold_,
                   db_->Prepare("INSERT OR REPLACE INTO holds (node, job_id, "
                                "attempt, allocation) VALUES (?,?,?,?)"));
  ASSIGN_OR_RETURN(delete_hold_,
                   db_->Prepare("DELETE FROM holds WHERE node = ? AND "
                                "job_id = ? AND attempt = ?"));
  ASSIGN_OR_RETURN(put_queue_,
                   db_->Prepare("INSERT OR REPLACE INTO queues (name, spec, "
                                "version, updated_us, updated_by) VALUES "
                                "(?,?,?,?,?)"));
  ASSIGN_OR_RETURN(delete_queue_,
                   db_->Prepare("DELETE FROM queues WHERE name = ?"));
  ASSIGN_OR_RETURN(add_queue_change_,
                   db_->Prepare("INSERT INTO queue_changes (time_us, queue, "
                                "by_user, action, spec, version, seq) VALUES "
                                "(?,?,?,?,?,?,?)"));
  ASSIGN_OR_RETURN(put_usage_,
                   db_->Prepare("INSERT OR REPLACE INTO usage (queue, user, "
                                "gpu_seconds, as_of_us) VALUES (?,?,?,?)"));
  ASSIGN_OR_RETURN(put_auth_token_,
                   db_->Prepare("INSERT OR REPLACE INTO tokens (id, kind, "
                                "user, admin, hash, created, expires, "
                                "revoked, used_by, groups) VALUES "
                                "(?,?,?,?,?,?,?,?,?,?)"));
  ASSIGN_OR_RETURN(delete_usage_,
                   db_->Prepare("DELETE FROM usage WHERE queue = ? AND "
                                "user = ?"));
  ASSIGN_OR_RETURN(set_applied_,
                   db_->Prepare("INSERT OR REPLACE INTO replica_applied (id, "
                                "log_index) VALUES (1, ?)"));
  ASSIGN_OR_RETURN(probe_, db_->Prepare("INSERT OR REPLACE INTO probe (id, "
                                        "time_us) VALUES (1, ?)"));
  ASSIGN_OR_RETURN(delete_logs_,
                   db_->Prepare("DELETE FROM logs WHERE job_id = ?"));
  ASSIGN_OR_RETURN(delete_metrics_,
                   db_->Prepare("DELETE FROM metrics WHERE job_id = ?"));
  ASSIGN_OR_RETURN(delete_events_,
                   db_->Prepare("DELETE FROM job_events WHERE job_id = ?"));
  ASSIGN_OR_RETURN(delete_job_holds_,
                   db_->Prepare("DELETE FROM holds WHERE job_id = ?"));
  ASSIGN_OR_RETURN(delete_job_, db_->Prepare("DELETE FROM jobs WHERE id = ?"));
  ASSIGN_OR_RETURN(savepoint_, db_->Prepare("SAVEPOINT w"));
  ASSIGN_OR_RETURN(release_, db_->Prepare("RELEASE w"));
  ASSIGN_OR_RETURN(rollback_to_, db_->Prepare("ROLLBACK TO w"));
  ASSIGN_OR_RETURN(append_log_,
                   db_->Prepare("INSERT INTO logs (job_id, attempt, rank, "
                                "stream, time_us, data, end_offset) "
                                "VALUES (?,?,?,?,?,?,?) ON CONFLICT(job_id, "
                                "attempt, rank, stream, end_offset) WHERE "
                                "end_offset IS NOT NULL DO NOTHING"));
  absl::MutexLock lock(&reader_mu_);
  Db* rdb = reader_ ? reader_.get() : db_.get();
  const char* kCols =
      "SELECT seq, job_id, attempt, rank, stream, time_us, data, end_offset "
      "FROM logs ";
  ASSIGN_OR_RETURN(read_logs_,
                   rdb->Prepare(absl::StrCat(kCols,
                                             "WHERE job_id = ? AND seq > ? "
                                             "ORDER BY seq LIMIT ?")));
  ASSIGN_OR_RETURN(read_metrics_,
                   rdb->Prepare("SELECT seq, data FROM metrics WHERE "
                                "job_id = ? AND seq > ? ORDER BY seq LIMIT ?"));
  ASSIGN_OR_RETURN(read_logs_rank_,
                   rdb->Prepare(absl::StrCat(kCols,
                                             "WHERE job_id = ? AND seq > ? "
                                             "AND rank = ? ORDER BY seq "
                                             "LIMIT ?")));
  return absl::OkStatus();
}

SqliteStore::~SqliteStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
  {
    absl::MutexLock lock(&done_mu_);
    writer_exited_ = true;
  }
  if (completer_.joinable()) completer_.join();
  // Statements must go before their connections.
  for (auto* s : {&put_job_, &note_job_id_, &put_rank_exit_,
                  &delete_rank_exits_, &put_token_, &add_event_, &put_node_,
                  &append_log_, &put_hold_, &delete_hold_, &append_metrics_,
                  &put_queue_, &delete_queue_, &add_queue_change_, &put_usage_, &put_auth_token_,
                  &delete_usage_, &set_applied_,
                  &probe_, &delete_logs_, &delete_job_, &delete_events_,
                  &delete_metrics_, &delete_job_holds_, &savepoint_, &release_,
                  &rollback_to_}) {
    s->reset();
  }
  absl::MutexLock lock(&reader_mu_);
  read_logs_.reset();
  read_logs_rank_.reset();
  read_metrics_.reset();
}

absl::Status SqliteTx::PutJob(const v1::Job& job) {
  Statement* s = store_->put_job_.get();
  int64_t id = JobRowId(job.id());
  if (id <= 0) return absl::InternalError(absl::StrCat("bad job id ", job.id()));
  s->BindInt(1, id);
  if (job.idempotency_key().empty()) {
    s->BindNull(2);
  } else {
    s->BindText(2, job.idempotency_key());
  }
  s->BindText(3, job.user());
  s->BindText(4, job.spec().queue());
  s->BindInt(5, job.state());
  s->BindInt(6, ToUs(job.create_time()));
  s->BindBlob(7, DeterministicBytes(job));
  return s->Run();
}

absl::Status SqliteTx::AddEvent(const v1::JobEvent& e) {
  Statement* s = store_->add_event_.get();
  s->BindInt(1, JobRowId(e.job_id()));
  s->BindInt(2, e.seq());
  s->BindInt(3, ToUs(e.time()));
  s->BindInt(4, e.from_state());
  s->BindInt(5, e.to_state());
  s->BindInt(6, e.attempt());
  s->BindText(7, e.reason());
  return s->Run();
}

absl::Status SqliteTx::PutNode(const StoredNode& n) {
  Statement* s = store_->put_node_.get();
  s->BindText(1, n.name);
  s->BindBlob(2, DeterministicBytes(n.inventory));
  s->BindInt(3, n.drained ? 1 : 0);
  s->BindText(4, n.state_reason);
  s->BindInt(5, absl::ToUnixMicros(n.register_time));
  return s->Run();
}

absl::Status SqliteTx::PutQueue(const v1::Queue& q) {
  Statement* s = store_->put_queue_.get();
  s->BindText(1, q.spec().name());
  s->BindBlob(2, DeterministicBytes(q.spec()));
  s->BindInt(3, q.version());
  s->BindInt(4, ToUs(q.update_time()));
  s->BindText(5, q.updated_by());
  return s->Run();
}

absl::Status SqliteTx::DeleteQueue(const std::string& name) {
  Statement* s = store_->delete_queue_.get();
  s->BindText(1, name);
  return s->Run();
}

absl::Status SqliteTx::AddQueueChange(const v1::QueueChange& c) {
  Statement* s = store_->add_queue_change_.get();
  s->BindInt(1, ToUs(c.time()));
  s->BindText(2, c.queue());
  s->BindText(3, c.by());
  s->BindText(4, c.action());
  s->BindBlob(5, DeterministicBytes(c.spec()));
  s->BindInt(6, c.version());
  s->BindInt(7, c.seq());
  return s->Run();
}

absl::Status SqliteTx::PutUsage(const StoredUsage& u) {
  if (u.gpu_seconds == 0) {
    Statement* d = store_->delete_usage_.get();
    d->BindText(1, u.queue);
    d->BindText(2, u.user);
    return d->Run();
  }
  Statement* s = store_->put_usage_.get();
  s->BindText(1, u.queue);
  s->BindText(2, u.user);
  s->BindDouble(3, u.gpu_seconds);
  s->BindInt(4, absl::ToUnixMicros(u.as_of));
  return s->Run();
}

absl::Status SqliteTx::PutAuthToken(const StoredAuthToken& t) {
  Statement* s = store_->put_auth_token_.get();
  s->BindText(1, t.id);
  s->BindText(2, t.kind);
  s->BindText(3, t.user);
  s->BindInt(4, t.admin ? 1 : 0);
  s->BindText(5, t.hash);
  s->BindInt(6, t.created);
  s->BindInt(7, t.expires);
  s->BindInt(8, t.revoked);
  s->BindText(9, t.used_by);
  s->BindText(10, t.groups);
  return s->Run();
}

absl::Status SqliteTx::SetAppliedIndex(uint64_t index) {
  Statement* s = store_->set_applied_.get();
  s->BindInt(1, static_cast<int64_t>(index));
  return s->Run();
}

absl::Status SqliteTx::AppendLog(v1::LogChunk* c) {
  Statement* s = store_->append_log_.get();
  s->BindInt(1, JobRowId(c->job_id()));
  s->BindInt(2, c->attempt());
  s->BindInt(3, c->rank());
  s->BindInt(4, c->stream());
  s->BindInt(5, ToUs(c->time()));
  s->BindBlob(6, c->data());
  if (c->end_offset() > 0) {
    s->BindInt(7, c->end_offset());
  } else {
    s->BindNull(7);
  }
  RETURN_IF_ERROR(s->Run());
  // A chunk sent again (same rank stream and end_offset) is kept once.
  c->set_seq(store_->db_->Changes() > 0 ? store_->db_->LastInsertRowId() : 0);
  return absl::OkStatus();
}

absl::Status SqliteTx::AppendMetrics(const v1::TrainMetrics& m) {
  Statement* s = store_->append_metrics_.get();
  s->BindInt(1, JobRowId(m.job_id()));
  s->BindInt(2, ToUs(m.time()));
  s->BindBlob(3, DeterministicBytes(m));
  return s->Run();
}

absl::Status SqliteTx::PutRankExit(int64_t job_id, int32_t attempt,
                                   const v1::RankExit& exit) {
  Statement* s = store_->put_rank_exit_.get();
  s->BindInt(1, job_id);
  s->BindInt(2, attempt);
  s->BindInt(3, exit.rank());
  s->BindBlob(4, DeterministicBytes(exit));
  return s->Run();
}


absl::Status SqliteTx::PutToken(int64_t job_id, const std::string& token) {
  Statement* s = store_->put_token_.get();
  s->BindText(1, token);
  s->BindInt(2, job_id);
  return s->Run();
}

absl::Status SqliteTx::PutHold(const StoredHold& h) {
  Statement* s = store_->put_hold_.get();
  s->BindText(1, h.allocation.node());
  s->BindInt(2, h.job_id);
  s->BindInt(3, h.attempt);
  s->BindBlob(4, DeterministicBytes(h.allocation));
  return s->Run();
}

absl::Status SqliteTx::DeleteHold(const std::string& node, int64_t job_id,
                                  int32_t attempt) {
  Statement* s = store_->delete_hold_.get();
  s->BindText(1, node);
  s->BindInt(2, job_id);
  s->BindInt(3, attempt);
  return s->Run();
}

absl::Status SqliteTx::DeleteLogs(int64_t job_id) {
  Statement* s = store_->delete_logs_.get();
  s->BindInt(1, job_id);
  return s->Run();
}

absl::StatusOr<Tx::Trimmed> SqliteTx::TrimOutput(int64_t job_id,
                                                 int64_t bytes) {
  Trimmed trimmed;
  // Oldest first, by seq: the rows to go are found by walking the job's
  // index, then deleted in one statement.
  for (const char* table : {"logs", "metrics"}) {
    const int64_t want = bytes - trimmed.log_bytes - trimmed.metrics_bytes;
    if (want <= 0) break;
    ASSIGN_OR_RETURN(auto scan,
                     store_->db_->Prepare(absl::StrCat(
                         "SELECT seq, length(data) FROM ", table,
                         " WHERE job_id = ? ORDER BY seq")));
    scan->BindInt(1, job_id);
    int64_t freed = 0, last = -1;
    const absl::Status scanned = scan->ForEachRow([&]() -> absl::Status {
      if (freed >= want) return absl::CancelledError("enough");  // stops
      last = scan->ColumnInt(0);
      freed += scan->ColumnInt(1) + kStoredRowOverheadBytes;
      return absl::OkStatus();
    });
    if (!scanned.ok() && !absl::IsCancelled(scanned)) return scanned;
    if (last < 0) continue;
    ASSIGN_OR_RETURN(auto del, store_->db_->Prepare(absl::StrCat(
                                   "DELETE FROM ", table,
                                   " WHERE job_id = ? AND seq <= ?")));
    del->BindInt(1, job_id);
    del->BindInt(2, last);
    RETURN_IF_ERROR(del->Run());
    (std::string(table) == "logs" ? trimmed.log_bytes
                                  : trimmed.metrics_bytes) = freed;
  }
  return trimmed;
}

absl::Status SqliteTx::DeleteJob(int64_t job_id) {
  // Its id stays given: Load takes the highest of the stored jobs' ids and
  // this note (a submit writes no note; its row says it).
  Statement* note = store_->note_job_id_.get();
  note->BindInt(1, job_id);
  RETURN_IF_ERROR(note->Run());
  for (Statement* s :
       {store_->delete_logs_.get(), store_->delete_metrics_.get(),
        store_->delete_rank_exits_.get(),
        store_->delete_events_.get(), store_->delete_job_holds_.get(),
        store_->delete_job_.get()}) {
    s->BindInt(1, job_id);
    RETURN_IF_ERROR(s->Run());
  }
  return absl::OkStatus();
}

absl::Status SqliteTx::Probe() {
  Statement* s = store_->probe_.get();
  s->BindInt(1, absl::ToUnixMicros(absl::Now()));
  return s->Run();
}

void SqliteStore::Write(WriteFn fn, DoneFn done) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(PendingWrite{std::move(fn), std::move(done), false});
}

int64_t SqliteStore::commits() const {
  absl::MutexLock lock(&mu_);
  return commits_;
}

bool SqliteStore::AllOk(const std::vector<absl::Status>& results) {
  for (const auto& st : results) {
    if (!st.ok()) return false;
  }
  return true;
}

namespace {

// A write that failed on its own (a constraint, a refused value) undoes only
// itself; anything else (a full disk, an I/O error) fails the transaction
// and the store.
bool OwnFailure(const absl::Status& st) {
  return absl::IsAlreadyExists(st) || absl::IsInvalidArgument(st) ||
         absl::IsFailedPrecondition(st) || absl::IsNotFound(st);
}

}  // namespace

absl::Status SqliteStore::RunBatch(Tx& tx, std::vector<PendingWrite>& batch,
                                   bool isolate,
                                   std::vector<absl::Status>* results) {
  RETURN_IF_ERROR(db_->Exec("BEGIN IMMEDIATE"));
  for (size_t i = 0; i < batch.size(); ++i) {
    absl::Status st = isolate ? savepoint_->Run() : absl::OkStatus();
    if (st.ok()) st = batch[i].fn(tx);
    (*results)[i] = st;
    if (st.ok()) {
      if (isolate) st = release_->Run();
      if (st.ok()) continue;
    }
    // SQLite may have ended the transaction itself (SQLITE_FULL, IOERR):
    // then every later statement would run, and commit, on its own. Stop.
    if (!OwnFailure(st) || !db_->InTransaction()) {
      if (db_->InTransaction()) (void)db_->Exec("ROLLBACK");
      return st;
    }
    if (!isolate) {
      (void)db_->Exec("ROLLBACK");
      return absl::OkStatus();  // the caller retries with isolation
    }
    (void)rollback_to_->Run();
    (void)release_->Run();
  }
  const auto commit_start = std::chrono::steady_clock::now();
  absl::Status commit = db_->Exec("COMMIT");
  if (!commit.ok() && db_->InTransaction()) (void)db_->Exec("ROLLBACK");
  if (commit.ok() && on_commit_) {
    on_commit_(batch.size(), absl::FromChrono(std::chrono::steady_clock::now() -
                                              commit_start));
  }
  return commit;
}

void SqliteStore::WriterLoop() {
  std::vector<PendingWrite> batch;
  std::vector<absl::Status> results;
  while (true) {
    batch.clear();
    absl::Status failed;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty() && stopping_) return;
      failed = failed_;
      // After a failure, probes go one at a time: the first that commits
      // lets the writes behind it run again.
      const size_t most = failed.ok() ? kMaxGroup : 1;
      while (!queue_.empty() && batch.size() < most) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    results.assign(batch.size(), absl::OkStatus());
    SqliteTx tx(this);
    absl::Status commit;
    if (!failed.ok() && !batch[0].probe) {
      // The store failed: nothing runs until a probe succeeds, so no write
      // queued after a lost one can commit state that builds on it.
      commit = failed;
    } else {
      // Fast path: the whole batch in one transaction, no savepoints. Should
      // a write fail on its own, the transaction is rolled back and the
      // batch run again with a savepoint around each write, so that one
      // failure undoes only itself.
      commit = RunBatch(tx, batch, /*isolate=*/false, &results);
      if (commit.ok() && !AllOk(results)) {
        commit = RunBatch(tx, batch, /*isolate=*/true, &results);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      ++commits_;
      if (!commit.ok()) {
        if (failed_.ok()) failed_ = commit;
      } else if (!failed.ok()) {
        failed_ = absl::OkStatus();  // a probe committed
      }
    }
    Completed c;
    c.done.reserve(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      c.done.push_back(std::move(batch[i].done));
      c.results.push_back(commit.ok() ? results[i] : commit);
    }
    absl::MutexLock lock(&done_mu_);
    completed_.push_back(std::move(c));
  }
}

void SqliteStore::Probe(DoneFn done) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(
      PendingWrite{[](Tx& tx) { return tx.Probe(); }, std::move(done), true});
}

void SqliteStore::CompletionLoop() {
  while (true) {
    Completed c;
    {
      absl::MutexLock lock(&done_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(done_mu_) {
        return !completed_.empty() || writer_exited_;
      };
      done_mu_.Await(absl::Condition(&ready));
      if (completed_.empty()) return;
      c = std::move(completed_.front());
      completed_.pop_front();
    }
    for (size_t i = 0; i < c.done.size(); ++i) {
      if (c.done[i]) c.done[i](c.results[i]);
    }
  }
}

absl::StatusOr<std::string> SqliteStore::Serialize() {
  absl::MutexLock lock(&reader_mu_);
  return reader_->Serialize();
}

absl::Status SqliteStore::ReplaceWith(absl::string_view image) {
  std::string path;
  {
    absl::MutexLock lock(&reader_mu_);
    if (reader_ == nullptr) {
      return absl::FailedPreconditionError("an in-memory store has no file");
    }
    path = reader_->path();
  }
  // A connection of its own, in one write transaction: the writer's and
  // the reader's see the new content on their next transaction.
  ASSIGN_OR_RETURN(auto db, Db::Open(path));
  return db->ReplaceWith(image);
}

}  // namespace xl::store
