// state/node_life.h: a node's life as functions of the model, called with
// no controller, store, clock or server: registration and its refusals,
// reconcile's unreported ranks, what a rank status is, a rank's release,
// the node draining itself, and a drain that takes effect once recorded.
#include "server/state/node_life.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/server/model_fixture.h"

namespace xl::state {
namespace {

using Connection = testing::NullConnection;
using testing::Count;
using testing::kNow;

const absl::Duration kTimeout = absl::Seconds(30);

v1::Register RegisterOf(const std::string& name, const std::string& instance,
                        int gpus = 2) {
  v1::Register reg;
  reg.set_name(name);
  reg.set_instance_id(instance);
  reg.set_agent_version("1.2.3");
  reg.set_honours_lease(true);
  reg.mutable_inventory()->set_hostname(name);
  reg.mutable_inventory()->set_cpus(16);
  reg.mutable_inventory()->set_memory_bytes(128ll << 30);
  for (int i = 0; i < gpus; ++i) {
    auto* g = reg.mutable_inventory()->add_gpus();
    g->set_index(i);
    g->set_memory_bytes(80ll << 30);
  }
  return reg;
}

v1::RankStatus Status(int64_t job, int attempt, int rank, v1::RankState st,
                      bool processes_remaining = false) {
  v1::RankStatus s;
  s.set_job_id(absl::StrCat(job));
  s.set_attempt(attempt);
  s.set_rank(rank);
  s.set_state(st);
  s.set_processes_remaining(processes_remaining);
  return s;
}

// CheckRegister, then Register, as the controller does.
absl::StatusOr<Registered> Registers(Model* model, const v1::Register& reg,
                                     std::shared_ptr<AgentConnection> conn,
                                     Now now) {
  absl::StatusOr<std::string> name = CheckRegister(reg);
  if (!name.ok()) return name.status();
  return Register(model, *name, reg, std::move(conn), kTimeout, now);
}

// Nodes "a" and "b" (2 GPUs each, agents connected); job 7 started on
// both, one GPU and two ranks a node: ranks 0 and 1 on a, 2 and 3 on b.
class NodeLifeTest : public testing::ModelTest {
 protected:
  NodeLifeTest() : ModelTest(/*ranks_per_node=*/2) {
    for (const char* n : {"a", "b"}) {
      model_.nodes.Find(n)->instance_id = std::string("agent-") + n;
    }
    Started();
  }
};

TEST_F(NodeLifeTest, ANewNodeRegistersWithItsInventoryAndCapacity) {
  auto conn = std::make_shared<Connection>();
  const Now later{kNow.wall + absl::Minutes(1), kNow.mono + absl::Minutes(1)};
  auto r = Registers(&model_, RegisterOf("c", "agent-c", 4), conn, later);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->node, model_.nodes.Find("c"));
  EXPECT_EQ(r->replaced, nullptr);
  EXPECT_FALSE(r->was_lost);
  const NodeRecord& c = *r->node;
  EXPECT_EQ(c.conn, conn);
  EXPECT_EQ(c.address, "10.0.0.9");  // no address in the inventory: the peer's
  EXPECT_EQ(c.inventory.cpus(), 16);
  EXPECT_EQ(c.agent_version, "1.2.3");
  EXPECT_TRUE(c.honours_lease);
  EXPECT_FALSE(c.shared_env);
  EXPECT_EQ(c.last_heartbeat_mono, later.mono);
  EXPECT_EQ(c.last_heartbeat_wall, later.wall);
  EXPECT_EQ(c.register_time, later.wall);
  ASSERT_NE(model_.ledger.Capacity("c"), nullptr);
  EXPECT_EQ(model_.ledger.Capacity("c")->gpu_free, 0b1111u);
  // The row to store: no drain.
  store::StoredNode row = StoredNodeOf(c);
  EXPECT_EQ(row.name, "c");
  EXPECT_FALSE(row.drained);
  EXPECT_EQ(row.inventory.gpus_size(), 4);
  // Named by its hostname, reachable at the address it gives.
  v1::Register d = RegisterOf("", "agent-d", 64);
  d.mutable_inventory()->set_hostname("d");
  d.mutable_inventory()->set_address("d.cluster:7071");
  d.set_shared_env(true);
  r = Registers(&model_, d, std::make_shared<Connection>(), later);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->node->name, "d");
  EXPECT_EQ(r->node->address, "d.cluster:7071");
  EXPECT_TRUE(r->node->shared_env);
  EXPECT_TRUE(CheckRegister(RegisterOf(std::string(253, 'n'), "x")).ok());
}

