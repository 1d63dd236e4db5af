// Queue policy in the scheduling core: quotas with borrowing and lending
// inside a cohort, per-user limits, GPU models narrowed to what a quota
// covers, fair share and effective priority. Hand-made clusters with the
// decisions spelled out, then simulations over random fleets and traces:
// quotas are never exceeded except by borrowing within the limits, and
// queue shares converge to their weights on a long contended trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "server/scheduler/placement.h"
#include "server/scheduler/queue_policy.h"
#include "server/scheduler/schedule.h"

namespace xl::scheduler {
namespace {

constexpr char kA100[] = "NVIDIA A100-SXM4-80GB";
constexpr char kH100[] = "NVIDIA H100 80GB HBM3";

v1::NodeInventory Inventory(int gpus, const std::string& model) {
  v1::NodeInventory inv;
  inv.set_cpus(64);
  inv.set_memory_bytes(uint64_t{512} << 30);
  for (int i = 0; i < gpus; ++i) {
    auto* g = inv.add_gpus();
    g->set_index(i);
    g->set_model(model);
    g->set_memory_bytes(uint64_t{80} << 30);
  }
  return inv;
}

JobRequest Job(const std::string& id, const std::string& queue,
               const std::string& user, int nodes, int gpus, int64_t seq,
               std::vector<std::string> models = {}) {
  auto r = std::make_shared<v1::ResourceRequest>();
  r->set_nodes(nodes);
  r->set_gpus_per_node(gpus);
  r->set_ranks_per_node(gpus);
  for (const auto& m : models) r->add_gpu_models(m);
  JobRequest j;
  j.job_id = id;
  j.queue = queue;
  j.user = user;
  j.submit_seq = seq;
  j.resources = r;
  return j;
}

QueuePolicy Policy(const std::string& name, const std::string& cohort,
                   std::map<std::string, Quota> quotas,
                   int64_t per_user = 0) {
  QueuePolicy p;
  p.name = name;
  p.cohort = cohort;
  p.quotas = std::move(quotas);
  p.max_running_gpus_per_user = per_user;
  return p;
}

ClusterSnapshot Fleet(const std::vector<std::string>& models, int gpus = 8) {
  ClusterSnapshot snap;
  for (size_t i = 0; i < models.size(); ++i) {
    snap.nodes.push_back(NodeCapacity::Empty("n" + std::to_string(i),
                                             Inventory(gpus, models[i])));
  }
  return snap;
}

std::set<std::string> Started(const Decisions& d) {
  std::set<std::string> out;
  for (const auto& [id, p] : d.starts) out.insert(id);
  return out;
}

std::string ReasonOf(const Decisions& d, const std::string& id) {
  for (const auto& [job, reason] : d.waiting) {
    if (job == id) return *reason;
  }
  return "(not waiting)";
}

TEST(QueuePolicyTest, NominalQuotaWithoutCohortCapsTheQueue) {
  ClusterSnapshot snap = Fleet({kH100, kH100});
  snap.policies["a"] = Policy("a", "", {{"*", {4, -1, -1}}});
  Decisions d = Schedule(snap, {Job("1", "a", "u", 1, 2, 1),
                                Job("2", "a", "u", 1, 2, 2),
                                Job("3", "a", "u", 1, 2, 3),
                                Job("4", "b", "u", 1, 8, 4)});
  EXPECT_EQ(Started(d), (std::set<std::string>{"1", "2", "4"}));
  const std::string why = ReasonOf(d, "3");
  EXPECT_NE(why.find("queue a's quota of 4"), std::string::npos) << why;
  EXPECT_NE(why.find("4 in use, the job needs 2"), std::string::npos) << why;
  // Its own reason, not its class's (its class fits the fleet).
  ASSERT_EQ(d.job_reasons.size(), 1u);
  EXPECT_EQ(d.job_reasons[0].first, "3");
}

TEST(QueuePolicyTest, ExcludedNodesAreNeverUsed) {
  // resources.exclude_nodes, as sbatch --exclude.
  ClusterSnapshot snap = Fleet({kH100, kH100});
  JobRequest avoid = Job("1", "a", "u", 1, 8, 1);
  auto req = std::make_shared<v1::ResourceRequest>(*avoid.resources);
  req->add_exclude_nodes("n0");
  avoid.resources = req;
  Decisions d = Schedule(snap, {avoid});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].second.shares[0].node, "n1");
  // With n1 busy it waits, saying which node it may not use.
  snap.nodes[1].gpu_free = 0;
  d = Schedule(snap, {avoid});
  EXPECT_TRUE(d.starts.empty());
  EXPECT_NE(ReasonOf(d, "1").find("not on n0"), std::string::npos)
      << ReasonOf(d, "1");
}

