// The pure scheduling core: gang placement, each resource check, no
// overcommit, priority then FIFO, topology and the reasons of waiting jobs;
// and random fleets and queues checked against a plain reference of the
// same policy (one node and one job at a time).
#include "server/scheduler/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "server/scheduler/job_spec.h"
#include "server/scheduler/schedule.h"

namespace xl::scheduler {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

using RequestPtr = std::shared_ptr<const v1::ResourceRequest>;

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
    out.push_back(
        NodeCapacity::Empty("n" + std::to_string(i), Inventory(gpus)));
  }
  return out;
}

ClusterSnapshot Snap(std::vector<NodeCapacity> nodes) {
  ClusterSnapshot s;
  s.nodes = std::move(nodes);
  return s;
}

RequestPtr Request(int nodes, int gpus) {
  auto r = std::make_shared<v1::ResourceRequest>();
  r->set_nodes(nodes);
  r->set_gpus_per_node(gpus);
  r->set_ranks_per_node(gpus > 0 ? gpus : 1);
  return r;
}

JobRequest Job(const std::string& id, RequestPtr req, int prio = 0,
               int64_t seq = 0) {
  JobRequest j;
  j.job_id = id;
  j.priority = prio;
  j.submit_seq = seq;
  j.resources = std::move(req);
  return j;
}

JobRequest Job(const std::string& id, int nodes, int gpus, int prio = 0,
               int64_t seq = 0) {
  return Job(id, Request(nodes, gpus), prio, seq);
}

// The reason `id` waits for, or "(not waiting)".
std::string Reason(const Decisions& d, const std::string& id) {
  for (const auto& [job, reason] : d.waiting) {
    if (job == id) return *reason;
  }
  return "(not waiting)";
}

std::vector<std::string> NodesOf(const Placement& p) {
  std::vector<std::string> out;
  for (const auto& s : p.shares) out.push_back(s.node);
  return out;
}

TEST(PlacementTest, GangStartsOnlyWhenAllNodesFit) {
  auto fleet = Fleet(2, 2);
  fleet[1].gpu_free &= ~uint64_t{1};  // one node has only 1 free GPU
  Decisions d = Schedule(Snap(fleet), {Job("a", 2, 2)});
  EXPECT_TRUE(d.starts.empty());
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_NE(Reason(d, "a").find("1 fits now"), std::string::npos)
      << Reason(d, "a");
  EXPECT_NE(Reason(d, "a").find("1 of 2 matching GPUs free, needs 2"),
            std::string::npos)
      << Reason(d, "a");

  fleet[1].gpu_free |= 1;
  d = Schedule(Snap(fleet), {Job("a", 2, 2)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].second.shares.size(), 2u);
  for (const auto& s : d.starts[0].second.shares) {
    EXPECT_EQ(s.gpu_indices.size(), 2u);
  }
}

