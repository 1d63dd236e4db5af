// The SQLite store: migrations from empty and from each older version,
// durability across reopen, group commit and per-write rollback.
#include "common/limits.h"
#include "server/store/sqlite_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/store/changes.h"
#include "server/store/db_lock.h"
#include "server/store/migrator.h"

namespace xl::store {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "xl-store-XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

v1::Job MakeJob(int id, const std::string& key = "") {
  v1::Job job;
  job.set_id(absl::StrCat(id));
  job.set_user("alice");
  job.set_state(v1::PENDING);
  job.set_idempotency_key(key);
  job.mutable_spec()->set_queue("default");
  job.mutable_spec()->add_command("/bin/true");
  return job;
}

TEST(MigratorTest, FromEmptyToNewest) {
  TempDir dir;
  auto db = Db::Open(dir.File("a.db"));
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(Migrate(db->get(), SchemaMigrations()).ok());
  EXPECT_EQ(*SchemaVersion(db->get()), SchemaMigrations().back().version);
  // Every table of every migration is there.
  for (const char* table : {"jobs", "job_events", "nodes", "logs", "metrics"}) {
    auto s = (*db)->Prepare(
        absl::StrCat("SELECT count(*) FROM sqlite_master WHERE name='", table, "'"));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(*(*s)->Step());
    EXPECT_EQ((*s)->ColumnInt(0), 1) << table;
  }
}

TEST(MigratorTest, FromEachOlderVersionKeepsData) {
  const auto& all = SchemaMigrations();
  ASSERT_GE(all.size(), 2u);
  for (size_t from = 1; from < all.size(); ++from) {
    TempDir dir;
    {
      auto db = Db::Open(dir.File("a.db"));
      ASSERT_TRUE(db.ok());
      ASSERT_TRUE(Migrate(db->get(), all, all[from - 1].version).ok());
      EXPECT_EQ(*SchemaVersion(db->get()), all[from - 1].version);
      ASSERT_TRUE((*db)->Exec("INSERT INTO jobs (id, user, queue, state, "
                              "create_time_us, job) VALUES (7, 'bob', 'q', 1, "
                              "0, x'')").ok());
    }
    auto store = SqliteStore::Open(dir.File("a.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    auto state = (*store)->Load();
    ASSERT_TRUE(state.ok());
    ASSERT_EQ(state->jobs.size(), 1u);
  }
}

TEST(MigratorTest, RefusesANewerDatabase) {
  TempDir dir;
  auto db = Db::Open(dir.File("a.db"));
  ASSERT_TRUE((*db)->Exec("PRAGMA user_version = 999").ok());
  absl::Status st = Migrate(db->get(), SchemaMigrations());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("newer xl-scheduler"), std::string::npos);
}

TEST(StoreTest, CommittedWritesSurviveReopen) {
  TempDir dir;
  {
    auto store = SqliteStore::Open(dir.File("s.db"));
    ASSERT_TRUE(store.ok());
    for (int i = 1; i <= 5; ++i) {
      ASSERT_TRUE((*store)->WriteSync([i](Tx& tx) { return tx.PutJob(MakeJob(i)); }).ok());
    }
    v1::LogChunk chunk;
    chunk.set_job_id("3");
    chunk.set_rank(1);
    chunk.set_data("hello\n");
    ASSERT_TRUE((*store)->WriteSync([&](Tx& tx) { return tx.AppendLog(&chunk); }).ok());
    EXPECT_GT(chunk.seq(), 0);
  }
  auto store = SqliteStore::Open(dir.File("s.db"));
  ASSERT_TRUE(store.ok());
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->jobs.size(), 5u);
  auto logs = (*store)->ReadLogs(3, 0, -1, 10);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 1u);
  EXPECT_EQ((*logs)[0].data(), "hello\n");
  EXPECT_TRUE((*store)->ReadLogs(3, 0, 0, 10)->empty());  // other rank
}