TEST(QueuePolicyTest, APreferenceToAvoidANodeGivesWayWhenNothingElseFits) {
  ClusterSnapshot snap = Fleet({kH100, kH100});
  JobRequest job = Job("1", "a", "u", 1, 8, 1);
  auto avoiding = std::make_shared<v1::ResourceRequest>(*job.resources);
  avoiding->add_exclude_nodes("n0");
  job.preferred = avoiding;
  Decisions d = Schedule(snap, {job});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].second.shares[0].node, "n1");
  snap.nodes[1].gpu_free = 0;
  d = Schedule(snap, {job});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].second.shares[0].node, "n0");
}

TEST(QueuePolicyTest, AGangUnderAtMostNSwitches) {
  // Two switches of 4 nodes; one node busy on each.
  ClusterSnapshot snap;
  for (int i = 0; i < 8; ++i) {
    v1::NodeInventory inv = Inventory(8, kH100);
    (*inv.mutable_labels())["switch"] = i < 4 ? "s1" : "s2";
    snap.nodes.push_back(NodeCapacity::Empty("n" + std::to_string(i), inv));
  }
  snap.nodes[0].gpu_free = 0;
  snap.nodes[4].gpu_free = 0;
  JobRequest job = Job("1", "a", "u", 4, 8, 1);
  auto one = std::make_shared<v1::ResourceRequest>(*job.resources);
  one->set_max_switches(1);
  job.resources = one;
  Decisions d = Schedule(snap, {job});
  EXPECT_TRUE(d.starts.empty());
  EXPECT_NE(ReasonOf(d, "1").find("under at most 1 switch (max_switches); 6 "
                                  "fit now, but the 1 switch with the most "
                                  "room have 3"),
            std::string::npos)
      << ReasonOf(d, "1");
  auto two = std::make_shared<v1::ResourceRequest>(*one);
  two->set_max_switches(2);
  job.resources = two;
  d = Schedule(snap, {job});
  ASSERT_EQ(d.starts.size(), 1u);
  // With room under one switch, one switch is used.
  snap.nodes[4].gpu_free = snap.nodes[5].gpu_free;
  job.resources = one;
  d = Schedule(snap, {job});
  ASSERT_EQ(d.starts.size(), 1u);
  for (const auto& share : d.starts[0].second.shares) {
    EXPECT_GE(share.node, "n4") << share.node;
  }
}

TEST(QueuePolicyTest, FragmentationCountsFreeGpusNoWaitingJobCanUse) {
  ClusterSnapshot snap = Fleet({kH100, kH100});
  snap.nodes[0].gpu_free = 0b11;  // 2 free
  snap.nodes[1].gpu_free = 0;
  // A job that needs 4 GPUs a node cannot use n0's 2.
  Decisions d = Schedule(snap, {Job("1", "a", "u", 1, 4, 1)});
  EXPECT_EQ(d.fragmented_gpus, 2);
  // A 2-node gang of 2 GPUs could use them (with another such node).
  d = Schedule(snap, {Job("2", "a", "u", 2, 2, 1)});
  EXPECT_EQ(d.fragmented_gpus, 0);
  // Nothing waits: nothing to say.
  d = Schedule(snap, {Job("3", "a", "u", 1, 1, 1)});
  EXPECT_EQ(d.fragmented_gpus, -1);
  // A waiting job with a reservation counts too.
  snap.max_reservations = 8;
  snap.now = absl::FromUnixSeconds(1800000000);
  RunningGang gang;
  gang.job_id = "r";
  gang.nodes = {"n1"};
  gang.gpus = 8;
  gang.expected_end = snap.now + absl::Hours(1);
  NodeShare share;
  share.node = "n1";
  for (int g = 0; g < 8; ++g) share.gpu_indices.push_back(g);
  gang.shares = {share};
  snap.running = {gang};
  d = Schedule(snap, {Job("4", "a", "u", 1, 4, 1)});
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.fragmented_gpus, 2);
}

