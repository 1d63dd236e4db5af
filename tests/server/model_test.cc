// state::Model::Load: the model as the store has it, alone (no controller,
// no store): jobs with their committed state, events, tokens, output sizes
// and the ranks that exited; active jobs' running time and master ports;
// holds taking their nodes' resources; queues, their changes and decayed
// usage; agents' connections kept across a reload.
#include "server/state/model.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "common/duration.h"

namespace xl::state {
namespace {

class NoConnection : public AgentConnection {
 public:
  bool Send(const v1::SchedulerMessage&) override { return true; }
  void Close(const std::string&) override {}
  std::string PeerAddress() const override { return "10.0.0.1"; }
};

const absl::Time kWall = absl::FromUnixSeconds(1'000'000);
const absl::Time kMono = absl::FromUnixSeconds(500);

store::StoredNode Node(const std::string& name, int gpus) {
  store::StoredNode n;
  n.name = name;
  n.inventory.set_hostname(name);
  n.inventory.set_address("10.0.0.1:7071");
  n.inventory.set_cpus(8);
  n.inventory.set_memory_bytes(64ll << 30);
  for (int i = 0; i < gpus; ++i) {
    auto* g = n.inventory.add_gpus();
    g->set_index(i);
    g->set_memory_bytes(80ll << 30);
  }
  return n;
}

// Node "a" with 2 GPUs; job 3 running attempt 2 there on GPU 0 for 100 s,
// its rank 1 exited; job 5 finished; job ids given up to 7; a queue with
// two changes and usage stored an hour-long half-life ago.
store::StoredState State() {
  store::StoredState s;
  s.last_job_id = 7;
  s.nodes.push_back(Node("a", 2));
  v1::Job running;
  running.set_id("3");
  running.set_user("alice");
  running.set_state(v1::RUNNING);
  running.set_attempt(2);
  running.set_world_size(2);
  running.set_master_addr("10.0.0.1");
  running.set_master_port(29500);
  *running.mutable_start_time() = ToProtoTime(kWall - absl::Seconds(100));
  auto* exit = running.add_rank_exits();
  exit->set_rank(1);
  auto* alloc = running.add_allocations();
  alloc->set_node("a");
  alloc->add_ranks(0);
  alloc->add_ranks(1);
  alloc->add_gpu_indices(0);
  s.jobs.push_back(running);
  v1::Job done;
  done.set_id("5");
  done.set_state(v1::SUCCEEDED);
  s.jobs.push_back(done);
  for (int seq : {1, 2}) {
    v1::JobEvent e;
    e.set_job_id("3");
    e.set_seq(seq);
    s.events.push_back(e);
  }
  s.tokens[3] = "token-3";
  s.log_bytes[3] = 1000;
  s.metrics_bytes[3] = 200;
  s.log_ends[{3, 1, 0, 0}] = 99;  // the previous attempt's: not kept
  s.log_ends[{3, 2, 0, 0}] = 40;
  s.log_ends[{3, 2, 1, 1}] = 7;
  store::StoredHold hold;
  hold.job_id = 3;
  hold.attempt = 2;
  hold.allocation = *alloc;
  hold.allocation.clear_ranks();
  hold.allocation.add_ranks(0);  // rank 1 is gone
  s.holds.push_back(hold);
  // An older attempt's hold on a node the store has no row for.
  store::StoredHold old;
  old.job_id = 3;
  old.attempt = 1;
  old.allocation.set_node("b");
  old.allocation.add_ranks(0);
  s.holds.push_back(old);
  v1::Queue q;
  q.mutable_spec()->set_name("research");
  q.set_version(2);
  s.queues.push_back(q);
  for (int seq : {1, 2}) {
    v1::QueueChange c;
    c.set_seq(seq);
    c.set_queue("research");
    s.queue_changes.push_back(c);
  }
  s.usage.push_back({"research", "", 1000, kWall - absl::Hours(1)});
  s.usage.push_back({"research", "alice", 400, kWall - absl::Hours(1)});
  return s;
}

Model::LoadClock Clock() {
  Model::LoadClock clock;
  clock.now_wall = kWall;
  clock.now_mono = kMono;
  clock.reconnect_grace = absl::Seconds(30);
  clock.usage_half_life = absl::Hours(1);
  return clock;
}

TEST(ModelTest, LoadGivesTheJobsAsStored) {
  Model model(29500, 2);
  store::StoredState state = State();
  model.Load(&state, Clock());
  EXPECT_EQ(model.jobs.TakeId(), 8) << "ids given before are never given again";
  JobRecord* rec = model.jobs.Find(3);
  ASSERT_NE(rec, nullptr);
  ASSERT_NE(rec->committed, nullptr);
  EXPECT_EQ(rec->committed->state(), v1::RUNNING);
  EXPECT_EQ(rec->events.size(), 2u);
  EXPECT_EQ(rec->committed_event_seq, 2);
  EXPECT_EQ(rec->token, "token-3");
  EXPECT_EQ(rec->log_bytes, 1000);
  EXPECT_EQ(rec->metrics_bytes, 200);
  // Only the current attempt's output ends count.
  EXPECT_EQ(rec->log_ends_attempt, 2);
  EXPECT_EQ(rec->log_ends.size(), 2u);
  EXPECT_EQ((rec->log_ends[{0, 0}]), 40);
  EXPECT_EQ((rec->log_ends[{1, 1}]), 7);
  // The exit is known: it is not waited for again.
  ASSERT_EQ(rec->ranks.count(1), 1u);
  EXPECT_EQ(rec->ranks[1].state(), v1::RANK_EXITED);
  EXPECT_EQ(rec->ranks_succeeded, 1);
  // Its running time before the restart comes from the wall clock.
  EXPECT_EQ(kMono - rec->start_mono, absl::Seconds(100));
  EXPECT_EQ(model.jobs.active().count(3), 1u);
  ASSERT_NE(model.jobs.Find(5), nullptr);
  EXPECT_EQ(model.jobs.active().count(5), 0u);
}

TEST(ModelTest, LoadTakesWhatRunsFromTheNodes) {
  Model model(29500, 2);
  store::StoredState state = State();
  model.Load(&state, Clock());
  // The running attempt's port stays taken: the next one is the other.
  EXPECT_EQ(model.ports.Allocate("10.0.0.1"), 29501);
  const Hold* hold = model.ledger.FindHold("a", 3, 2);
  ASSERT_NE(hold, nullptr);
  EXPECT_EQ(hold->live_ranks, (std::set<int>{0}));
  // Every rank it ran there, for accepting their late output.
  EXPECT_EQ(hold->all_ranks, (std::vector<int>{0, 1}));
  const scheduler::NodeCapacity* free = model.ledger.Capacity("a");
  ASSERT_NE(free, nullptr);
  EXPECT_EQ(free->gpu_free, 0b10u) << "GPU 0 is held";
  // Nobody is lost for the scheduler's downtime.
  const NodeRecord* a = model.nodes.Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->last_heartbeat_mono, kMono + absl::Seconds(30));
  // A hold on a node with no row: the node is known (its ranks may still
  // run) and waits for its agent like the others.
  const NodeRecord* b = model.nodes.Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->last_heartbeat_mono, kMono + absl::Seconds(30));
  EXPECT_NE(model.ledger.FindHold("b", 3, 1), nullptr);
}

