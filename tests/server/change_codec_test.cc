// store/change_codec.h: a transaction's changes as a replicated log's
// entry. Every kind of change, encoded and decoded, writes the same
// database as the change itself (two real SQLite stores, read back and
// compared); bytes that are damaged, of another format or of an unknown
// kind are refused.
#include "server/store/change_codec.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/duration.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/store/sqlite_store.h"
#include "tests/server/replica_testing.h"
#include "xl/replica/v1/log.pb.h"

namespace xl::store {
namespace {

using google::protobuf::util::MessageDifferencer;

class TempDir {
 public:
  TempDir() {
    std::string t =
        (std::filesystem::temp_directory_path() / "xl-codec-XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string Bytes(const Changes& changes) {
  absl::StatusOr<std::string> bytes = EncodeChanges(changes);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

v1::Job Job(int id, v1::JobState state) {
  v1::Job job;
  job.set_id(absl::StrCat(id));
  job.set_user("alice");
  job.set_state(state);
  job.set_attempt(1);
  job.set_idempotency_key(absl::StrCat("key-", id));
  job.mutable_spec()->set_queue("research");
  job.mutable_spec()->add_command("/bin/true");
  // Maps: their order must not differ between replicas.
  for (const char* k : {"B", "A", "D", "C", "HOME", "PATH"}) {
    (*job.mutable_spec()->mutable_env())[k] = absl::StrCat(k, id);
  }
  return job;
}

// Two transactions that use every kind of change once or more.
std::vector<Changes> EveryKind() {
  Changes first;
  first.push_back(
      change::PutJob{std::make_shared<const v1::Job>(Job(1, v1::RUNNING))});
  first.push_back(
      change::PutJob{std::make_shared<const v1::Job>(Job(2, v1::PENDING))});
  first.push_back(
      change::PutJob{std::make_shared<const v1::Job>(Job(3, v1::FAILED))});
  v1::JobEvent e;
  e.set_job_id("1");
  e.set_seq(1);
  e.set_to_state(v1::PENDING);
  e.set_reason("submitted");
  *e.mutable_time() = ToProtoTime(absl::FromUnixMicros(1'700'000'000'000'007));
  first.push_back(change::AddEvent{e});
  v1::RankExit exit;
  exit.set_rank(1);
  exit.set_node("n1");
  exit.set_exit_code(3);
  first.push_back(change::PutRankExit{1, 1, exit});
  first.push_back(change::PutToken{1, "secret-token"});
  StoredNode node;
  node.name = "n1";
  node.inventory.set_hostname("n1");
  node.inventory.set_cpus(96);
  node.inventory.add_gpus()->set_index(0);
  for (const char* k : {"rack", "zone", "switch", "row"}) {
    (*node.inventory.mutable_labels())[k] = k;
  }
  node.drained = true;
  node.state_reason = "bad DIMM";
  node.register_time = absl::FromUnixMicros(1'700'000'000'123'456);
  first.push_back(change::PutNode{node});
  for (int attempt : {1, 2}) {
    StoredHold hold;
    hold.job_id = 1;
    hold.attempt = attempt;
    hold.allocation.set_node("n1");
    hold.allocation.add_gpu_indices(0);
    hold.allocation.add_ranks(0);
    hold.allocation.set_cpus(8);
    first.push_back(change::PutHold{hold});
  }
  first.push_back(change::DeleteHold{"n1", 1, 2});
  for (int i = 0; i < 4; ++i) {
    auto chunk = std::make_shared<v1::LogChunk>();
    chunk->set_job_id(i < 3 ? "1" : "3");
    chunk->set_attempt(1);
    chunk->set_rank(0);
    chunk->set_stream(v1::STDOUT);
    chunk->set_data(std::string(1000, 'a' + i));
    chunk->set_end_offset(1000 * (i + 1));
    *chunk->mutable_time() =
        ToProtoTime(absl::FromUnixSeconds(1'700'000'000 + i));
    first.push_back(change::AppendLog{chunk});
  }
  auto point = std::make_shared<v1::TrainMetrics>();
  point->set_job_id("1");
  point->set_attempt(1);
  point->set_step(100);
  point->set_loss(0.5);
  *point->mutable_time() = ToProtoTime(absl::FromUnixSeconds(1'700'000'100));
  first.push_back(change::AppendMetrics{point});
  v1::Queue queue;
  queue.mutable_spec()->set_name("research");
  queue.mutable_spec()->set_weight(2);
  queue.set_version(40);
  queue.set_defined(true);
  first.push_back(change::PutQueue{queue});
  queue.mutable_spec()->set_name("old");
  first.push_back(change::PutQueue{queue});
  v1::QueueChange qc;
  qc.set_seq(40);
  qc.set_queue("research");
  qc.set_action("create");
  qc.set_by("admin");
  first.push_back(change::AddQueueChange{qc});
  first.push_back(
      change::PutUsage{{"research", "alice", 1234.5,
                        absl::FromUnixMicros(1'700'000'000'000'001)}});
  first.push_back(change::PutUsage{{"research", "", 99, absl::InfinitePast()}});
  first.push_back(change::PutAuthToken{{"0123456789abcdef", "user", "alice",
                                        true, std::string(64, 'f'),
                                        1'700'000'000, 0, 0, "", "a,b"}});

  Changes second;
  second.push_back(change::TrimOutput{1, 1500, nullptr});
  second.push_back(change::DeleteLogs{3});
  second.push_back(change::DeleteJob{2});
  second.push_back(change::DeleteQueue{"old"});
  return {first, second};
}

StoredState Written(const std::string& path, const std::vector<Changes>& txs) {
  auto store = SqliteStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  for (const Changes& changes : txs) {
    absl::Status st =
        (*store)->WriteSync([&](Tx& tx) { return WriteChanges(changes, tx); });
    EXPECT_TRUE(st.ok()) << st;
  }
  auto state = (*store)->Load();
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? *std::move(state) : StoredState{};
}

template <typename M>
void ExpectSameMessages(const std::vector<M>& a, const std::vector<M>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(a[i], b[i]))
        << a[i].DebugString() << " vs " << b[i].DebugString();
  }
}

TEST(ChangeCodecTest, EveryKindDecodedWritesWhatTheChangeWrites) {
  const std::vector<Changes> original = EveryKind();
  std::vector<Changes> decoded;
  for (const Changes& changes : original) {
    auto d = DecodeChanges(Bytes(changes));
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_EQ(d->size(), changes.size());
    for (size_t i = 0; i < changes.size(); ++i) {
      EXPECT_EQ((*d)[i].index(), changes[i].index()) << "change " << i;
    }
    decoded.push_back(*std::move(d));
  }
  TempDir dir;
  const StoredState a = Written(dir.File("a.db"), original);
  const StoredState b = Written(dir.File("b.db"), decoded);
  // What was written is all there (the test covers something).
  EXPECT_EQ(a.jobs.size(), 2u);
  EXPECT_EQ(a.holds.size(), 1u);
  EXPECT_EQ(a.queues.size(), 1u);
  EXPECT_EQ(a.usage.size(), 2u);
  EXPECT_EQ(a.tokens.at(1), "secret-token");
  EXPECT_GT(a.log_bytes.at(1), 0);
  EXPECT_LT(a.log_bytes.at(1), 2000);   // trimmed
  EXPECT_EQ(a.log_bytes.count(3), 0u);  // deleted
  ExpectSameMessages(a.jobs, b.jobs);
  ExpectSameMessages(a.events, b.events);
  ExpectSameMessages(a.queues, b.queues);
  ExpectSameMessages(a.queue_changes, b.queue_changes);
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    EXPECT_EQ(a.nodes[i].name, b.nodes[i].name);
    EXPECT_TRUE(
        MessageDifferencer::Equals(a.nodes[i].inventory, b.nodes[i].inventory));
    EXPECT_EQ(a.nodes[i].drained, b.nodes[i].drained);
    EXPECT_EQ(a.nodes[i].state_reason, b.nodes[i].state_reason);
    EXPECT_EQ(a.nodes[i].register_time, b.nodes[i].register_time);
  }
  ASSERT_EQ(a.holds.size(), b.holds.size());
  for (size_t i = 0; i < a.holds.size(); ++i) {
    EXPECT_EQ(a.holds[i].job_id, b.holds[i].job_id);
    EXPECT_EQ(a.holds[i].attempt, b.holds[i].attempt);
    EXPECT_TRUE(MessageDifferencer::Equals(a.holds[i].allocation,
                                           b.holds[i].allocation));
  }
  ASSERT_EQ(a.usage.size(), b.usage.size());
  for (size_t i = 0; i < a.usage.size(); ++i) {
    EXPECT_EQ(a.usage[i].queue, b.usage[i].queue);
    EXPECT_EQ(a.usage[i].user, b.usage[i].user);
    EXPECT_EQ(a.usage[i].gpu_seconds, b.usage[i].gpu_seconds);
    EXPECT_EQ(a.usage[i].as_of, b.usage[i].as_of);
  }
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.log_bytes, b.log_bytes);
  EXPECT_EQ(a.metrics_bytes, b.metrics_bytes);
  EXPECT_EQ(a.log_ends, b.log_ends);
  EXPECT_EQ(a.last_job_id, b.last_job_id);
  // Byte for byte, every row of every table.
  const std::string dump = xl::testing::DumpDatabase(dir.File("a.db"));
  EXPECT_NE(dump.find("bad DIMM"), std::string::npos);  // the test covers rows
  EXPECT_NE(dump.find("0123456789abcdef"), std::string::npos);  // a token
  EXPECT_EQ(dump, xl::testing::DumpDatabase(dir.File("b.db")));
  // The same changes give the same bytes.
  EXPECT_EQ(Bytes(original[0]), Bytes(decoded[0]));
}

TEST(ChangeCodecTest, WhatAWriteGivesBackIsNotCarried) {
  auto chunk = std::make_shared<v1::LogChunk>();
  chunk->set_job_id("1");
  chunk->set_seq(77);  // set by the leader's write
  auto trimmed = std::make_shared<Tx::Trimmed>();
  auto d = DecodeChanges(
      Bytes({change::AppendLog{chunk}, change::TrimOutput{1, 10, trimmed}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(std::get<change::AppendLog>((*d)[0]).chunk->seq(), 0);
  EXPECT_EQ(std::get<change::TrimOutput>((*d)[1]).trimmed, nullptr);
  EXPECT_EQ(std::get<change::TrimOutput>((*d)[1]).bytes, 10);
  // An empty transaction is a valid entry.
  auto empty = DecodeChanges(Bytes({}));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ChangeCodecTest, DamagedForeignAndUnknownBatchesAreRefused) {
  const std::string good = Bytes(EveryKind()[0]);
  // Cut short: does not parse.
  auto cut = DecodeChanges(absl::string_view(good).substr(0, good.size() / 2));
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(cut.status().message().find("do not parse"), std::string::npos);
  // Another format.
  replica::v1::ChangeBatch batch;
  ASSERT_TRUE(batch.ParseFromString(good));
  batch.set_format(2);
  auto newer = DecodeChanges(batch.SerializeAsString());
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("format 2"), std::string::npos);
  batch.set_format(0);  // not set at all
  EXPECT_EQ(DecodeChanges(batch.SerializeAsString()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A change of a kind this release does not know (a field it lacks).
  batch.set_format(kChangeBatchFormat);
  batch.add_changes();
  auto unknown = DecodeChanges(batch.SerializeAsString());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unknown.status().message().find(absl::StrCat(
                "change ", batch.changes_size() - 1, " is of no kind")),
            std::string::npos)
      << unknown.status();
}

}  // namespace
}  // namespace xl::store