TEST(QueuePolicyTest, RunningJobsCountAgainstTheQuota) {
  ClusterSnapshot snap = Fleet({kH100, kH100});
  snap.policies["a"] = Policy("a", "", {{"*", {4, -1, -1}}});
  snap.queues["a"].gpus_by_model[kH100] = 3;
  Decisions d = Schedule(snap, {Job("1", "a", "u", 1, 2, 1),
                                Job("2", "a", "u", 1, 1, 2)});
  EXPECT_EQ(Started(d), (std::set<std::string>{"2"}));
}

TEST(QueuePolicyTest, BorrowsUnusedQuotaOfItsCohortWithinBothLimits) {
  // a: nominal 4, may borrow 2; b: nominal 4, idle, lends everything.
  ClusterSnapshot snap = Fleet({kH100, kH100});
  snap.policies["a"] = Policy("a", "lab", {{"*", {4, 2, -1}}});
  snap.policies["b"] = Policy("b", "lab", {{"*", {4, -1, -1}}});
  std::vector<JobRequest> jobs;
  for (int i = 1; i <= 4; ++i) {
    jobs.push_back(Job(std::to_string(i), "a", "u", 1, 2, i));
  }
  Decisions d = Schedule(snap, jobs);
  // 4 nominal + 2 borrowed = 6 GPUs: three jobs.
  EXPECT_EQ(Started(d), (std::set<std::string>{"1", "2", "3"}));
  EXPECT_NE(ReasonOf(d, "4").find("borrowing limit 2"), std::string::npos)
      << ReasonOf(d, "4");

  // b lends at most 1: a may go to 5, so a third 2-GPU job does not fit.
  snap.policies["b"] = Policy("b", "lab", {{"*", {4, -1, 1}}});
  d = Schedule(snap, jobs);
  EXPECT_EQ(Started(d), (std::set<std::string>{"1", "2"}));
  EXPECT_NE(ReasonOf(d, "3").find("cohort lab would lend 1"),
            std::string::npos)
      << ReasonOf(d, "3");

  // While b uses its own quota, there is less to lend: b holds 3 of 4,
  // lends its 1 unused; a gets 4 + 1.
  snap.policies["b"] = Policy("b", "lab", {{"*", {4, -1, -1}}});
  snap.queues["b"].gpus_by_model[kH100] = 3;
  std::vector<JobRequest> ones;
  for (int i = 1; i <= 8; ++i) {
    ones.push_back(Job(std::to_string(i), "a", "u", 1, 1, i));
  }
  d = Schedule(snap, ones);
  EXPECT_EQ(d.starts.size(), 5u);
}

TEST(QueuePolicyTest, WhatAQueueNeverLendsIsAlwaysItsOwn) {
  // The cohort is over its bound (a's borrowing was admitted before b's
  // lending limit was lowered to 2): b still gets the 2 it never lends.
  ClusterSnapshot snap = Fleet({kH100, kH100});
  snap.policies["a"] = Policy("a", "lab", {{"*", {4, -1, -1}}});
  snap.policies["b"] = Policy("b", "lab", {{"*", {4, -1, 2}}});
  snap.queues["a"].gpus_by_model[kH100] = 8;
  Decisions d = Schedule(snap, {Job("1", "b", "u", 1, 3, 1),
                                Job("2", "b", "u", 1, 2, 2)});
  EXPECT_EQ(Started(d), (std::set<std::string>{"2"}));
  EXPECT_NE(ReasonOf(d, "1").find("borrowed that part"), std::string::npos)
      << ReasonOf(d, "1");
}