TEST_F(NodeLifeTest, ABadRegisterIsRefusedAndChangesNothing) {
  auto conn = std::make_shared<Connection>();
  v1::Register nameless = RegisterOf("", "x");
  nameless.mutable_inventory()->clear_hostname();
  v1::Register twice = RegisterOf("c", "x");
  twice.mutable_inventory()->mutable_gpus(1)->set_index(0);
  v1::Register control = RegisterOf("c\x1b[2J", "x");
  v1::Register label = RegisterOf("c", "x");
  label.mutable_inventory()->mutable_gpus(0)->set_model("H100\n");
  v1::Register version = RegisterOf("c", "x");
  version.set_agent_version("1.0\x1b[31m");
  // An existing node's bad Register leaves it as it was.
  v1::Register a_twice = RegisterOf("a", "agent-a");
  a_twice.mutable_inventory()->mutable_gpus(1)->set_index(0);
  const struct {
    v1::Register reg;
    std::string field;
  } bad[] = {
      {nameless, "register.name: empty"},
      {twice, "register.inventory.gpus[1].index: 0 appears twice"},
      {control, "register.name: a node name is at most 253 printable"},
      {label, "register.inventory.gpus[0].model"},
      {version, "register.agent_version: at most 128 printable"},
      {RegisterOf("c", std::string(129, 'i')), "register.instance_id"},
      {RegisterOf(std::string(254, 'n'), "x"), "register.name: a node name"},
      {RegisterOf("c", "x", 65), "register.inventory.gpus: 65 GPUs"},
      {a_twice, "register.inventory.gpus[1].index: 0 appears twice"},
  };
  for (const auto& b : bad) {
    auto r = Registers(&model_, b.reg, conn, kNow);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.field), std::string::npos)
        << r.status();
  }
  EXPECT_EQ(model_.nodes.all().size(), 2u);
  EXPECT_FALSE(model_.ledger.HasNode("c"));
  EXPECT_EQ(model_.nodes.Find("a")->inventory.cpus(), 8);
}

TEST_F(NodeLifeTest, AnotherAgentMayNotTakeALiveNodeButItsOwnMayReconnect) {
  NodeRecord* a = model_.nodes.Find("a");
  auto old_conn = a->conn;
  a->last_heartbeat_mono = kNow.mono - absl::Seconds(10);
  auto conn = std::make_shared<Connection>();
  // Another process, heard from within the timeout: refused, untouched.
  auto r = Registers(&model_, RegisterOf("a", "intruder"), conn, kNow);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(r.status().message().find("give this agent its own --name"),
            std::string::npos);
  EXPECT_EQ(a->conn, old_conn);
  EXPECT_EQ(a->inventory.cpus(), 8);
  EXPECT_EQ(a->instance_id, "agent-a");
  EXPECT_EQ(a->last_heartbeat_mono, kNow.mono - absl::Seconds(10));
  // The same process reconnecting: its old session is the caller's to close.
  r = Registers(&model_, RegisterOf("a", "agent-a"), conn, kNow);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->replaced, old_conn);
  EXPECT_EQ(a->conn, conn);
  EXPECT_EQ(a->inventory.cpus(), 16);
  // The holds stay with the new inventory: job 7 still has GPU 0.
  EXPECT_EQ(model_.ledger.Capacity("a")->gpu_free, 0b10u);
  // Silent for the timeout: another process may take over.
  const Now later{kNow.wall, kNow.mono + kTimeout};
  r = Registers(&model_, RegisterOf("a", "other"),
                std::make_shared<Connection>(),
                {kNow.wall, later.mono - absl::Milliseconds(1)});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  a->lost = true;
  a->lost_reason = "silent";
  auto other = std::make_shared<Connection>();
  r = Registers(&model_, RegisterOf("a", "new-agent"), other, later);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->was_lost);
  EXPECT_EQ(r->replaced, conn);
  EXPECT_FALSE(a->lost);
  EXPECT_TRUE(a->lost_reason.empty());
  EXPECT_EQ(a->instance_id, "new-agent");
  // An agent that gives no instance id (an old one) is let in.
  r = Registers(&model_, RegisterOf("a", ""), std::make_shared<Connection>(),
                later);
  EXPECT_TRUE(r.ok()) << r.status();
}

