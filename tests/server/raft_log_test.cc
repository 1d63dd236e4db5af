// replica/raft_log.h: three replicas in one process over 127.0.0.1 (real
// raft, real TCP, real log directories): a leader is elected, its entries
// are applied on every replica in the same order, a follower names the
// leader, the leader's loss elects another that goes on, and a replica
// started again from its directory catches up.
#include "server/replica/raft_log.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "tests/server/replica_testing.h"

namespace xl::replica {
namespace {

// What one replica applied, in order.
struct Applied {
  absl::Mutex mu;
  std::vector<std::string> entries ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> indexes ABSL_GUARDED_BY(mu);

  std::vector<std::string> Entries() {
    absl::MutexLock lock(&mu);
    return entries;
  }
};

class RaftLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xl-raft-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    for (uint64_t id = 1; id <= 3; ++id) {
      peers_[id] = absl::StrCat("127.0.0.1:", xl::testing::FreePort());
      applied_[id] = std::make_unique<Applied>();
    }
  }
  void TearDown() override {
    logs_.clear();
    if (getenv("XL_KEEP_RAFT_DIR") == nullptr)
      std::filesystem::remove_all(dir_);
  }

  absl::Status StartReplica(uint64_t id) {
    RaftLog::Options o;
    o.id = id;
    o.peers = peers_;
    o.dir = absl::StrCat(dir_, "/replica-", id);
    o.election_timeout = absl::Milliseconds(300);
    o.heartbeat = absl::Milliseconds(50);
    Applied* applied = applied_[id].get();
    o.apply = [applied](uint64_t index, absl::string_view entry,
                        absl::Status* outcome) {
      absl::MutexLock lock(&applied->mu);
      applied->entries.emplace_back(entry);
      applied->indexes.push_back(index);
      // An entry may be refused on its own: the same everywhere.
      if (entry.rfind("refuse", 0) == 0) {
        *outcome = absl::AlreadyExistsError("refused");
      }
      return absl::OkStatus();
    };
    auto log = RaftLog::Start(std::move(o));
    if (!log.ok()) return log.status();
    logs_[id] = *std::move(log);
    return absl::OkStatus();
  }

  // The replica that leads, once one does (0 after 15 s).
  uint64_t Leader() {
    const absl::Time until = absl::Now() + absl::Seconds(15);
    while (absl::Now() < until) {
      for (auto& [id, log] : logs_) {
        if (log->state().leader) return id;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return 0;
  }

  absl::Status AppendSync(uint64_t id, std::string entry) {
    absl::Mutex mu;
    bool done = false;
    absl::Status result;
    logs_[id]->Append(std::move(entry), [&](absl::Status st) {
      absl::MutexLock lock(&mu);
      result = st;
      done = true;
    });
    absl::MutexLock lock(&mu);
    if (!mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(15))) {
      return absl::DeadlineExceededError("no answer in 15 s");
    }
    return result;
  }

  // Waits until replica `id` applied `n` entries (false after 15 s).
  bool AppliedCount(uint64_t id, size_t n) {
    Applied* a = applied_[id].get();
    absl::MutexLock lock(&a->mu);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->mu) {
      return a->entries.size() >= n;
    };
    return a->mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(15));
  }

  std::string dir_;
  std::map<uint64_t, std::string> peers_;
  std::map<uint64_t, std::unique_ptr<Applied>> applied_;
  std::map<uint64_t, std::unique_ptr<RaftLog>> logs_;
};

TEST_F(RaftLogTest, TheLeadersEntriesAreAppliedEverywhereInOrder) {
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(StartReplica(id).ok());
  const uint64_t leader = Leader();
  ASSERT_NE(leader, 0u) << "no leader in 15 s";
  std::vector<std::string> sent;
  for (int i = 0; i < 50; ++i) {
    sent.push_back(absl::StrCat("entry-", i, std::string(i * 10, 'x')));
    ASSERT_TRUE(AppendSync(leader, sent.back()).ok()) << i;
  }
  // Acknowledged: applied on the leader already; the others follow.
  EXPECT_EQ(applied_[leader]->Entries(), sent);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(AppliedCount(id, sent.size())) << "replica " << id;
    EXPECT_EQ(applied_[id]->Entries(), sent) << "replica " << id;
  }
  // Raft's indexes go up (the bootstrap's configuration is entry 1).
  {
    absl::MutexLock lock(&applied_[leader]->mu);
    const auto& idx = applied_[leader]->indexes;
    for (size_t i = 1; i < idx.size(); ++i) EXPECT_GT(idx[i], idx[i - 1]);
  }
  // An entry refused on its own: the leader's answer says so.
  absl::Status refused_here = AppendSync(leader, "refuse me");
  EXPECT_EQ(refused_here.code(), absl::StatusCode::kAlreadyExists)
      << refused_here;
  sent.push_back("refuse me");
  EXPECT_TRUE(AppendSync(leader, "after a refusal").ok());
  sent.push_back("after a refusal");
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(AppliedCount(id, sent.size())) << "replica " << id;
  }
  const RaftLog::State s = logs_[leader]->state();
  EXPECT_GE(s.term, 1u);
  // A follower takes nothing and says where the leader is.
  const uint64_t follower = leader == 1 ? 2 : 1;
  absl::Status refused = AppendSync(follower, "not here");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find(peers_[leader]), std::string::npos)
      << refused;
  EXPECT_EQ(applied_[follower]->Entries().size(), sent.size());
}

TEST_F(RaftLogTest, LosingTheLeaderElectsAnotherAndARestartCatchesUp) {
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(StartReplica(id).ok());
  const uint64_t first = Leader();
  ASSERT_NE(first, 0u);
  ASSERT_TRUE(AppendSync(first, "before").ok());
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(AppliedCount(id, 1));
  logs_.erase(first);  // the leader goes away
  const absl::Time lost = absl::Now();
  const uint64_t second = Leader();
  ASSERT_NE(second, 0u) << "no new leader in 15 s";
  ASSERT_NE(second, first);
  const absl::Duration election = absl::Now() - lost;
  EXPECT_TRUE(AppendSync(second, "after").ok());
  const uint64_t other = 6 - first - second;
  ASSERT_TRUE(AppliedCount(other, 2));
  EXPECT_EQ(applied_[other]->Entries(),
            (std::vector<std::string>{"before", "after"}));
  // The old leader comes back from its directory: it applies its log again
  // from the start (no snapshots yet) and catches up.
  applied_[first] = std::make_unique<Applied>();
  absl::Status again = StartReplica(first);
  ASSERT_TRUE(again.ok()) << again;
  ASSERT_TRUE(AppliedCount(first, 2));
  EXPECT_EQ(applied_[first]->Entries(),
            (std::vector<std::string>{"before", "after"}));
  std::cerr << "new leader after " << absl::FormatDuration(election)
            << " (election timeout 300ms)\n";
}

TEST_F(RaftLogTest, BadOptionsAreRefused) {
  RaftLog::Options o;
  o.id = 4;
  o.peers = peers_;
  o.dir = dir_ + "/x";
  o.apply = [](uint64_t, absl::string_view, absl::Status*) {
    return absl::OkStatus();
  };
  auto log = RaftLog::Start(o);
  EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(log.status().message().find("not among the peers"),
            std::string::npos);
  o.id = 1;
  o.dir = "/proc/no-such-place/raft";
  log = RaftLog::Start(o);
  EXPECT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find("/proc/no-such-place/raft"),
            std::string::npos)
      << log.status();
}

}  // namespace
}  // namespace xl::replica