TEST(QueuePolicyTest, AReservedJobKeepsItsQuota) {
  // A 16-GPU gang of queue a (quota 16) is blocked by capacity and
  // reserved; the 1-GPU jobs of a behind it may not use up its quota.
  ClusterSnapshot snap = Fleet({kH100, kH100});
  snap.max_reservations = 8;
  snap.now = absl::FromUnixSeconds(1800000000);
  snap.policies["a"] = Policy("a", "", {{"*", {16, -1, -1}}});
  NodeShare busy;
  busy.node = "n0";
  busy.gpu_indices = {0};
  ASSERT_TRUE(Consume(&snap.nodes[0], busy));
  RunningGang other;
  other.job_id = "x";
  other.queue = "b";
  other.nodes = {"n0"};
  other.gpus = 1;
  other.expected_end = snap.now + absl::Hours(1);
  other.shares = {busy};
  snap.running.push_back(other);
  std::vector<JobRequest> jobs{Job("big", "a", "u", 2, 8, 1)};
  for (int i = 2; i <= 6; ++i) {
    jobs.push_back(Job(std::to_string(i), "a", "u", 1, 1, i));
  }
  Decisions d = Schedule(snap, jobs);
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job_id, "big");
  EXPECT_TRUE(d.starts.empty());
  EXPECT_NE(ReasonOf(d, "2").find("quota of 16"), std::string::npos)
      << ReasonOf(d, "2");
}

TEST(QueuePolicyTest, AQueueWithoutCohortNeverBorrows) {
  ClusterSnapshot snap = Fleet({kH100});
  snap.policies["a"] = Policy("a", "", {{"*", {2, -1, -1}}});
  snap.policies["b"] = Policy("b", "", {{"*", {6, -1, -1}}});
  Decisions d = Schedule(snap, {Job("1", "a", "u", 1, 4, 1)});
  EXPECT_TRUE(d.starts.empty());
}

TEST(QueuePolicyTest, QuotaOfOneModelNarrowsWhereTheJobRuns) {
  // The job may use any GPU; its queue's quota covers only A100s: it runs
  // on the A100 node even though the H100 node comes first.
  ClusterSnapshot snap = Fleet({kH100, kA100});
  snap.policies["a"] = Policy("a", "", {{kA100, {8, -1, -1}}});
  Decisions d = Schedule(snap, {Job("1", "a", "u", 1, 8, 1),
                                Job("2", "a", "u", 1, 8, 2),
                                Job("3", "a", "u", 1, 1, 3, {kH100})});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "1");
  EXPECT_EQ(d.starts[0].second.shares[0].node, "n1");
  EXPECT_NE(ReasonOf(d, "2").find("quota of 8 NVIDIA A100"),
            std::string::npos)
      << ReasonOf(d, "2");
  EXPECT_NE(ReasonOf(d, "3").find("has no quota for the GPU models"),
            std::string::npos)
      << ReasonOf(d, "3");
  // A narrowed job that waits for capacity has its own reason too.
  snap.nodes[1].gpu_free = 0;
  d = Schedule(snap, {Job("4", "a", "u", 1, 2, 4)});
  ASSERT_EQ(d.job_reasons.size(), 1u);
  EXPECT_EQ(d.job_reasons[0].first, "4");
}

TEST(QueuePolicyTest, RunningGpusPerUser) {
  ClusterSnapshot snap = Fleet({kH100, kH100});
  snap.policies["a"] = Policy("a", "", {}, /*per_user=*/4);
  snap.queues["a"].user_gpus["alice"] = 1;
  Decisions d = Schedule(snap, {Job("1", "a", "alice", 1, 2, 1),
                                Job("2", "a", "alice", 1, 2, 2),
                                Job("3", "a", "bob", 1, 4, 3)});
  EXPECT_EQ(Started(d), (std::set<std::string>{"1", "3"}));
  EXPECT_NE(ReasonOf(d, "2").find("user alice holds 3 GPUs in queue a"),
            std::string::npos)
      << ReasonOf(d, "2");
}

TEST(QueuePolicyTest, EffectivePriorityOrdersTheQueue) {
  ClusterSnapshot snap = Fleet({kH100});
  JobRequest first = Job("1", "a", "heavy", 1, 8, 1);
  JobRequest second = Job("2", "b", "light", 1, 8, 2);
  first.effective_priority = 40;   // used a lot
  second.effective_priority = 90;  // used little
  Decisions d = Schedule(snap, {first, second});
  ASSERT_EQ(d.starts.size(), 1u);
  EXPECT_EQ(d.starts[0].first, "2");
}