TEST_F(NodeLifeTest, ReconcileFindsTheRanksTheAgentNoLongerReports) {
  // The agent on "a" reports rank 0 only; rank 1 it reported exited before
  // and that exit waits, parked, for its output.
  JobRecord::ParkedExit parked;
  parked.node = "a";
  parked.status = Status(7, 1, 1, v1::RANK_EXITED, /*remaining=*/true);
  rec_->parked_exits.push_back(parked);
  v1::Register reg = RegisterOf("a", "agent-a");
  *reg.add_ranks() = Status(7, 1, 0, v1::RANK_RUNNING);
  v1::Register again = reg;
  *again.add_ranks() = Status(7, 1, 1, v1::RANK_EXITED, true);
  auto missing = UnreportedRanks(&model_, *model_.nodes.Find("a"), again, {7});
  EXPECT_TRUE(missing.empty());
  // Still reported: it still runs.
  EXPECT_TRUE(rec_->parked_exits.front().status.processes_remaining());
  missing = UnreportedRanks(&model_, *model_.nodes.Find("a"), reg, {7});
  EXPECT_TRUE(missing.empty());
  // The parked exit is no longer reported: nothing of it runs any more.
  EXPECT_FALSE(rec_->parked_exits.front().status.processes_remaining());
  // On "b" the agent reports nothing (its state was wiped).
  missing = UnreportedRanks(&model_, *model_.nodes.Find("b"),
                            RegisterOf("b", "agent-b"), {7});
  EXPECT_EQ(missing, (std::vector<RankRef>{{7, 1, 2}, {7, 1, 3}}));
  // Parked exits of jobs not listed as parked do not count.
  rec_->parked_exits.front().node = "b";
  rec_->parked_exits.front().status = Status(7, 1, 2, v1::RANK_EXITED, true);
  missing = UnreportedRanks(&model_, *model_.nodes.Find("b"),
                            RegisterOf("b", "agent-b"), {});
  EXPECT_EQ(missing.size(), 2u);
  missing = UnreportedRanks(&model_, *model_.nodes.Find("b"),
                            RegisterOf("b", "agent-b"), {7});
  EXPECT_EQ(missing, (std::vector<RankRef>{{7, 1, 3}}));
}

TEST_F(NodeLifeTest, UnreportedRanksAreUndeliveredOrVanishedOrNeither) {
  // Rank 2 ran, rank 3 was never heard of, rank 1 exited.
  rec_->ranks[2] = Status(7, 1, 2, v1::RANK_RUNNING);
  rec_->ranks[1] = Status(7, 1, 1, v1::RANK_EXITED);
  std::vector<RankRef> missing{{7, 1, 1}, {7, 1, 2}, {7, 1, 3}};
  Unreported u = SortUnreported(model_, missing);
  EXPECT_EQ(u.vanished[7], (std::vector<int>{2}));
  EXPECT_EQ(u.undelivered[7], (std::vector<int>{3}));
  // An attempt that is over, or stopping, is nobody's concern.
  u = SortUnreported(model_, {{7, 0, 2}, {8, 1, 0}});
  EXPECT_TRUE(u.vanished.empty());
  EXPECT_TRUE(u.undelivered.empty());
  rec_->stopping = true;
  u = SortUnreported(model_, missing);
  EXPECT_TRUE(u.vanished.empty());
  EXPECT_TRUE(u.undelivered.empty());
  rec_->stopping = false;
  rec_->job.set_state(v1::FAILED);
  u = SortUnreported(model_, missing);
  EXPECT_TRUE(u.vanished.empty());
  EXPECT_TRUE(u.undelivered.empty());
}