TEST(ModelTest, LoadGivesQueuesTheirChangesAndDecayedUsage) {
  Model model(29500, 2);
  store::StoredState state = State();
  model.Load(&state, Clock());
  ASSERT_EQ(model.queues.count("research"), 1u);
  EXPECT_EQ(model.queue_changes.size(), 2u);
  EXPECT_EQ(model.next_queue_change_seq, 3);
  // Stored an hour (one half-life) ago: half of it is left, dated now.
  EXPECT_NEAR(model.queue_usage["research"].value, 500, 1e-6);
  EXPECT_EQ(model.queue_usage["research"].as_of, kWall);
  EXPECT_NEAR((model.user_usage[{"research", "alice"}].value), 200, 1e-6);
}

TEST(ModelTest, AReloadReplacesEverythingButKeepsConnections) {
  Model model(29500, 2);
  store::StoredState state = State();
  model.Load(&state, Clock());
  auto conn = std::make_shared<NoConnection>();
  model.nodes.Find("a")->conn = conn;
  model.nodes.Find("a")->drained = true;  // not on disk
  model.queue_usage["gone"].value = 5;
  // The store now has only node "a" and job 5.
  store::StoredState smaller;
  smaller.last_job_id = 7;
  smaller.nodes.push_back(Node("a", 2));
  v1::Job done;
  done.set_id("5");
  done.set_state(v1::SUCCEEDED);
  smaller.jobs.push_back(done);
  model.Load(&smaller, Clock());
  EXPECT_EQ(model.jobs.Find(3), nullptr);
  EXPECT_TRUE(model.jobs.active().empty());
  EXPECT_EQ(model.nodes.Find("b"), nullptr);
  EXPECT_EQ(model.ledger.FindHold("a", 3, 2), nullptr);
  EXPECT_EQ(model.ledger.Capacity("a")->gpu_free, 0b11u);
  EXPECT_FALSE(model.nodes.Find("a")->drained) << "the disk's word";
  EXPECT_EQ(model.nodes.Find("a")->conn, conn);
  EXPECT_TRUE(model.queues.empty());
  EXPECT_TRUE(model.queue_usage.empty());
  EXPECT_EQ(model.next_queue_change_seq, 1);
  // The port of the job that is gone is free again: both ports are given.
  std::set<int> ports = {model.ports.Allocate("10.0.0.1"),
                         model.ports.Allocate("10.0.0.1")};
  EXPECT_EQ(ports, (std::set<int>{29500, 29501}));
}

}  // namespace
}  // namespace xl::state