TEST(QueuePolicyTest, FairShareFactors) {
  std::map<std::string, double> weights{{"a", 1}, {"b", 3}};
  std::map<std::string, double> usage{{"a", 100}, {"b", 300}};
  std::map<std::pair<std::string, std::string>, double> users{
      {{"a", "x"}, 100}, {{"b", "y"}, 300}};
  std::map<std::string, int64_t> active{{"a", 1}, {"b", 2}};
  FairShare fs(weights, usage, users, active);
  // Each queue used exactly its share: factor 0.5.
  EXPECT_DOUBLE_EQ(fs.QueueShare("a"), 0.25);
  EXPECT_DOUBLE_EQ(fs.QueueFactor("a"), 0.5);
  EXPECT_DOUBLE_EQ(fs.QueueFactor("b"), 0.5);
  // b's share is split between its two active users; y used all of b's
  // usage against a half: 2^-2 within the queue, times the queue's 0.5.
  EXPECT_DOUBLE_EQ(fs.UserShare("b"), 0.375);
  EXPECT_DOUBLE_EQ(fs.UserFactor("b", "y"), 0.25);
  EXPECT_DOUBLE_EQ(fs.Factor("b", "y"), 0.125);
  // Who used nothing ranks first within the queue; the queue's own use
  // still counts.
  EXPECT_DOUBLE_EQ(fs.Factor("b", "z"), 0.5);
  // Many light users do not lift a heavy queue above a light one: a queue
  // that used three times its share ranks below one that used none.
  std::map<std::string, double> heavy{{"a", 400}};
  std::map<std::pair<std::string, std::string>, double> spread{
      {{"a", "x"}, 100}, {{"a", "y"}, 100}, {{"a", "z"}, 100},
      {{"a", "w"}, 100}};
  std::map<std::string, int64_t> many{{"a", 4}, {"b", 1}};
  FairShare skewed(weights, heavy, spread, many);
  EXPECT_LT(skewed.Factor("a", "x"), skewed.Factor("b", "v"));
  // No usage at all: every factor is 1.
  const std::map<std::string, double> no_usage;
  const std::map<std::pair<std::string, std::string>, double> no_users;
  FairShare empty(weights, no_usage, no_users, active);
  EXPECT_DOUBLE_EQ(empty.Factor("a", "x"), 1.0);

  PriorityWeights w;
  w.fair_share = 100;
  w.age = 10;
  w.max_age = absl::Hours(10);
  double age = 0;
  EXPECT_DOUBLE_EQ(EffectivePriority(5, 0.5, absl::Hours(5), w, &age),
                   5 + 50 + 5);
  EXPECT_DOUBLE_EQ(age, 0.5);
  EXPECT_DOUBLE_EQ(EffectivePriority(0, 1, absl::Hours(50), w), 110);
  EXPECT_DOUBLE_EQ(EffectivePriority(0, 1, -absl::Hours(1), w), 100);
}

TEST(QueuePolicyTest, UsageDecaysByHalfLifeAndNeverOnAClockStepBack) {
  const absl::Duration h = absl::Hours(1);
  const absl::Time t0 = absl::FromUnixSeconds(1800000000);
  DecayedUsage u;
  u.Add(100, t0, h);
  EXPECT_DOUBLE_EQ(u.At(t0 + h, h), 50);
  EXPECT_DOUBLE_EQ(u.At(t0 + 2 * h, h), 25);
  // A clock that went back decays nothing and grows nothing.
  EXPECT_DOUBLE_EQ(u.At(t0 - h, h), 100);
  u.Add(10, t0 - h, h);
  EXPECT_DOUBLE_EQ(u.value, 110);
  EXPECT_EQ(u.as_of, t0);
  u.Add(0, t0 + h, h);
  EXPECT_DOUBLE_EQ(u.value, 55);
}