TEST_F(NodeLifeTest, ARankStatusIsSortedByWhatTheNodeHolds) {
  const NodeRecord& a = *model_.nodes.Find("a");
  using K = RankStatusKind;
  EXPECT_EQ(KindOf(model_, a, Status(7, 1, 0, v1::RANK_RUNNING)).kind,
            K::kRunning);
  // Rank 2 runs on b, not a; attempt 2 holds nothing anywhere.
  EXPECT_EQ(KindOf(model_, a, Status(7, 1, 2, v1::RANK_RUNNING)).kind,
            K::kRunningUnknown);
  EXPECT_EQ(KindOf(model_, a, Status(7, 2, 0, v1::RANK_RUNNING)).kind,
            K::kRunningUnknown);
  EXPECT_EQ(KindOf(model_, a, Status(9, 1, 0, v1::RANK_RUNNING)).kind,
            K::kRunningUnknown);
  EXPECT_EQ(KindOf(model_, a, Status(7, 1, 0, v1::RANK_STATE_UNSPECIFIED)).kind,
            K::kOther);
  EXPECT_EQ(KindOf(model_, a, Status(7, 1, 2, v1::RANK_EXITED)).kind,
            K::kExitNotHeld);
  RankStatusKind exit =
      KindOf(model_, a, Status(7, 1, 1, v1::RANK_FAILED_TO_START));
  EXPECT_EQ(exit.kind, K::kExitHeld);
  EXPECT_TRUE(exit.current);
  EXPECT_TRUE(exit.first_exit);
  // It ran before: its exit is still its first.
  rec_->ranks[1] = Status(7, 1, 1, v1::RANK_RUNNING);
  EXPECT_TRUE(KindOf(model_, a, Status(7, 1, 1, v1::RANK_EXITED)).first_exit);
  // An exit already counted is held (until its processes are gone) but
  // counts no more.
  rec_->ranks[1] = Status(7, 1, 1, v1::RANK_FAILED_TO_START);
  exit = KindOf(model_, a, Status(7, 1, 1, v1::RANK_FAILED_TO_START));
  EXPECT_EQ(exit.kind, K::kExitHeld);
  EXPECT_FALSE(exit.first_exit);
  // The attempt is stopping: its ranks still run, stale.
  rec_->stopping = true;
  EXPECT_EQ(KindOf(model_, a, Status(7, 1, 0, v1::RANK_RUNNING)).kind,
            K::kRunningStale);
  exit = KindOf(model_, a, Status(7, 1, 0, v1::RANK_EXITED));
  EXPECT_EQ(exit.kind, K::kExitHeld);
  EXPECT_FALSE(exit.current);
  EXPECT_FALSE(exit.first_exit);
}

TEST_F(NodeLifeTest, ARankGoneGivesItsShareBackWithTheLastOne) {
  Released r = ReleaseRank(&model_, "a", 7, 1, 0);
  EXPECT_TRUE(r.found);
  EXPECT_FALSE(r.freed);
  ASSERT_EQ(r.changes.size(), 1u);
  const auto* put = std::get_if<store::change::PutHold>(&r.changes[0]);
  ASSERT_NE(put, nullptr);
  EXPECT_EQ(put->hold.allocation.ranks_size(), 1);
  EXPECT_EQ(put->hold.allocation.ranks(0), 1);
  EXPECT_EQ(put->hold.allocation.gpu_indices(0), 0);
  EXPECT_EQ(put->hold.job_id, 7);
  EXPECT_EQ(put->hold.attempt, 1);
  EXPECT_EQ(put->hold.allocation.node(), "a");
  EXPECT_EQ(put->hold.allocation.cpus(), 1);
  EXPECT_EQ(put->hold.allocation.memory_bytes(), 1 << 30);
  EXPECT_EQ(model_.ledger.Capacity("a")->gpu_free, 0b10u);
  // Again: nothing held any more, nothing to record.
  r = ReleaseRank(&model_, "a", 7, 1, 0);
  EXPECT_FALSE(r.found);
  EXPECT_TRUE(r.changes.empty());
  r = ReleaseRank(&model_, "a", 7, 1, 1);
  EXPECT_TRUE(r.found);
  EXPECT_TRUE(r.freed);
  ASSERT_EQ(r.changes.size(), 1u);
  const auto& del = std::get<store::change::DeleteHold>(r.changes[0]);
  EXPECT_EQ(del.node, "a");
  EXPECT_EQ(del.job_id, 7);
  EXPECT_EQ(del.attempt, 1);
  EXPECT_EQ(model_.ledger.Capacity("a")->gpu_free, 0b11u);
  EXPECT_EQ(model_.ledger.FindHold("a", 7, 1), nullptr);
}

