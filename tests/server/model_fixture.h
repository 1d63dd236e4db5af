// A model for the unit tests of state/'s functions: nodes "a" and "b" (2
// GPUs, 8 CPUs, 64 GiB each, agents connected) and job 7 of alice, pending
// as attempt 1 on 2 nodes x 1 GPU, loaded as a restart would load them.
#ifndef XL_TESTS_SERVER_MODEL_FIXTURE_H_
#define XL_TESTS_SERVER_MODEL_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>

#include "server/state/lifecycle.h"
#include "server/state/model.h"

namespace xl::state::testing {

class NullConnection : public AgentConnection {
 public:
  bool Send(const v1::SchedulerMessage&) override { return true; }
  void Close(const std::string&) override {}
  std::string PeerAddress() const override { return "10.0.0.9"; }
};

inline const Now kNow{absl::FromUnixSeconds(1'000'000),
                      absl::FromUnixSeconds(500)};

inline store::StoredNode TwoGpuNode(const std::string& name) {
  store::StoredNode n;
  n.name = name;
  n.inventory.set_hostname(name);
  n.inventory.set_address(name + ".cluster:7071");
  n.inventory.set_cpus(8);
  n.inventory.set_memory_bytes(64ll << 30);
  for (int i = 0; i < 2; ++i) {
    auto* g = n.inventory.add_gpus();
    g->set_index(i);
    g->set_memory_bytes(80ll << 30);
  }
  return n;
}

// How many of `changes` are a T.
template <typename T>
int Count(const store::Changes& changes) {
  int n = 0;
  for (const auto& c : changes) n += std::holds_alternative<T>(c) ? 1 : 0;
  return n;
}

class ModelTest : public ::testing::Test {
 protected:
  explicit ModelTest(int ranks_per_node, int max_retries = 0)
      : model_(29500, 1000) {
    store::StoredState s;
    s.nodes = {TwoGpuNode("a"), TwoGpuNode("b")};
    v1::Job job;
    job.set_id("7");
    job.set_user("alice");
    job.set_state(v1::PENDING);
    job.set_attempt(1);
    auto* res = job.mutable_spec()->mutable_resources();
    res->set_nodes(2);
    res->set_gpus_per_node(1);
    res->set_ranks_per_node(ranks_per_node);
    job.mutable_spec()->set_max_retries(max_retries);
    s.jobs.push_back(job);
    v1::JobEvent submitted;
    submitted.set_job_id("7");
    submitted.set_seq(1);
    submitted.set_to_state(v1::PENDING);
    s.events.push_back(submitted);
    s.last_job_id = 7;
    Model::LoadClock clock;
    clock.now_wall = kNow.wall;
    clock.now_mono = kNow.mono;
    model_.Load(&s, clock);
    for (const char* n : {"a", "b"}) {
      model_.nodes.Find(n)->conn = std::make_shared<NullConnection>();
    }
    rec_ = model_.jobs.Find(7);
  }

  // GPU 0 of a and GPU 1 of b.
  static scheduler::Placement OnAAndB() {
    scheduler::Placement p;
    p.shares.push_back({"a", {0}, 1, 1 << 30, 0, 0});
    p.shares.push_back({"b", {1}, 1, 1 << 30, 0, 0});
    return p;
  }

  Step Started() {
    auto step = Start(&model_, rec_, OnAAndB(), "tok", kNow);
    EXPECT_TRUE(step.ok()) << step.status();
    return step.ok() ? *std::move(step) : Step{};
  }

  Model model_;
  JobRecord* rec_ = nullptr;
};

}  // namespace xl::state::testing

#endif  // XL_TESTS_SERVER_MODEL_FIXTURE_H_