TEST(PlacementTest, NoOvercommitAcrossManyJobs) {
  auto fleet = Fleet(3, 8);
  std::vector<JobRequest> queue;
  for (int i = 0; i < 20; ++i)
    queue.push_back(Job("j" + std::to_string(i), 1 + i % 2, 3, 0, i));
  Decisions d = Schedule(Snap(fleet), queue);
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
  auto node = NodeCapacity::Empty(
      "n", Inventory(2, 40 * kGiB, "NVIDIA A100-SXM4-40GB"));
  v1::ResourceRequest r;
  r.set_nodes(1);
  r.set_gpus_per_node(1);
  NodeShare share;
  EXPECT_EQ(FitOnNode(node, r, &share), "");
  EXPECT_EQ(share.node, "n");
  EXPECT_EQ(share.gpu_indices, (std::vector<int32_t>{0}));

  auto want = [&](auto mutate, const std::string& expect) {
    v1::ResourceRequest req = r;
    mutate(&req);
    std::string why = FitOnNode(node, req, nullptr);
    EXPECT_NE(why.find(expect), std::string::npos) << why;
  };
  want([](v1::ResourceRequest* q) { q->set_gpus_per_node(3); },
       "has 2 GPUs, needs 3");
  want([](v1::ResourceRequest* q) { q->set_min_gpu_memory_bytes(80 * kGiB); },
       "has 0 matching GPUs, needs 1");
  want(
      [](v1::ResourceRequest* q) {
        q->add_gpu_models("NVIDIA H100 80GB HBM3");
      },
      "has 0 matching GPUs");
  want([](v1::ResourceRequest* q) { q->set_cpus_per_node(64); },
       "32 CPUs free, needs 64");
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
  auto req = std::make_shared<v1::ResourceRequest>(*Request(1, 0));
  req->set_cpus_per_node(20);
  req->set_nvme_bytes_per_node(600 * kGiB);
  req->set_nic_gbps_per_node(60);
  Decisions d =
      Schedule(Snap(fleet), {Job("a", req, 0, 1), Job("b", req, 0, 2)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "a");
  EXPECT_NE(Reason(d, "b").find("12 CPUs free, needs 20"), std::string::npos)
      << Reason(d, "b");
}

TEST(PlacementTest, PriorityThenFifo) {
  auto fleet = Fleet(1, 1);
  Decisions d =
      Schedule(Snap(fleet), {Job("old", 1, 1, 0, 1), Job("new", 1, 1, 0, 2)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "old");
  d = Schedule(Snap(fleet),
               {Job("old", 1, 1, 0, 1), Job("urgent", 1, 1, 5, 3)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "urgent");
}

TEST(PlacementTest, SmallJobsRunBesideABlockedBigOne) {
  auto fleet = Fleet(2, 2);
  Decisions d =
      Schedule(Snap(fleet), {Job("big", 3, 2, 0, 1), Job("small", 1, 1, 0, 2)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "small");
  EXPECT_NE(Reason(d, "big").find(
                "the fleet has only 2 such nodes of 2 even when idle"),
            std::string::npos)
      << Reason(d, "big");
}

TEST(PlacementTest, NodesShareGpusBetweenJobs) {
  auto fleet = Fleet(1, 8);
  Decisions d =
      Schedule(Snap(fleet), {Job("a", 1, 4, 0, 1), Job("b", 1, 4, 0, 2)});
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
  Decisions d = Schedule(Snap(fleet), {Job("j", 2, 1)});
  ASSERT_EQ(d.starts.size(), 1u);
  // s2 has exactly 2 nodes: the best fit, leaving s3's three together.
  EXPECT_EQ(NodesOf(d.starts[0].second), (std::vector<std::string>{"a", "c"}));
  // 4 nodes cannot share a switch: ring order groups them by switch.
  d = Schedule(Snap(fleet), {Job("k", 4, 1)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(NodesOf(d.starts[0].second),
            (std::vector<std::string>{"b", "a", "c", "d"}));
  // PlaceGang alone answers the same.
  Placement p;
  std::string why;
  ASSERT_TRUE(PlaceGang(fleet, *Request(2, 1), &p, &why));
  EXPECT_EQ(NodesOf(p), (std::vector<std::string>{"a", "c"}));
  EXPECT_FALSE(PlaceGang(fleet, *Request(7, 1), &p, &why));
  EXPECT_EQ(why,
            "needs 7 nodes x (1 GPU); the fleet has only 6 such nodes of 6 "
            "even when idle, so it cannot start until nodes are added (or "
            "shrink the request); 6 fit now");
}

TEST(PlacementTest, RingOrderPutsFasterNicsFirstWithinARack) {
  std::vector<NodeCapacity> fleet;
  for (auto [name, gbps] :
       {std::pair<const char*, double>{"a", 100}, {"b", 400}, {"c", 200}}) {
    auto inv = Inventory(1);
    inv.mutable_nics(0)->set_gbps(gbps);
    fleet.push_back(NodeCapacity::Empty(name, inv));
  }
  Decisions d = Schedule(Snap(fleet), {Job("j", 3, 1)});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(NodesOf(d.starts[0].second),
            (std::vector<std::string>{"b", "c", "a"}));
}

TEST(PlacementTest, EmptyFleetSaysSo) {
  Decisions d = Schedule({}, {Job("a", 1, 0)});
  EXPECT_NE(Reason(d, "a").find("no node is registered"), std::string::npos);
}

TEST(PlacementTest, ReasonWordsAreExact) {
  Decisions d = Schedule(Snap(Fleet(3, 2)), {Job("a", 5, 2)});
  EXPECT_EQ(Reason(d, "a"),
            "needs 5 nodes x (2 GPUs); the fleet has only 3 such nodes of 3 "
            "even when idle, so it cannot start until nodes are added (or "
            "shrink the request); 3 fit now");

  // Nodes short of the same thing are named once: four names, then a count.
  auto fleet = Fleet(8, 2);
  for (int i = 2; i < 7; ++i) fleet[i].gpu_free = 1;
  fleet[7].unavailable = "drained";
  d = Schedule(Snap(fleet), {Job("b", 3, 2)});
  EXPECT_EQ(Reason(d, "b"),
            "needs 3 nodes x (2 GPUs); 2 fit now; n2, n3, n4, n5 and 1 more: "
            "1 of 2 matching GPUs free, needs 2; n7: drained");

  // Different numbers that read the same make one group, its nodes named in
  // snapshot order.
  fleet = Fleet(6, 0);
  for (int i : {0, 3, 4}) fleet[i].memory_free = 200 * kGiB + 10 * (1 << 20);
  for (int i : {1, 2}) fleet[i].memory_free = 200 * kGiB + 40 * (1 << 20);
  fleet[5].memory_free = 200 * kGiB;
  auto big = std::make_shared<v1::ResourceRequest>(*Request(1, 0));
  big->set_memory_bytes_per_node(210 * kGiB);
  d = Schedule(Snap(fleet), {Job("c", big)});
  EXPECT_EQ(Reason(d, "c"),
            "needs 1 node x (210 GiB memory); 0 fit now; n5: 200 GiB memory "
            "free, needs 210 GiB; n0, n1, n2, n3 and 1 more: 200.0 GiB memory "
            "free, needs 210 GiB");
}

// A class's nodes were found before another class took GPUs from them: the
// class must see that and go elsewhere.
TEST(PlacementTest, AClassSeesWhatOtherClassesTook) {
  auto fleet = Fleet(2, 4);
  Decisions d = Schedule(Snap(fleet), {Job("x1", 1, 1, 9), Job("y", 1, 3, 8),
                                       Job("x2", 1, 1, 7), Job("x3", 1, 1, 6)});
  ASSERT_EQ(d.starts.size(), 4u);
  EXPECT_EQ(d.starts[0].second.shares[0].node, "n0");
  EXPECT_EQ(d.starts[1].second.shares[0].node, "n0");
  EXPECT_EQ(d.starts[1].second.shares[0].gpu_indices,
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d.starts[2].second.shares[0].node, "n1");
  EXPECT_EQ(d.starts[2].second.shares[0].gpu_indices,
            (std::vector<int32_t>{0}));
  EXPECT_EQ(d.starts[3].second.shares[0].gpu_indices,
            (std::vector<int32_t>{1}));
}

// Jobs of one class share one reason, even when their requests are separate
// but equal objects and other jobs start between them.
TEST(PlacementTest, AClassHasOneReason) {
  auto fleet = Fleet(2, 2);
  auto cpu_job = std::make_shared<v1::ResourceRequest>(*Request(1, 0));
  cpu_job->set_cpus_per_node(4);
  Decisions d =
      Schedule(Snap(fleet),
               {Job("a1", Request(1, 2), 5, 1), Job("a2", Request(1, 2), 5, 2),
                Job("a3", Request(1, 2), 5, 3), Job("c1", cpu_job, 5, 4),
                Job("a4", Request(1, 2), 5, 5), Job("c2", cpu_job, 5, 6)});
  ASSERT_EQ(d.starts.size(), 4u);
  ASSERT_EQ(d.waiting.size(), 2u);
  EXPECT_EQ(d.waiting[0].first, "a3");
  EXPECT_EQ(d.waiting[1].first, "a4");
  EXPECT_EQ(d.waiting[0].second, d.waiting[1].second);  // one string
  EXPECT_EQ(*d.waiting[0].second,
            "needs 1 node x (2 GPUs); 0 fit now; n0, n1: 0 of 2 matching GPUs "
            "free, needs 2");
}

TEST(PlacementTest, ConsumeRefusesWhatIsNotFreeAndReleaseGivesBack) {
  NodeCapacity node = NodeCapacity::Empty("n", Inventory(4));
  NodeShare share;
  share.node = "n";
  share.gpu_indices = {1, 3};
  share.cpus = 30;
  share.memory_bytes = 100 * kGiB;
  ASSERT_TRUE(Consume(&node, share));
  EXPECT_EQ(node.gpu_free, 0b0101u);
  EXPECT_EQ(node.cpus_free, 2);
  NodeCapacity before = node;
  EXPECT_FALSE(Consume(&node, share));  // GPUs 1 and 3 are gone
  share.gpu_indices = {0};
  EXPECT_FALSE(Consume(&node, share));  // 2 CPUs left
  share.cpus = 1;
  share.gpu_indices = {9};
  EXPECT_FALSE(Consume(&node, share));  // no such GPU
  EXPECT_EQ(node.gpu_free, before.gpu_free);
  EXPECT_EQ(node.cpus_free, before.cpus_free);
  EXPECT_EQ(node.memory_free, before.memory_free);
  share.gpu_indices = {1, 3};
  share.cpus = 30;
  Release(&node, share);
  EXPECT_EQ(node.gpu_free, 0b1111u);
  EXPECT_EQ(node.cpus_free, 32);
  EXPECT_EQ(node.memory_free, 256 * kGiB);
}

TEST(PlacementTest, NodeInfoFromInventory) {
  v1::NodeInventory inv = Inventory(70);
  inv.mutable_nvme(0)->set_free_bytes(3);
  auto* d = inv.add_nvme();
  d->set_free_bytes(4);
  inv.mutable_nics(0)->set_gbps(25);
  inv.add_nics()->set_gbps(400);
  (*inv.mutable_labels())["rack"] = "r9";
  auto info = NodeInfo::FromInventory("n", inv);
  EXPECT_EQ(info->gpus.size(), 64u);  // the rest are not used
  EXPECT_EQ(info->switch_label, "s1");
  EXPECT_EQ(info->rack_label, "r9");
  EXPECT_EQ(info->nvme_bytes, 7u);
  EXPECT_EQ(info->nic_gbps, 400);
  EXPECT_EQ(NodeCapacity::Empty(info).gpu_free, ~uint64_t{0});
  EXPECT_EQ(NodeCapacity::Empty("m", Inventory(3)).gpu_free, 0b111u);
}

// ---- Random fleets and queues against a plain reference of the policy ----

bool RefGpuMatches(const NodeInfo::Gpu& g, const v1::ResourceRequest& r) {
  if (g.memory_bytes < r.min_gpu_memory_bytes()) return false;
  if (r.gpu_models().empty()) return true;
  return std::find(r.gpu_models().begin(), r.gpu_models().end(), g.model) !=
         r.gpu_models().end();
}

// Fills `gpus` (positions) when one share of `r` fits on `n` now.
bool RefFits(const NodeCapacity& n, const v1::ResourceRequest& r,
             std::vector<int>* gpus) {
  if (!n.unavailable.empty()) return false;
  gpus->clear();
  for (size_t p = 0; p < n.info->gpus.size() && r.gpus_per_node() > 0; ++p) {
    if (RefGpuMatches(n.info->gpus[p], r) && (n.gpu_free >> p & 1) &&
        static_cast<int>(gpus->size()) < r.gpus_per_node()) {
      gpus->push_back(p);
    }
  }
  return static_cast<int>(gpus->size()) >= r.gpus_per_node() &&
         r.cpus_per_node() <= n.cpus_free &&
         r.memory_bytes_per_node() <= n.memory_free &&
         r.nvme_bytes_per_node() <= n.nvme_free &&
         r.nic_gbps_per_node() <= n.nic_gbps_free + 1e-9;
}

// The old reason: every node's FitOnNode words grouped by their text.
std::string RefReason(const std::vector<NodeCapacity>& nodes,
                      const v1::ResourceRequest& r, int fits) {
  std::map<std::string, std::vector<std::string>> misfits;
  int idle = 0;
  for (const auto& n : nodes) {
    std::string why = FitOnNode(n, r, nullptr);
    if (!why.empty()) misfits[why].push_back(n.name());
    if (FitOnNode(NodeCapacity::Empty(n.info), r, nullptr).empty()) ++idle;
  }
  std::string text = "needs " + DescribeRequest(r) + "; ";
  if (idle < r.nodes()) {
    text += "the fleet has only " + std::to_string(idle) + " such node" +
            (idle == 1 ? "" : "s") + " of " + std::to_string(nodes.size()) +
            " even when idle, so it cannot start until nodes are added (or "
            "shrink the request); ";
  }
  text += std::to_string(fits) + (fits == 1 ? " fits now" : " fit now");
  for (const auto& [why, names] : misfits) {
    text += "; ";
    for (size_t i = 0; i < names.size() && i < 4; ++i) {
      text += (i > 0 ? ", " : "") + names[i];
    }
    if (names.size() > 4)
      text += " and " + std::to_string(names.size() - 4) + " more";
    text += ": " + why;
  }
  if (nodes.empty()) text += "; no node is registered";
  return text;
}

struct RefDecisions {
  std::vector<std::pair<std::string, Placement>> starts;
  std::map<std::string, std::string> waiting;
};

std::vector<JobRequest> InOrder(std::vector<JobRequest> queue) {
  std::stable_sort(queue.begin(), queue.end(),
                   [](const auto& a, const auto& b) {
                     return std::make_tuple(-a.priority, a.submit_seq) <
                            std::make_tuple(-b.priority, b.submit_seq);
                   });
  return queue;
}

// The policy one job and one node at a time: O(nodes x jobs).
RefDecisions Reference(std::vector<NodeCapacity> nodes,
                       std::vector<JobRequest> queue) {
  RefDecisions out;
  std::map<std::string, std::string> failed;  // serialized request -> reason
  for (const JobRequest& job : InOrder(std::move(queue))) {
    const v1::ResourceRequest& r = *job.resources;
    std::string key = r.SerializeAsString();
    if (failed.count(key) > 0) {
      out.waiting[job.job_id] = failed[key];
      continue;
    }
    std::map<std::string, std::vector<size_t>> by_switch;
    std::vector<size_t> fits;
    std::vector<int> gpus;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!RefFits(nodes[i], r, &gpus)) continue;
      fits.push_back(i);
      by_switch[nodes[i].info->switch_label].push_back(i);
    }
    if (static_cast<int>(fits.size()) < r.nodes()) {
      failed[key] = out.waiting[job.job_id] = RefReason(nodes, r, fits.size());
      continue;
    }
    std::vector<size_t> chosen = fits;
    size_t best = SIZE_MAX;
    for (const auto& [sw, group] : by_switch) {
      if (!sw.empty() && static_cast<int>(group.size()) >= r.nodes() &&
          group.size() < best) {
        best = group.size();
        chosen = group;
      }
    }
    std::sort(chosen.begin(), chosen.end(), [&](size_t a, size_t b) {
      const NodeInfo& x = *nodes[a].info;
      const NodeInfo& y = *nodes[b].info;
      return std::make_tuple(x.switch_label, x.rack_label, -x.nic_gbps,
                             x.name) <
             std::make_tuple(y.switch_label, y.rack_label, -y.nic_gbps, y.name);
    });
    chosen.resize(r.nodes());
    Placement p;
    for (size_t i : chosen) {
      NodeCapacity& n = nodes[i];
      RefFits(n, r, &gpus);
      NodeShare s{n.name(),
                  {},
                  r.cpus_per_node(),
                  r.memory_bytes_per_node(),
                  r.nvme_bytes_per_node(),
                  r.nic_gbps_per_node()};
      for (int g : gpus) {
        s.gpu_indices.push_back(n.info->gpus[g].index);
        n.gpu_free &= ~(uint64_t{1} << g);
      }
      n.cpus_free -= s.cpus;
      n.memory_free -= s.memory_bytes;
      n.nvme_free -= s.nvme_bytes;
      n.nic_gbps_free -= s.nic_gbps;
      p.shares.push_back(s);
    }
    out.starts.emplace_back(job.job_id, p);
  }
  return out;
}

struct World {
  std::vector<NodeCapacity> nodes;
  std::vector<JobRequest> queue;
};

World RandomWorld(std::mt19937* rng) {
  auto pick = [&](int n) { return static_cast<int>((*rng)() % n); };
  World w;
  // Some fleets are large and under few switches, so that a switch spans
  // several buckets of the index (64 nodes each).
  const bool large = pick(6) == 0;
  const int node_count = large ? 60 + pick(200) : pick(30);
  std::vector<int> names(node_count);
  for (int i = 0; i < node_count; ++i) names[i] = i;
  std::shuffle(names.begin(), names.end(), *rng);  // snapshot != ring order
  for (int i = 0; i < node_count; ++i) {
    auto info = std::make_shared<NodeInfo>();
    info->name = "n" + std::to_string(names[i]);
    info->switch_label =
        std::vector<std::string>{"", "s1", "s2", "s3"}[pick(large ? 2 : 4)];
    info->rack_label = std::vector<std::string>{"", "r1", "r2"}[pick(3)];
    const int gpus = std::vector<int>{0, 1, 2, 4, 8}[pick(5)];
    const bool mixed = pick(5) == 0;
    const std::string model = pick(2) ? "A" : "B";
    const uint64_t memory = (pick(2) ? 40 : 80) * kGiB;
    // Index values run backwards on some nodes: positions are not indices.
    const bool backwards = pick(3) == 0;
    for (int g = 0; g < gpus; ++g) {
      int32_t index = backwards ? gpus - 1 - g : g;
      info->gpus.push_back({index, mixed && pick(2) ? "C" : model,
                            mixed && pick(2) ? 24 * kGiB : memory});
    }
    info->cpus = std::vector<int>{16, 32, 64}[pick(3)];
    info->memory_bytes = (pick(2) ? 128 : 256) * kGiB;
    info->nvme_bytes = std::vector<uint64_t>{0, 500, 1000}[pick(3)] * kGiB;
    info->nic_gbps = std::vector<double>{0, 100, 200, 400}[pick(4)];
    NodeCapacity n = NodeCapacity::Empty(info);
    if (pick(10) == 0) n.unavailable = pick(2) ? "drained" : "lost (timeout)";
    if (pick(2) == 0) {  // partly used
      for (int g = 0; g < gpus; ++g) {
        if (pick(3) == 0) n.gpu_free &= ~(uint64_t{1} << g);
      }
      n.cpus_free -= pick(static_cast<int>(info->cpus) + 1);
      n.memory_free -= pick(4) * 32 * kGiB / 4 * pick(2);
      // A few MiB apart: different numbers, the same words ("128.0 GiB").
      n.memory_free -= pick(3) * 10 * (1 << 20);
      n.nvme_free -= std::min<uint64_t>(n.nvme_free, pick(3) * 300 * kGiB);
      n.nic_gbps_free -= std::min(n.nic_gbps_free, 50.0 * pick(3));
    }
    w.nodes.push_back(n);
  }
  std::vector<std::shared_ptr<v1::ResourceRequest>> pool(1 + pick(6));
  for (auto& r : pool) {
    r = std::make_shared<v1::ResourceRequest>();
    r->set_nodes(std::vector<int>{1, 1, 2, 3, 4, 8, 70}[pick(large ? 7 : 5)]);
    r->set_gpus_per_node(std::vector<int>{0, 1, 2, 4, 8}[pick(5)]);
    if (pick(3) == 0) r->set_min_gpu_memory_bytes((pick(2) ? 40 : 80) * kGiB);
    if (pick(4) == 0) r->add_gpu_models(pick(2) ? "A" : "C");
    if (pick(6) == 0) r->add_gpu_models("B");
    r->set_cpus_per_node(std::vector<int>{0, 4, 16}[pick(3)]);
    if (pick(3) == 0) r->set_memory_bytes_per_node((pick(3) ? 64 : 200) * kGiB);
    if (pick(4) == 0) r->set_nvme_bytes_per_node(200 * kGiB);
    if (pick(4) == 0) r->set_nic_gbps_per_node(pick(2) ? 50 : 100);
  }
  const int jobs = pick(large ? 150 : 40);
  std::vector<int> seqs(jobs);
  for (int i = 0; i < jobs; ++i) seqs[i] = i;
  std::shuffle(seqs.begin(), seqs.end(), *rng);
  for (int i = 0; i < jobs; ++i) {
    const auto& r = pool[pick(pool.size())];
    // Half share the object, half carry an equal copy: one class either way.
    RequestPtr req =
        pick(2) ? RequestPtr(r) : std::make_shared<v1::ResourceRequest>(*r);
    w.queue.push_back(Job("j" + std::to_string(i), req, pick(3), seqs[i]));
  }
  return w;
}

// Checks one pass's decisions against the invariants and the reference.
void CheckPass(const World& w, const Decisions& d) {
  std::map<std::string, NodeCapacity> left;
  for (const auto& n : w.nodes) left.emplace(n.name(), n);
  std::map<std::string, const JobRequest*> jobs;
  for (const auto& j : w.queue) jobs[j.job_id] = &j;
  auto cls = [&](const std::string& id) {
    return jobs.at(id)->resources->SerializeAsString();
  };
  // Every start: a whole gang on distinct available nodes, matching GPUs
  // that were free, nothing taken twice.
  for (const auto& [id, p] : d.starts) {
    const v1::ResourceRequest& r = *jobs.at(id)->resources;
    ASSERT_EQ(static_cast<int>(p.shares.size()), r.nodes()) << id;
    std::set<std::string> distinct;
    for (const auto& s : p.shares) {
      ASSERT_TRUE(distinct.insert(s.node).second)
          << id << " twice on " << s.node;
      NodeCapacity& n = left.at(s.node);
      ASSERT_TRUE(n.unavailable.empty()) << id << " on " << s.node;
      ASSERT_EQ(static_cast<int>(s.gpu_indices.size()), r.gpus_per_node());
      for (int32_t index : s.gpu_indices) {
        size_t pos = 0;
        while (pos < n.info->gpus.size() && n.info->gpus[pos].index != index) {
          ++pos;
        }
        ASSERT_LT(pos, n.info->gpus.size());
        ASSERT_TRUE(RefGpuMatches(n.info->gpus[pos], r))
            << id << " GPU " << index;
        ASSERT_TRUE(n.gpu_free >> pos & 1)
            << id << " GPU " << index << " taken";
        n.gpu_free &= ~(uint64_t{1} << pos);
      }
      ASSERT_EQ(s.cpus, r.cpus_per_node());
      ASSERT_LE(s.cpus, n.cpus_free) << id << " on " << s.node;
      ASSERT_LE(s.memory_bytes, n.memory_free) << id << " on " << s.node;
      ASSERT_LE(s.nvme_bytes, n.nvme_free) << id << " on " << s.node;
      ASSERT_LE(s.nic_gbps, n.nic_gbps_free + 1e-9) << id << " on " << s.node;
      n.cpus_free -= s.cpus;
      n.memory_free -= s.memory_bytes;
      n.nvme_free -= s.nvme_bytes;
      n.nic_gbps_free -= s.nic_gbps;
    }
  }
  ASSERT_EQ(d.starts.size() + d.waiting.size(), w.queue.size());
  // Class monotonicity: a waiting job fits nowhere on what is left, and no
  // later job of its class started; all jobs of a class share one reason.
  std::vector<JobRequest> order = InOrder(w.queue);
  std::map<std::string, size_t> rank;
  for (size_t i = 0; i < order.size(); ++i) rank[order[i].job_id] = i;
  std::map<std::string, const std::string*> class_reason;
  for (const auto& [id, reason] : d.waiting) {
    const v1::ResourceRequest& r = *jobs.at(id)->resources;
    int fits = 0;
    std::vector<int> gpus;
    for (const auto& [name, n] : left) fits += RefFits(n, r, &gpus);
    EXPECT_LT(fits, r.nodes()) << id << " waits but fits: " << *reason;
    for (const auto& [started, p] : d.starts) {
      EXPECT_FALSE(cls(started) == cls(id) && rank[started] > rank[id])
          << started << " of " << id << "'s class started after it";
    }
    auto [it, added] = class_reason.emplace(cls(id), reason.get());
    EXPECT_EQ(it->second, reason.get()) << id << ": one class, two reasons";
  }
  // The same decisions as the plain reference, word for word.
  RefDecisions ref = Reference(w.nodes, w.queue);
  ASSERT_EQ(d.starts.size(), ref.starts.size());
  for (size_t i = 0; i < d.starts.size(); ++i) {
    EXPECT_EQ(d.starts[i].first, ref.starts[i].first) << "start " << i;
    const auto& a = d.starts[i].second.shares;
    const auto& b = ref.starts[i].second.shares;
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].node, b[k].node) << d.starts[i].first << " share " << k;
      EXPECT_EQ(a[k].gpu_indices, b[k].gpu_indices) << d.starts[i].first;
    }
  }
  for (const auto& [id, reason] : d.waiting) {
    EXPECT_EQ(*reason, ref.waiting[id]) << id;
  }
}

TEST(PlacementPropertyTest, RandomFleetsMatchTheReference) {
  int starts = 0, waiting = 0, gangs = 0, grouped = 0, idle = 0;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    World w = RandomWorld(&rng);
    Decisions d = Schedule(Snap(w.nodes), w.queue);
    CheckPass(w, d);
    starts += d.starts.size();
    waiting += d.waiting.size();
    for (const auto& [id, p] : d.starts) gangs += p.shares.size() > 1;
    for (const auto& [id, r] : d.waiting) {
      grouped += r->find(" more: ") != std::string::npos;
      idle += r->find("even when idle") != std::string::npos;
    }
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
  // The generator reaches the paths that matter (3819 starts, 1802 of them
  // gangs, 6895 waits when written).
  EXPECT_GT(starts, 2000);
  EXPECT_GT(gangs, 1000);
  EXPECT_GT(waiting, 3000);
  EXPECT_GT(grouped, 1000);  // "a, b, c, d and N more: ..."
  EXPECT_GT(idle, 1000);     // "the fleet has only N such nodes"
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
  check([](v1::JobSpec* s) { s->mutable_resources()->set_nodes(-1); },
        "resources.nodes");
  check([](v1::JobSpec* s) { s->mutable_resources()->set_gpus_per_node(-2); },
        "resources.gpus_per_node");
  check([](v1::JobSpec* s) { (*s->mutable_env())["RANK"] = "3"; }, "env.RANK");
  check([](v1::JobSpec* s) { (*s->mutable_env())["1X"] = "3"; }, "env.1X");
  check([](v1::JobSpec* s) { s->set_max_retries(-1); }, "max_retries");
  check([](v1::JobSpec* s) {
    s->mutable_resources()->set_nodes(2);
    s->mutable_resources()->set_min_nodes(3);
  }, "resources.min_nodes");
  check([](v1::JobSpec* s) { s->mutable_resources()->set_min_nodes(2); },
        "resources.min_nodes");  // no nodes (the most) given
  check([](v1::JobSpec* s) {
    s->mutable_resources()->set_nodes(4);
    s->mutable_resources()->set_min_nodes(2);
    s->mutable_resources()->set_max_switches(1);
  }, "resources.min_nodes");
  check([](v1::JobSpec* s) { s->set_queue("no spaces"); }, "queue");
  check([](v1::JobSpec* s) { s->mutable_time_limit()->set_seconds(-5); },
        "time_limit");
  check([](v1::JobSpec* s) { s->set_working_dir("rel/dir"); }, "working_dir");
  check([](v1::JobSpec* s) { s->set_name("a\nb"); }, "name");
  check([](v1::JobSpec* s) { s->set_name("title\x1b]0;x\x07"); }, "name");
  check([](v1::JobSpec* s) { s->set_name("csi \xc2\x9b"); }, "name");
  check([](v1::JobSpec* s) { s->set_working_dir("/" + std::string(5000, 'a')); },
        "working_dir");
  check([](v1::JobSpec* s) { s->set_checkpoint_dir("ckpt/{job}"); },
        "checkpoint_dir");
  check([](v1::JobSpec* s) { s->set_checkpoint_dir("/shared/../etc"); },
        "checkpoint_dir");
  check([](v1::JobSpec* s) { s->set_checkpoint_dir("/shared/{jobid}"); },
        "checkpoint_dir");
  check([](v1::JobSpec* s) { s->set_checkpoint_dir("/shared/a\nb"); },
        "checkpoint_dir");

  v1::JobSpec ok;
  ok.add_command("/bin/true");
  ok.set_name("smile \xf0\x9f\x98\x80 caf\xc3\xa9");  // UTF-8 is fine
  ok.mutable_resources()->set_gpus_per_node(4);
  ASSERT_TRUE(ValidateJobSpec(&ok).ok());
  EXPECT_EQ(ok.queue(), "default");
  EXPECT_EQ(ok.resources().nodes(), 1);
  EXPECT_EQ(ok.resources().ranks_per_node(), 4);
  EXPECT_EQ(ok.grace_period().seconds(), 10);
  // min_nodes equal to nodes is not elastic: one form.
  ok.mutable_resources()->set_nodes(3);
  ok.mutable_resources()->set_min_nodes(3);
  ASSERT_TRUE(ValidateJobSpec(&ok).ok());
  EXPECT_EQ(ok.resources().min_nodes(), 0);
}

// A GPU rank takes one GPU of its node: more ranks than GPUs put two ranks
// on one GPU, which NCCL refuses on every attempt.
TEST(JobSpecTest, MoreGpuRanksThanGpusPerNodeIsRefusedWithTheFix) {
  auto spec_with = [](int gpus, int ranks) {
    v1::JobSpec spec;
    spec.add_command("/bin/true");
    spec.mutable_resources()->set_gpus_per_node(gpus);
    spec.mutable_resources()->set_ranks_per_node(ranks);
    return spec;
  };
  v1::JobSpec two_per_gpu = spec_with(8, 16);
  absl::Status st = ValidateJobSpec(&two_per_gpu);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "resources.ranks_per_node: 16 ranks per node but gpus_per_node "
            "is 8; a GPU rank needs its own GPU (NCCL cannot put two ranks "
            "of one job on one GPU): set ranks_per_node to 8 or less, or "
            "gpus_per_node to 16");
  // No node has more than 64 GPUs: that fix is not offered.
  v1::JobSpec many = spec_with(8, 100);
  st = ValidateJobSpec(&many);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::EndsWith(st.message(), "set ranks_per_node to 8 or less"))
      << st.message();
  // Elastic jobs run as many ranks on every node they get: the same check.
  v1::JobSpec elastic = spec_with(4, 5);
  elastic.mutable_resources()->set_nodes(8);
  elastic.mutable_resources()->set_min_nodes(2);
  EXPECT_EQ(ValidateJobSpec(&elastic).code(),
            absl::StatusCode::kInvalidArgument);
  // xl-train on CUDA is a GPU job like any other.
  v1::JobSpec cuda_train = spec_with(2, 4);
  cuda_train.clear_command();
  cuda_train.mutable_train()->set_device("cuda");
  EXPECT_EQ(ValidateJobSpec(&cuda_train).code(),
            absl::StatusCode::kInvalidArgument);

  // One rank per GPU, fewer ranks than GPUs (a rank driving several), the
  // default (one per GPU), and CPU jobs are fine.
  for (auto [gpus, ranks] : std::vector<std::pair<int, int>>{
           {8, 8}, {8, 1}, {8, 0}, {0, 16}, {0, 0}}) {
    v1::JobSpec ok = spec_with(gpus, ranks);
    EXPECT_TRUE(ValidateJobSpec(&ok).ok())
        << gpus << " GPUs, " << ranks << " ranks";
  }
  v1::JobSpec defaulted = spec_with(8, 0);
  ASSERT_TRUE(ValidateJobSpec(&defaulted).ok());
  EXPECT_EQ(defaulted.resources().ranks_per_node(), 8);
  // xl-train on device cpu uses Gloo, not the GPUs it holds.
  v1::JobSpec cpu_train = spec_with(2, 4);
  cpu_train.clear_command();
  cpu_train.mutable_train()->set_device("cpu");
  EXPECT_TRUE(ValidateJobSpec(&cpu_train).ok());
}