TEST_F(NodeLifeTest, ANodeDrainsItselfWhenSeveralJobsFailThere) {
  NodeRecord* a = model_.nodes.Find("a");
  const BadNodePolicy policy{3, absl::Hours(1)};
  store::Changes changes;
  // Not the node's fault: not counted.
  EXPECT_FALSE(CountNodeFailure(a, 1, false, policy, kNow.mono, &changes));
  EXPECT_TRUE(a->early_failures.empty());
  EXPECT_FALSE(CountNodeFailure(a, 1, true, policy, kNow.mono, &changes));
  // The same job again counts once.
  EXPECT_FALSE(CountNodeFailure(a, 1, true, policy, kNow.mono, &changes));
  EXPECT_FALSE(CountNodeFailure(a, 2, true, policy, kNow.mono, &changes));
  EXPECT_TRUE(changes.empty());
  // Exactly the window later they still count...
  NodeRecord copy = *a;
  EXPECT_TRUE(CountNodeFailure(&copy, 3, true, policy,
                               kNow.mono + absl::Hours(1), &changes));
  changes.clear();
  // ...past it the first two are forgotten.
  const absl::Time later = kNow.mono + absl::Hours(1) + absl::Seconds(1);
  EXPECT_FALSE(CountNodeFailure(a, 3, true, policy, later, &changes));
  EXPECT_EQ(a->early_failures.size(), 1u);
  EXPECT_FALSE(CountNodeFailure(a, 4, true, policy, later, &changes));
  // A resume being written is superseded: the drain is the latest word.
  BeginDrain(a, false, "", 9);
  EXPECT_TRUE(CountNodeFailure(a, 5, true, policy, later, &changes));
  EXPECT_TRUE(a->drained);
  EXPECT_FALSE(a->drain_writing.has_value());
  EXPECT_TRUE(a->early_failures.empty());
  EXPECT_NE(a->drain_reason.find("ranks of 3 different jobs (3, 4, 5)"),
            std::string::npos)
      << a->drain_reason;
  EXPECT_NE(a->drain_reason.find("xlctl resume a"), std::string::npos);
  ASSERT_EQ(changes.size(), 1u);
  const auto* put = std::get_if<store::change::PutNode>(&changes[0]);
  ASSERT_NE(put, nullptr);
  EXPECT_TRUE(put->node.drained);
  EXPECT_EQ(put->node.state_reason, a->drain_reason);
  // Drained, or being drained: nothing more counts.
  changes.clear();
  EXPECT_FALSE(CountNodeFailure(a, 6, true, policy, later, &changes));
  EXPECT_TRUE(changes.empty());
  // A policy of 0 jobs never drains.
  NodeRecord* b = model_.nodes.Find("b");
  for (int j = 1; j <= 5; ++j) {
    EXPECT_FALSE(
        CountNodeFailure(b, j, true, {0, absl::Hours(1)}, kNow.mono, &changes));
  }
  EXPECT_FALSE(b->drained);
  BeginDrain(b, true, "by hand", 10);
  for (int j = 1; j <= 5; ++j) {
    EXPECT_FALSE(CountNodeFailure(b, j, true, policy, kNow.mono, &changes));
  }
  EXPECT_TRUE(b->early_failures.empty());
  EXPECT_TRUE(changes.empty());
}

