// The pure scheduling core: gang placement, each resource check, no
// overcommit, priority then FIFO, topology and the reasons of waiting jobs.
#include "server/scheduler/placement.h"

#include <gtest/gtest.h>

#include <map>

#include "server/scheduler/job_spec.h"

namespace xl::scheduler {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

v1::NodeInventory Inventory(int gpus, uint64_t gpu_mem = 80 * kGiB,
                            const std::string& model = "NVIDIA H100 80GB HBM3",
                            const std::string& sw = "s1") {
  v1::NodeInventory inv;
  inv.set_cpus(32);
  inv.set_memory_bytes(256 * kGiB);
  (*inv.mutable_labels())["switch"] = sw;
  (*inv.mutable_labels())["rack"] = "r1";
  for (int i = 0; i < gpus; ++i) {
    auto* g = inv.add_gpus();
    g->set_index(i);
    g->set_model(model);
    g->set_memory_bytes(gpu_mem);
  }
  auto* d = inv.add_nvme();
  d->set_device("nvme0n1");
  d->set_free_bytes(1000 * kGiB);
  auto* nic = inv.add_nics();
  nic->set_name("eth0");
  nic->set_kind(v1::ETHERNET);
  nic->set_gbps(100);
  return inv;
}

std::vector<NodeCapacity> Fleet(int nodes, int gpus) {
  std::vector<NodeCapacity> out;
  for (int i = 0; i < nodes; ++i) {
    out.push_back(NodeCapacity::Empty("n" + std::to_string(i), Inventory(gpus)));
  }
  return out;
}

JobRequest Job(const std::string& id, int nodes, int gpus, int prio = 0,
               int64_t seq = 0) {
  JobRequest j;
  j.job_id = id;
  j.priority = prio;
  j.submit_seq = seq;
  j.resources.set_nodes(nodes);
  j.resources.set_gpus_per_node(gpus);
  j.resources.set_ranks_per_node(gpus > 0 ? gpus : 1);
  return j;
}

TEST(PlacementTest, GangStartsOnlyWhenAllNodesFit) {
  auto fleet = Fleet(2, 2);
  fleet[1].gpu_free[0] = false;  // one node has only 1 free GPU
  Decisions d = Schedule(fleet, {Job("a", 2, 2)});
  EXPECT_TRUE(d.starts.empty());
  ASSERT_EQ(d.waiting.count("a"), 1u);
  EXPECT_NE(d.waiting["a"].find("1 fits now"), std::string::npos)
      << d.waiting["a"];
  EXPECT_NE(d.waiting["a"].find("1 of 2 matching GPUs free, needs 2"),
            std::string::npos)
      << d.waiting["a"];

  fleet[1].gpu_free[0] = true;
  d = Schedule(fleet, {Job("a", 2, 2)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].second.shares.size(), 2u);
  for (const auto& s : d.starts[0].second.shares) {
    EXPECT_EQ(s.gpu_indices.size(), 2u);
  }
}

TEST(PlacementTest, NoOvercommitAcrossManyJobs) {
  auto fleet = Fleet(3, 8);
  std::vector<JobRequest> queue;
  for (int i = 0; i < 20; ++i) queue.push_back(Job("j" + std::to_string(i), 1 + i % 2, 3, 0, i));
  Decisions d = Schedule(fleet, queue);
  std::map<std::string, std::set<int>> used;
  for (const auto& [id, p] : d.starts) {
    for (const auto& s : p.shares) {
      for (int g : s.gpu_indices) {
        EXPECT_TRUE(used[s.node].insert(g).second)
            << "GPU " << g << " of " << s.node << " given twice";
      }
    }
  }
  int total = 0;
  for (auto& [n, g] : used) total += g.size();
  EXPECT_LE(total, 24);
  // 3 GPUs per job per node: at most 2 jobs fit on an 8-GPU node.
  for (auto& [n, g] : used) EXPECT_LE(g.size(), 6u);
  EXPECT_EQ(d.starts.size() + d.waiting.size(), 20u);
  EXPECT_FALSE(d.waiting.empty());
}

TEST(PlacementTest, EveryResourceIsChecked) {
  auto node = NodeCapacity::Empty("n", Inventory(2, 40 * kGiB, "NVIDIA A100-SXM4-40GB"));
  v1::ResourceRequest r;
  r.set_nodes(1);
  r.set_gpus_per_node(1);
  NodeShare share;
  EXPECT_EQ(FitOnNode(node, r, &share), "");

  auto want = [&](auto mutate, const std::string& expect) {
    v1::ResourceRequest req = r;
    mutate(&req);
    std::string why = FitOnNode(node, req, nullptr);
    EXPECT_NE(why.find(expect), std::string::npos) << why;
  };
  want([](v1::ResourceRequest* q) { q->set_gpus_per_node(3); }, "has 2 GPUs, needs 3");
  want([](v1::ResourceRequest* q) { q->set_min_gpu_memory_bytes(80 * kGiB); },
       "has 0 matching GPUs, needs 1");
  want([](v1::ResourceRequest* q) { q->add_gpu_models("NVIDIA H100 80GB HBM3"); },
       "has 0 matching GPUs");
  want([](v1::ResourceRequest* q) { q->set_cpus_per_node(64); }, "32 CPUs free, needs 64");
  want([](v1::ResourceRequest* q) { q->set_memory_bytes_per_node(512 * kGiB); },
       "256 GiB memory free, needs 512 GiB");
  want([](v1::ResourceRequest* q) { q->set_nvme_bytes_per_node(2000 * kGiB); },
       "NVMe free, needs");
  want([](v1::ResourceRequest* q) { q->set_nic_gbps_per_node(200); },
       "100 Gbit/s NIC free, needs 200");
  node.unavailable = "drained";
  want([](v1::ResourceRequest*) {}, "drained");
}

TEST(PlacementTest, ConsumedResourcesAreNotGivenAgain) {
  auto fleet = Fleet(1, 0);
  JobRequest a = Job("a", 1, 0, 0, 1);
  a.resources.set_cpus_per_node(20);
  a.resources.set_nvme_bytes_per_node(600 * kGiB);
  a.resources.set_nic_gbps_per_node(60);
  JobRequest b = a;
  b.job_id = "b";
  b.submit_seq = 2;
  Decisions d = Schedule(fleet, {a, b});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "a");
  EXPECT_NE(d.waiting["b"].find("12 CPUs free, needs 20"), std::string::npos)
      << d.waiting["b"];
}