TEST(QueuePolicyTest, ValidateQueueSpecNamesTheField) {
  auto check = [](const std::string& yaml_field,
                  std::function<void(v1::QueueSpec*)> change) {
    v1::QueueSpec spec;
    spec.set_name("research");
    change(&spec);
    absl::Status st = ValidateQueueSpec(&spec);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << yaml_field;
    EXPECT_EQ(std::string(st.message()).rfind(yaml_field + ":", 0), 0u)
        << st.message();
  };
  check("name", [](v1::QueueSpec* s) { s->set_name("no spaces"); });
  check("weight", [](v1::QueueSpec* s) { s->set_weight(-1); });
  check("weight", [](v1::QueueSpec* s) { s->set_weight(NAN); });
  check("cohort", [](v1::QueueSpec* s) { s->set_cohort("a/b"); });
  check("quotas[1].gpu_model", [](v1::QueueSpec* s) {
    s->add_quotas()->set_gpu_model("*");
    s->add_quotas()->set_gpu_model("*");
  });
  check("quotas[0].gpu_model",
        [](v1::QueueSpec* s) { s->add_quotas()->set_gpu_model("a\nb"); });
  check("quotas[0].nominal_gpus", [](v1::QueueSpec* s) {
    auto* q = s->add_quotas();
    q->set_gpu_model("*");
    q->set_nominal_gpus(-1);
  });
  check("quotas[0].lending_limit_gpus", [](v1::QueueSpec* s) {
    auto* q = s->add_quotas();
    q->set_gpu_model("*");
    q->set_nominal_gpus(2);
    q->mutable_lending_limit_gpus()->set_value(3);
  });
  check("quotas[0].borrowing_limit_gpus", [](v1::QueueSpec* s) {
    auto* q = s->add_quotas();
    q->set_gpu_model("*");
    q->mutable_borrowing_limit_gpus()->set_value(3);
  });
  check("default_time_limit", [](v1::QueueSpec* s) {
    s->mutable_default_time_limit()->set_seconds(7200);
    s->mutable_max_time_limit()->set_seconds(3600);
  });
  check("max_time_limit",
        [](v1::QueueSpec* s) { s->mutable_max_time_limit()->set_seconds(-1); });
  v1::QueueSpec ok;
  ok.set_name("research");
  ASSERT_TRUE(ValidateQueueSpec(&ok).ok());
  EXPECT_EQ(ok.weight(), 1);
}