// batch_per_rank: auto and global_batch are checked where they can be at
// submit: auto on CPU needs the memory it is sized from, a fixed batch must
// divide the global batch over a fixed world.
TEST(JobSpecTest, AutoBatchAndGlobalBatchAreCheckedAtSubmit) {
  auto train = [](int nodes, int gpus) {
    v1::JobSpec spec;
    spec.mutable_resources()->set_nodes(nodes);
    spec.mutable_resources()->set_gpus_per_node(gpus);
    spec.mutable_train()->set_steps(10);
    return spec;
  };
  v1::JobSpec cpu_auto = train(2, 0);
  cpu_auto.mutable_train()->set_batch_per_rank_auto(true);
  absl::Status st = ValidateJobSpec(&cpu_auto);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(st.message(),
                               "train.batch_per_rank: auto on CPU sizes the "
                               "batch from the job's memory"))
      << st.message();
  cpu_auto = train(2, 0);
  cpu_auto.mutable_train()->set_batch_per_rank_auto(true);
  cpu_auto.mutable_resources()->set_memory_bytes_per_node(8ull << 30);
  EXPECT_TRUE(ValidateJobSpec(&cpu_auto).ok());
  v1::JobSpec gpu_auto = train(2, 8);
  gpu_auto.mutable_train()->set_batch_per_rank_auto(true);
  EXPECT_TRUE(ValidateJobSpec(&gpu_auto).ok()) << "sized from the GPU";
  v1::JobSpec both = train(1, 8);
  both.mutable_train()->set_batch_per_rank_auto(true);
  both.mutable_train()->set_batch_per_rank(32);
  EXPECT_EQ(ValidateJobSpec(&both).code(), absl::StatusCode::kInvalidArgument);

  // 2 nodes x 8 ranks x 32 = 512 per micro-batch step.
  v1::JobSpec global = train(2, 8);
  global.mutable_train()->set_batch_per_rank(32);
  global.mutable_train()->set_global_batch(1000);
  st = ValidateJobSpec(&global);
  EXPECT_EQ(st.message(),
            "train.global_batch: 1000 is not a multiple of 16 ranks x "
            "batch_per_rank 32 = 512; use a multiple of 512, or "
            "batch_per_rank: auto");
  global = train(2, 8);
  global.mutable_train()->set_batch_per_rank(32);
  global.mutable_train()->set_global_batch(512);
  EXPECT_TRUE(ValidateJobSpec(&global).ok());
  // Accumulation (4 micro-batches per step) on GPUs and on CPU alike.
  global = train(2, 8);
  global.mutable_train()->set_batch_per_rank(32);
  global.mutable_train()->set_global_batch(2048);
  EXPECT_TRUE(ValidateJobSpec(&global).ok());
  v1::JobSpec cpu = train(2, 0);
  cpu.mutable_resources()->set_ranks_per_node(8);
  cpu.mutable_train()->set_batch_per_rank(32);
  cpu.mutable_train()->set_global_batch(2048);
  EXPECT_TRUE(ValidateJobSpec(&cpu).ok());
}