TEST(PlacementTest, PriorityThenFifo) {
  auto fleet = Fleet(1, 1);
  Decisions d = Schedule(fleet, {Job("old", 1, 1, 0, 1), Job("new", 1, 1, 0, 2)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "old");
  d = Schedule(fleet, {Job("old", 1, 1, 0, 1), Job("urgent", 1, 1, 5, 3)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "urgent");
}

TEST(PlacementTest, SmallJobsRunBesideABlockedBigOne) {
  auto fleet = Fleet(2, 2);
  Decisions d = Schedule(fleet, {Job("big", 3, 2, 0, 1), Job("small", 1, 1, 0, 2)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "small");
  EXPECT_NE(d.waiting["big"].find("the fleet has only 2 such nodes of 2 even when idle"),
            std::string::npos)
      << d.waiting["big"];
}

TEST(PlacementTest, NodesShareGpusBetweenJobs) {
  auto fleet = Fleet(1, 8);
  Decisions d = Schedule(fleet, {Job("a", 1, 4, 0, 1), Job("b", 1, 4, 0, 2)});
  ASSERT_EQ(d.starts.size(), 2u);
  EXPECT_EQ(d.starts[0].second.shares[0].gpu_indices,
            (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(d.starts[1].second.shares[0].gpu_indices,
            (std::vector<int32_t>{4, 5, 6, 7}));
}

TEST(PlacementTest, PrefersOneSwitchAndOrdersTheRing) {
  std::vector<NodeCapacity> fleet;
  fleet.push_back(NodeCapacity::Empty("a", Inventory(1, 80 * kGiB, "m", "s2")));
  fleet.push_back(NodeCapacity::Empty("b", Inventory(1, 80 * kGiB, "m", "s1")));
  fleet.push_back(NodeCapacity::Empty("c", Inventory(1, 80 * kGiB, "m", "s2")));
  fleet.push_back(NodeCapacity::Empty("d", Inventory(1, 80 * kGiB, "m", "s3")));
  fleet.push_back(NodeCapacity::Empty("e", Inventory(1, 80 * kGiB, "m", "s3")));
  fleet.push_back(NodeCapacity::Empty("f", Inventory(1, 80 * kGiB, "m", "s3")));
  Decisions d = Schedule(fleet, {Job("j", 2, 1)});
  ASSERT_EQ(d.starts.size(), 1u);
  // s2 has exactly 2 nodes: the best fit, leaving s3's three together.
  EXPECT_EQ(d.starts[0].second.shares[0].node, "a");
  EXPECT_EQ(d.starts[0].second.shares[1].node, "c");
  // 4 nodes cannot share a switch: ring order groups them by switch.
  d = Schedule(fleet, {Job("k", 4, 1)});
  ASSERT_EQ(d.starts.size(), 1u);
  std::vector<std::string> order;
  for (auto& s : d.starts[0].second.shares) order.push_back(s.node);
  EXPECT_EQ(order, (std::vector<std::string>{"b", "a", "c", "d"}));
}

TEST(PlacementTest, RingOrderPutsFasterNicsFirstWithinARack) {
  std::vector<NodeCapacity> fleet;
  for (auto [name, gbps] : {std::pair<const char*, double>{"a", 100},
                            {"b", 400}, {"c", 200}}) {
    auto inv = Inventory(1);
    inv.mutable_nics(0)->set_gbps(gbps);
    fleet.push_back(NodeCapacity::Empty(name, inv));
  }
  Decisions d = Schedule(fleet, {Job("j", 3, 1)});
  ASSERT_EQ(d.starts.size(), 1u);
  std::vector<std::string> order;
  for (auto& s : d.starts[0].second.shares) order.push_back(s.node);
  EXPECT_EQ(order, (std::vector<std::string>{"b", "c", "a"}));
}

TEST(PlacementTest, EmptyFleetSaysSo) {
  Decisions d = Schedule({}, {Job("a", 1, 0)});
  EXPECT_NE(d.waiting["a"].find("no node is registered"), std::string::npos);
}

TEST(JobSpecTest, ErrorsNameTheField) {
  auto check = [](auto mutate, const std::string& field) {
    v1::JobSpec spec;
    spec.add_command("/bin/true");
    mutate(&spec);
    absl::Status st = ValidateJobSpec(&spec);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_EQ(st.message().substr(0, field.size()), field) << st.message();
  };
  check([](v1::JobSpec* s) { s->clear_command(); }, "command");
  check([](v1::JobSpec* s) { s->mutable_resources()->set_nodes(-1); }, "resources.nodes");
  check([](v1::JobSpec* s) { s->mutable_resources()->set_gpus_per_node(-2); },
        "resources.gpus_per_node");
  check([](v1::JobSpec* s) { (*s->mutable_env())["RANK"] = "3"; }, "env.RANK");
  check([](v1::JobSpec* s) { (*s->mutable_env())["1X"] = "3"; }, "env.1X");
  check([](v1::JobSpec* s) { s->set_max_retries(-1); }, "max_retries");
  check([](v1::JobSpec* s) { s->set_queue("no spaces"); }, "queue");
  check([](v1::JobSpec* s) { s->mutable_time_limit()->set_seconds(-5); }, "time_limit");
  check([](v1::JobSpec* s) { s->set_working_dir("rel/dir"); }, "working_dir");

  v1::JobSpec ok;
  ok.add_command("/bin/true");
  ok.mutable_resources()->set_gpus_per_node(4);
  ASSERT_TRUE(ValidateJobSpec(&ok).ok());
  EXPECT_EQ(ok.queue(), "default");
  EXPECT_EQ(ok.resources().nodes(), 1);
  EXPECT_EQ(ok.resources().ranks_per_node(), 4);
  EXPECT_EQ(ok.grace_period().seconds(), 10);
}

}  // namespace
}  // namespace xl::scheduler