// Random fleets of two GPU models, random queues with quotas in cohorts
// and per-user limits, random jobs starting and ending: after every pass,
// no queue holds more of a quota key than nominal + borrowing limit (its
// nominal alone without a cohort), a cohort never lends more than its
// queues leave unused within their lending limits, no user holds more than
// the per-user limit, and no node is overcommitted.
TEST(QueuePolicyTest, QuotasHoldOverRandomTraces) {
  for (int seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&](int n) {
      return std::uniform_int_distribution<int>(0, n - 1)(rng);
    };
    std::vector<std::string> models;
    const int nodes = 6 + pick(10);
    for (int i = 0; i < nodes; ++i) models.push_back(pick(2) ? kA100 : kH100);
    ClusterSnapshot base = Fleet(models);
    std::map<std::string, QueuePolicy> policies;
    const std::vector<std::string> queues{"q0", "q1", "q2", "q3"};
    for (const auto& q : queues) {
      std::map<std::string, Quota> quotas;
      for (const std::string key : {"*", kA100, kH100}) {
        if (pick(2) == 0) continue;
        Quota quota{pick(24), pick(3) == 0 ? -1 : pick(12), -1};
        if (pick(2) == 0) quota.lending_limit = pick(quota.nominal + 1);
        quotas[key] = quota;
      }
      const std::string cohort = pick(3) == 0 ? "" : (pick(2) ? "c1" : "c2");
      if (cohort.empty()) {
        for (auto& [k, quota] : quotas) quota.borrowing_limit = 0;
      }
      policies[q] = Policy(q, cohort, quotas, pick(2) ? 0 : 4 + pick(12));
    }
    struct Running {
      std::string queue, user;
      Placement placement;
      int ends;
    };
    std::vector<NodeCapacity> capacity = base.nodes;
    std::map<std::string, Running> running;
    std::vector<JobRequest> pending;
    int64_t seq = 0;
    for (int step = 0; step < 60; ++step) {
      for (int k = pick(6); k > 0; --k) {
        const int gpus = std::vector<int>{1, 2, 4, 8}[pick(4)];
        std::vector<std::string> want;
        if (pick(4) == 0) want.push_back(pick(2) ? kA100 : kH100);
        ++seq;
        pending.push_back(Job(std::to_string(seq), queues[pick(4)],
                              "u" + std::to_string(pick(3)), 1 + pick(2) * (gpus == 8),
                              gpus, seq, want));
      }
      for (auto it = running.begin(); it != running.end();) {
        if (it->second.ends > step) {
          ++it;
          continue;
        }
        for (const NodeShare& s : it->second.placement.shares) {
          for (auto& n : capacity) {
            if (n.name() == s.node) Release(&n, s);
          }
        }
        it = running.erase(it);
      }
      ClusterSnapshot snap;
      snap.nodes = capacity;
      snap.policies = policies;
      auto model_of = [&](const std::string& node, int32_t index) {
        for (const auto& n : capacity) {
          if (n.name() == node) return n.info->gpus[index].model;
        }
        return std::string();
      };
      for (const auto& [id, r] : running) {
        for (const NodeShare& s : r.placement.shares) {
          for (int32_t g : s.gpu_indices) {
            ++snap.queues[r.queue].gpus_by_model[model_of(s.node, g)];
            ++snap.queues[r.queue].user_gpus[r.user];
          }
        }
      }
      Decisions d = Schedule(snap, pending);
      std::map<std::string, JobRequest> by_id;
      for (const auto& j : pending) by_id[j.job_id] = j;
      for (const auto& [id, placement] : d.starts) {
        for (const NodeShare& s : placement.shares) {
          bool consumed = false;
          for (auto& n : capacity) {
            if (n.name() == s.node) consumed = Consume(&n, s);
          }
          ASSERT_TRUE(consumed) << "overcommitted " << s.node;
        }
        running[id] = {by_id[id].queue, by_id[id].user, placement,
                       step + 1 + pick(8)};
        pending.erase(std::find_if(pending.begin(), pending.end(),
                                   [&](const JobRequest& j) {
                                     return j.job_id == id;
                                   }));
      }
      // Check every invariant on what now runs.
      std::map<std::string, std::map<std::string, int64_t>> used, by_user;
      for (const auto& [id, r] : running) {
        const QueuePolicy& p = policies[r.queue];
        for (const NodeShare& s : r.placement.shares) {
          for (int32_t g : s.gpu_indices) {
            const std::string* key = p.KeyFor(model_of(s.node, g));
            ASSERT_NE(key, nullptr) << "job " << id << " on an uncovered model";
            ++used[r.queue][*key];
            ++by_user[r.queue][r.user];
          }
        }
      }
      std::map<std::pair<std::string, std::string>, int64_t> borrowed, lendable;
      for (const auto& [q, p] : policies) {
        for (const auto& [key, quota] : p.quotas) {
          const int64_t u = used[q][key];
          const int64_t limit =
              p.cohort.empty() || quota.borrowing_limit < 0
                  ? (p.cohort.empty() ? quota.nominal : INT64_MAX)
                  : quota.nominal + quota.borrowing_limit;
          EXPECT_LE(u, limit) << "seed " << seed << " queue " << q << " "
                              << key;
          if (p.cohort.empty()) continue;
          borrowed[{p.cohort, key}] += std::max<int64_t>(0, u - quota.nominal);
          const int64_t unused = std::max<int64_t>(0, quota.nominal - u);
          lendable[{p.cohort, key}] +=
              quota.lending_limit < 0 ? unused
                                      : std::min(unused, quota.lending_limit);
        }
        if (p.max_running_gpus_per_user > 0) {
          for (const auto& [user, n] : by_user[q]) {
            EXPECT_LE(n, p.max_running_gpus_per_user) << "seed " << seed;
          }
        }
      }
      for (const auto& [key, b] : borrowed) {
        EXPECT_LE(b, lendable[key]) << "seed " << seed << " cohort "
                                    << key.first << " " << key.second;
      }
    }
  }
}