// An agent sends a chunk again when its connection broke before the ack:
// the same (job, attempt, rank, stream, end_offset) is kept once.
TEST(StoreTest, LogChunkSentTwiceIsKeptOnce) {
  TempDir dir;
  auto store = SqliteStore::Open(dir.File("s.db"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->WriteSync([](Tx& tx) { return tx.PutJob(MakeJob(7)); }).ok());
  v1::LogChunk chunk;
  chunk.set_job_id("7");
  chunk.set_attempt(1);
  chunk.set_data("step 1\n");
  chunk.set_end_offset(7);
  v1::LogChunk again = chunk;
  v1::LogChunk next = chunk;
  next.set_data("step 2\n");
  next.set_end_offset(14);
  v1::LogChunk marker = chunk;  // no end_offset: never deduplicated
  marker.set_end_offset(0);
  for (v1::LogChunk* c : {&chunk, &again, &next, &marker, &marker}) {
    ASSERT_TRUE((*store)->WriteSync([c](Tx& tx) { return tx.AppendLog(c); }).ok());
  }
  EXPECT_GT(chunk.seq(), 0);
  EXPECT_EQ(again.seq(), 0) << "the duplicate is skipped";
  EXPECT_GT(next.seq(), chunk.seq());
  auto logs = (*store)->ReadLogs(7, 0, -1, 10);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 4u);
  EXPECT_EQ((*logs)[0].data(), "step 1\n");
  EXPECT_EQ((*logs)[0].end_offset(), 7);
  EXPECT_EQ((*logs)[1].data(), "step 2\n");
  EXPECT_EQ((*logs)[1].end_offset(), 14);
  EXPECT_EQ((*logs)[2].end_offset(), 0);
}

// The control layer's one vocabulary of durable changes: every kind in one
// list is one transaction, read back by Load as it was written; the two
// kinds that give something back (AppendLog's seq, TrimOutput's count) do.
TEST(StoreTest, EveryKindOfChangeIsWrittenAndLoadedBack) {
  TempDir dir;
  auto store = SqliteStore::Open(dir.File("s.db"));
  ASSERT_TRUE(store.ok());
  v1::Job running = MakeJob(4);
  running.set_state(v1::RUNNING);
  running.set_attempt(2);
  v1::JobEvent event;
  event.set_job_id("4");
  event.set_seq(1);
  event.set_to_state(v1::RUNNING);
  v1::RankExit exit;
  exit.set_rank(1);
  exit.set_exit_code(3);
  StoredNode node;
  node.name = "a";
  node.inventory.set_hostname("a");
  node.drained = true;
  node.state_reason = "disk";
  StoredHold hold;
  hold.job_id = 4;
  hold.attempt = 2;
  hold.allocation.set_node("a");
  hold.allocation.add_ranks(0);
  hold.allocation.add_ranks(1);
  auto chunk = std::make_shared<v1::LogChunk>();
  chunk->set_job_id("4");
  chunk->set_attempt(2);
  chunk->set_data("hello\n");
  chunk->set_end_offset(6);
  auto point = std::make_shared<v1::TrainMetrics>();
  point->set_job_id("4");
  point->set_step(10);
  v1::Queue queue;
  queue.mutable_spec()->set_name("research");
  queue.set_version(1);
  v1::QueueChange queue_change;
  queue_change.set_seq(1);
  queue_change.set_queue("research");
  queue_change.set_action("create");
  StoredUsage usage{"research", "alice", 42, absl::FromUnixSeconds(1000)};
  Changes changes = {
      change::PutJob{std::make_shared<const v1::Job>(running)},
      change::PutJob{std::make_shared<const v1::Job>(MakeJob(5))},
      change::AddEvent{event},
      change::PutRankExit{4, 2, exit},
      change::PutToken{4, "secret"},
      change::PutNode{node},
      change::PutHold{hold},
      change::AppendLog{chunk},
      change::AppendMetrics{point},
      change::PutQueue{queue},
      change::AddQueueChange{queue_change},
      change::PutUsage{usage},
  };
  ASSERT_TRUE((*store)->WriteSync([&](Tx& tx) {
    return WriteChanges(changes, tx);
  }).ok());
  EXPECT_GT(chunk->seq(), 0) << "AppendLog gives its seq back";
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->last_job_id, 5) << "the highest stored";
  ASSERT_EQ(state->jobs.size(), 2u);
  EXPECT_EQ(state->jobs[0].state(), v1::RUNNING);
  ASSERT_EQ(state->jobs[0].rank_exits_size(), 1);
  EXPECT_EQ(state->jobs[0].rank_exits(0).exit_code(), 3);
  ASSERT_EQ(state->events.size(), 1u);
  EXPECT_EQ(state->tokens[4], "secret");
  ASSERT_EQ(state->nodes.size(), 1u);
  EXPECT_TRUE(state->nodes[0].drained);
  EXPECT_EQ(state->nodes[0].state_reason, "disk");
  ASSERT_EQ(state->holds.size(), 1u);
  EXPECT_EQ(state->holds[0].allocation.ranks_size(), 2);
  EXPECT_EQ((state->log_ends[{4, 2, 0, 0}]), 6);
  EXPECT_GT(state->log_bytes[4], 0);
  EXPECT_GT(state->metrics_bytes[4], 0);
  ASSERT_EQ(state->queues.size(), 1u);
  ASSERT_EQ(state->queue_changes.size(), 1u);
  ASSERT_EQ(state->usage.size(), 1u);
  EXPECT_EQ(state->usage[0].gpu_seconds, 42);

  // The kinds that take away, and TrimOutput's count.
  auto trimmed = std::make_shared<Tx::Trimmed>();
  Changes removals = {
      change::TrimOutput{4, 1, trimmed},
      change::DeleteHold{"a", 4, 2},
      change::DeleteJob{5},
      change::DeleteQueue{"research"},
      change::PutUsage{{"research", "alice", 0, absl::FromUnixSeconds(1000)}},
  };
  ASSERT_TRUE((*store)->WriteSync([&](Tx& tx) {
    return WriteChanges(removals, tx);
  }).ok());
  EXPECT_EQ(trimmed->log_bytes, 6 + kStoredRowOverheadBytes)
      << "TrimOutput says what it removed";
  state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->jobs.size(), 1u);
  EXPECT_EQ(state->last_job_id, 5) << "a deleted job's id stays given";
  EXPECT_TRUE(state->holds.empty());
  EXPECT_TRUE(state->queues.empty());
  EXPECT_TRUE(state->usage.empty());
  ASSERT_TRUE((*store)->WriteSync([&](Tx& tx) {
    return WriteChanges({change::DeleteLogs{4}}, tx);
  }).ok());
  EXPECT_TRUE((*store)->ReadLogs(4, 0, -1, 10)->empty());
}