TEST(JobSpecTest, CheckpointDirExpandsJobAndAttempt) {
  v1::JobSpec spec;
  spec.add_command("/bin/true");
  spec.set_checkpoint_dir("/shared/ckpt/{job}/a{attempt}/{job}");
  ASSERT_TRUE(ValidateJobSpec(&spec).ok());
  EXPECT_EQ(ExpandCheckpointDir(spec.checkpoint_dir(), "42", 3, "alice"),
            "/shared/ckpt/42/a3/42");
  // {user} is one component whatever the name holds.
  spec.set_checkpoint_dir("/shared/ckpt/{user}/{job}");
  ASSERT_TRUE(ValidateJobSpec(&spec).ok());
  EXPECT_EQ(ExpandCheckpointDir(spec.checkpoint_dir(), "42", 1, "alice"),
            "/shared/ckpt/alice/42");
  EXPECT_EQ(ExpandCheckpointDir(spec.checkpoint_dir(), "42", 1, "../x/y"),
            "/shared/ckpt/%2e.%2fx%2fy/42");
  EXPECT_EQ(ExpandCheckpointDir(spec.checkpoint_dir(), "42", 1, ".."),
            "/shared/ckpt/%2e./42");
  // and a different one for every name: two users never share it.
  std::set<std::string> seen;
  for (const char* user : {"a_b", "a@b", "a.b", "a%40b", "a/b", "_", ".",
                           "..", "", "%", "A_B", "a-b"}) {
    EXPECT_TRUE(seen.insert(ExpandCheckpointDir("{user}", "1", 1, user)).second)
        << user << " shares " << ExpandCheckpointDir("{user}", "1", 1, user);
  }
  EXPECT_EQ(ExpandCheckpointDir("{user}", "1", 1, "john_doe"), "john_doe");
}

// An error echoes a bad value cut short and escaped: one readable line of
// bounded size, whatever the caller sent.
TEST(JobSpecTest, ErrorsShowLongOrBinaryValuesCutAndEscaped) {
  v1::JobSpec spec;
  spec.add_command("/bin/true");
  spec.set_working_dir(std::string(4000, 'A'));  // relative
  absl::Status st = ValidateJobSpec(&spec);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(st.message().size(), 300u) << st.message();
  EXPECT_NE(st.message().find("(4000 bytes)"), std::string::npos)
      << st.message();

  v1::JobSpec env;
  env.add_command("/bin/true");
  (*env.mutable_env())["\x1b[2J-" + std::string(3000, 'B')] = "v";
  st = ValidateJobSpec(&env);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("env.\\x1b[2J-BBB", 0), 0u) << st.message();
  EXPECT_LT(st.message().size(), 300u);
  EXPECT_EQ(st.message().find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace xl::scheduler