// Three queues with weights 1, 2 and 3 always have more 1-GPU jobs than the
// fleet has GPUs; every step some jobs end, usage is counted and decays,
// effective priorities are made from fair share, and a pass starts jobs in
// their order. Over the long run each queue's GPU time is its weight's part
// within 5 %.
TEST(QueuePolicyTest, QueueSharesConvergeToTheirWeights) {
  const std::map<std::string, double> weights{{"w1", 1}, {"w2", 2}, {"w3", 3}};
  const absl::Duration half_life = absl::Hours(4);
  const absl::Duration step = absl::Minutes(1);
  PriorityWeights w;
  w.fair_share = 100;
  w.age = 0;
  std::vector<std::string> models(10, kH100);
  std::vector<NodeCapacity> capacity = Fleet(models).nodes;
  std::mt19937 rng(7);
  struct Running {
    std::string queue;
    NodeShare share;
    int ends;
  };
  std::vector<Running> running;
  std::map<std::string, DecayedUsage> queue_usage;
  std::map<std::pair<std::string, std::string>, DecayedUsage> user_usage;
  std::map<std::string, double> measured;
  int64_t seq = 0;
  const absl::Time t0 = absl::FromUnixSeconds(1800000000);
  const int steps = 3000, warmup = 1000;
  for (int s = 0; s < steps; ++s) {
    const absl::Time now = t0 + s * step;
    // Count the last step's GPU time, then end what is due.
    std::map<std::string, int64_t> gpus;
    for (const auto& r : running) ++gpus[r.queue];
    for (const auto& [q, n] : gpus) {
      queue_usage[q].Add(n * absl::ToDoubleSeconds(step), now, half_life);
      user_usage[{q, "u"}].Add(n * absl::ToDoubleSeconds(step), now,
                               half_life);
      if (s >= warmup) measured[q] += n;
    }
    for (auto it = running.begin(); it != running.end();) {
      if (it->ends > s) {
        ++it;
        continue;
      }
      for (auto& n : capacity) {
        if (n.name() == it->share.node) Release(&n, it->share);
      }
      it = running.erase(it);
    }
    std::map<std::string, double> usage;
    std::map<std::pair<std::string, std::string>, double> users;
    for (const auto& [q, u] : queue_usage) usage[q] = u.At(now, half_life);
    for (const auto& [k, u] : user_usage) users[k] = u.At(now, half_life);
    const std::map<std::string, int64_t> active{{"w1", 1}, {"w2", 1}, {"w3", 1}};
    FairShare fs(weights, usage, users, active);
    // Every queue always has more waiting than the fleet holds.
    std::vector<JobRequest> pending;
    for (const auto& [q, weight] : weights) {
      for (int k = 0; k < 100; ++k) {
        JobRequest j = Job(std::to_string(++seq), q, "u", 1, 1, seq);
        j.effective_priority =
            EffectivePriority(0, fs.Factor(q, "u"), absl::ZeroDuration(), w);
        pending.push_back(j);
      }
    }
    ClusterSnapshot snap;
    snap.nodes = capacity;
    Decisions d = Schedule(snap, pending);
    std::map<std::string, std::string> queue_of;
    for (const auto& j : pending) queue_of[j.job_id] = j.queue;
    for (const auto& [id, placement] : d.starts) {
      for (auto& n : capacity) {
        if (n.name() == placement.shares[0].node) {
          ASSERT_TRUE(Consume(&n, placement.shares[0]));
        }
      }
      // Jobs run 10 to 60 minutes.
      running.push_back({queue_of[id], placement.shares[0],
                         s + 10 + std::uniform_int_distribution<int>(0, 50)(rng)});
    }
  }
  double total = 0;
  for (const auto& [q, m] : measured) total += m;
  ASSERT_GT(total, 0);
  for (const auto& [q, weight] : weights) {
    const double got = measured[q] / total;
    const double want = weight / 6.0;
    EXPECT_NEAR(got / want, 1.0, 0.05)
        << q << ": " << got << " of GPU time, weight's part " << want;
    printf("queue %s: weight part %.3f, GPU time part %.3f (ratio %.3f)\n",
           q.c_str(), want, got, got / want);
  }
}

}  // namespace
}  // namespace xl::scheduler