TEST(StoreTest, ConcurrentWritesShareCommits) {
  TempDir dir;
  auto store = SqliteStore::Open(dir.File("s.db"));
  ASSERT_TRUE(store.ok());
  constexpr int kThreads = 16, kEach = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        int id = 1 + t * kEach + i;
        ASSERT_TRUE((*store)->WriteSync([id](Tx& tx) { return tx.PutJob(MakeJob(id)); }).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*store)->Load()->jobs.size(), size_t{kThreads * kEach});
  // Group commit: fewer transactions than writes.
  EXPECT_LT((*store)->commits(), kThreads * kEach);
}

TEST(StoreTest, AFailedWriteUndoesOnlyItself) {
  TempDir dir;
  auto store = SqliteStore::Open(dir.File("s.db"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->WriteSync([](Tx& tx) { return tx.PutJob(MakeJob(1, "k")); }).ok());
  std::atomic<int> done{0};
  absl::Status bad, good;
  // Same idempotency key on another id violates the unique index.
  (*store)->Write([](Tx& tx) {
        absl::Status st = tx.PutJob(MakeJob(2));
        if (!st.ok()) return st;
        return tx.PutJob(MakeJob(3, "k"));
      },
      [&](absl::Status st) { bad = st; ++done; });
  (*store)->Write([](Tx& tx) { return tx.PutJob(MakeJob(4)); },
                  [&](absl::Status st) { good = st; ++done; });
  ASSERT_TRUE((*store)->WriteSync([](Tx&) { return absl::OkStatus(); }).ok());
  EXPECT_EQ(done, 2);
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(good.ok());
  auto state = (*store)->Load();
  std::vector<std::string> ids;
  for (auto& j : state->jobs) ids.push_back(j.id());
  EXPECT_EQ(ids, (std::vector<std::string>{"1", "4"}));  // 2 rolled back too
}

}  // namespace
}  // namespace xl::store