TEST_F(NodeLifeTest, ADrainTakesEffectOnlyOnceRecordedAndTheLatestWins) {
  NodeRecord* a = model_.nodes.Find("a");
  a->early_failures.emplace_back(1, kNow.mono);
  store::Changes changes = BeginDrain(a, true, "bad DIMM", 1);
  // Not yet in the model; the row carries it.
  EXPECT_FALSE(a->drained);
  ASSERT_EQ(changes.size(), 1u);
  const auto& row = std::get<store::change::PutNode>(changes[0]).node;
  EXPECT_TRUE(row.drained);
  EXPECT_EQ(row.state_reason, "bad DIMM");
  // A resume asked for before the drain is recorded: the drain's commit
  // changes nothing, the resume's takes.
  changes = BeginDrain(a, false, "ignored", 2);
  EXPECT_FALSE(std::get<store::change::PutNode>(changes[0]).node.drained);
  EXPECT_EQ(std::get<store::change::PutNode>(changes[0]).node.state_reason, "");
  EXPECT_FALSE(CommitDrain(a, 1));
  EXPECT_FALSE(a->drained);
  EXPECT_TRUE(CommitDrain(a, 2));
  EXPECT_FALSE(a->drain_writing.has_value());
  EXPECT_TRUE(a->early_failures.empty());
  // Drain recorded.
  BeginDrain(a, true, "bad DIMM", 3);
  EXPECT_TRUE(CommitDrain(a, 3));
  EXPECT_TRUE(a->drained);
  EXPECT_EQ(a->drain_reason, "bad DIMM");
  EXPECT_FALSE(CommitDrain(a, 3));  // twice: nothing
  // Resumed: the reason goes with the drain.
  BeginDrain(a, false, "", 4);
  EXPECT_TRUE(CommitDrain(a, 4));
  EXPECT_FALSE(a->drained);
  EXPECT_EQ(a->drain_reason, "");
}

TEST_F(NodeLifeTest, ANodeSpeaksOnlyForRanksThatRanThere) {
  const NodeRecord& a = *model_.nodes.Find("a");
  const NodeRecord& b = *model_.nodes.Find("b");
  EXPECT_TRUE(RankWasOnNode(model_, a, *rec_, 1, 0));
  EXPECT_TRUE(RankWasOnNode(model_, a, *rec_, 1, 1));
  EXPECT_FALSE(RankWasOnNode(model_, a, *rec_, 1, 2));
  EXPECT_TRUE(RankWasOnNode(model_, b, *rec_, 1, 3));
  EXPECT_FALSE(RankWasOnNode(model_, a, *rec_, 2, 0));
  // Rank 0 gone, rank 1 still runs: late output of rank 0 is still its.
  ReleaseRank(&model_, "a", 7, 1, 0);
  EXPECT_TRUE(RankWasOnNode(model_, a, *rec_, 1, 0));
  // Every rank gone from a: its hold is gone, the allocation still says.
  ReleaseRank(&model_, "a", 7, 1, 1);
  ASSERT_EQ(model_.ledger.FindHold("a", 7, 1), nullptr);
  EXPECT_TRUE(RankWasOnNode(model_, a, *rec_, 1, 0));
  EXPECT_FALSE(RankWasOnNode(model_, a, *rec_, 1, 3));
  // A later attempt: the old one's output from a is refused.
  rec_->job.set_attempt(2);
  EXPECT_FALSE(RankWasOnNode(model_, a, *rec_, 1, 0));
}

TEST_F(NodeLifeTest, AnExitWaitsForTheOutputItSaysItWrote) {
  v1::RankStatus exit = Status(7, 1, 0, v1::RANK_EXITED);
  exit.set_stdout_bytes(100);
  exit.set_stderr_bytes(5);
  EXPECT_TRUE(OutputBehind(*rec_, exit));
  rec_->log_ends_attempt = 1;
  rec_->log_ends[{0, v1::STDOUT}] = 100;
  EXPECT_TRUE(OutputBehind(*rec_, exit));  // stderr still behind
  rec_->log_ends[{0, v1::STDERR}] = 5;
  EXPECT_FALSE(OutputBehind(*rec_, exit));
  // Another rank's output is not this one's.
  v1::RankStatus other = exit;
  other.set_rank(1);
  EXPECT_TRUE(OutputBehind(*rec_, other));
  // What was stored is of another attempt: nothing of this one is.
  rec_->log_ends_attempt = 2;
  EXPECT_TRUE(OutputBehind(*rec_, exit));
  // A rank that never started wrote nothing to wait for.
  exit.set_state(v1::RANK_FAILED_TO_START);
  EXPECT_FALSE(OutputBehind(*rec_, exit));
}

}  // namespace
}  // namespace xl::state