namespace xl::store {
namespace {

TEST(DbLockTest, SecondSchedulerOnOneDatabaseIsRefused) {
  TempDir dir;
  auto first = DbLock::Acquire(dir.File("x.db"));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = DbLock::Acquire(dir.File("x.db"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(
                absl::StrCat("in use by another xl-scheduler (pid ", getpid(),
                             ")")),
            std::string::npos)
      << second.status();
  // Another database is no conflict; the lock goes with its holder.
  EXPECT_TRUE(DbLock::Acquire(dir.File("y.db")).ok());
  first->reset();
  EXPECT_TRUE(DbLock::Acquire(dir.File("x.db")).ok());
}

TEST(StoreTest, HoldsTokensAndRetentionDeletesRoundTrip) {
  TempDir dir;
  auto store = SqliteStore::Open(dir.File("s.db"));
  ASSERT_TRUE(store.ok());
  StoredHold hold;
  hold.job_id = 1;
  hold.attempt = 2;
  hold.allocation.set_node("a");
  hold.allocation.add_gpu_indices(3);
  hold.allocation.add_ranks(5);
  ASSERT_TRUE((*store)->WriteSync([&](Tx& tx) {
    RETURN_IF_ERROR(tx.PutJob(MakeJob(1)));
    RETURN_IF_ERROR(tx.PutToken(1, "secret"));
    RETURN_IF_ERROR(tx.PutHold(hold));
    v1::LogChunk c;
    c.set_job_id("1");
    c.set_data("12345");
    return tx.AppendLog(&c);
  }).ok());
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->tokens.at(1), "secret");
  ASSERT_EQ(state->holds.size(), 1u);
  EXPECT_EQ(state->holds[0].allocation.gpu_indices(0), 3);
  // Its data and the row's overhead, as the output budget counts it.
  EXPECT_EQ(state->log_bytes.at(1), 5 + kStoredRowOverheadBytes);
  ASSERT_TRUE((*store)->WriteSync([](Tx& tx) {
    return tx.DeleteJob(1);
  }).ok());
  state = (*store)->Load();
  EXPECT_TRUE(state->jobs.empty());
  EXPECT_TRUE(state->holds.empty());
  EXPECT_TRUE(state->log_bytes.empty());
}

}  // namespace
}  // namespace xl::store

namespace xl::store {
namespace {

// A full disk (SQLITE_FULL, with SQLite ending the transaction itself): the
// failing group fails whole, nothing queued after it commits, and writes
// work again only after a probe commits.
TEST(StoreTest, AFullDiskFailsEverythingUntilAProbeCommits) {
  TempDir dir;
  StoreOptions options;
  options.max_page_count = 64;  // 256 KiB with 4 KiB pages
  auto opened = SqliteStore::Open(dir.File("full.db"), options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  SqliteStore* store = opened->get();
  int id = 1;
  absl::Status full;
  // Fill the database until a write fails.
  for (; id < 10000 && full.ok(); ++id) {
    v1::Job job = MakeJob(id);
    job.set_reason(std::string(4096, 'x'));
    full = store->WriteSync([job](Tx& tx) { return tx.PutJob(job); });
  }
  ASSERT_FALSE(full.ok()) << "the database never filled";
  EXPECT_NE(full.message().find("full"), std::string::npos) << full;
  const int failed_id = id - 1;
  // A small write that would fit now fails too, without running.
  EXPECT_FALSE(store->WriteSync([](Tx& tx) {
                 return tx.PutJob(MakeJob(90000));
               }).ok());
  absl::Status probe;
  absl::Mutex mu;
  bool done = false;
  store->Probe([&](absl::Status st) {
    absl::MutexLock lock(&mu);
    probe = st;
    done = true;
  });
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
  }
  EXPECT_TRUE(probe.ok()) << probe;  // a one-row update fits
  EXPECT_TRUE(store->WriteSync([](Tx& tx) {
                return tx.PutJob(MakeJob(90001));
              }).ok());
  auto state = store->Load();
  ASSERT_TRUE(state.ok());
  std::set<std::string> ids;
  for (const auto& j : state->jobs) ids.insert(j.id());
  EXPECT_EQ(ids.count(absl::StrCat(failed_id)), 0u);
  EXPECT_EQ(ids.count("90000"), 0u);
  EXPECT_EQ(ids.count("90001"), 1u);
}

// A write that fails on its own (a duplicate key) undoes only itself.
TEST(StoreTest, AWritesOwnFailureLeavesTheOthers) {
  TempDir dir;
  auto store = SqliteStore::Open(dir.File("own.db"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->WriteSync([](Tx& tx) {
    return tx.PutJob(MakeJob(1, "k"));
  }).ok());
  EXPECT_FALSE((*store)->WriteSync([](Tx& tx) {
    return tx.PutJob(MakeJob(2, "k"));
  }).ok());
  EXPECT_TRUE((*store)->WriteSync([](Tx& tx) {
    return tx.PutJob(MakeJob(3));
  }).ok());
}

}  // namespace
}  // namespace xl::store
