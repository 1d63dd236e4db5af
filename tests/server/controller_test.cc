// The controller with a real store, a fake clock and fake agent connections:
// the environment of ranks, success, failure, requeue on node loss, time
// limits, idempotency and cancel. No gRPC, no sleeps on the clock.
#include <string>
#include <tuple>
#include <vector>

#include "common/duration.h"
#include "server/control/launch.h"
#include "tests/server/controller_fixture.h"

namespace xl::control {
namespace {

v1::GetJobMetricsRequest MetricsOf(const std::string& id) {
  v1::GetJobMetricsRequest r;
  r.set_job_id(id);
  return r;
}

TEST_F(ControllerTest, RanksGetTorchrunEnvironmentAndJobSucceeds) {
  auto a = AddNode("a", 2);
  auto b = AddNode("b", 2);
  std::string id = Submit(2, 2);
  controller_->Tick();
  auto sa = a->WaitFor(v1::SchedulerMessage::kStartRanks).start_ranks();
  auto sb = b->WaitFor(v1::SchedulerMessage::kStartRanks).start_ranks();
  ASSERT_EQ(sa.ranks_size(), 2);
  ASSERT_EQ(sb.ranks_size(), 2);
  const auto& env = sb.ranks(1).env();
  EXPECT_EQ(env.at("RANK"), "3");
  EXPECT_EQ(env.at("WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.0.0.1");
  const int port = std::stoi(env.at("MASTER_PORT"));
  EXPECT_GE(port, 29500);
  EXPECT_LT(port, 30500);
  EXPECT_EQ(sa.ranks(0).env().at("MASTER_PORT"), env.at("MASTER_PORT"));
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(env.at("NCCL_IB_HCA"), "=ib0");
  EXPECT_EQ(env.at("XL_JOB_ID"), id);
  EXPECT_EQ(env.at("XL_ATTEMPT"), "1");
  EXPECT_EQ(env.at("XL_SCHEDULER"), "127.0.0.1:7070");
  EXPECT_EQ(env.at("XL_RENDEZVOUS_TOKEN"), sa.ranks(0).env().at("XL_RENDEZVOUS_TOKEN"));

  for (int r = 0; r < 2; ++r) Report("a", a.get(), id, 1, r, v1::RANK_RUNNING);
  for (int r = 2; r < 4; ++r) Report("b", b.get(), id, 1, r, v1::RANK_RUNNING);
  EXPECT_EQ(WaitState(id, v1::RUNNING), v1::RUNNING);
  for (int r = 0; r < 2; ++r) Report("a", a.get(), id, 1, r, v1::RANK_EXITED);
  for (int r = 2; r < 4; ++r) Report("b", b.get(), id, 1, r, v1::RANK_EXITED);
  EXPECT_EQ(WaitState(id, v1::SUCCEEDED), v1::SUCCEEDED);
  EXPECT_EQ(controller_->GetQueue().gpus_in_use(), 0);
}

// The NCCL network variables BuildStartRanks sets for a node with `nics`
// (name, kind, Gb/s): the shared environment of one rank.
google::protobuf::Map<std::string, std::string> LaunchEnvWithNics(
    const std::vector<std::tuple<std::string, v1::NicKind, double>>& nics) {
  v1::Job job;
  job.set_id("7");
  job.set_attempt(1);
  job.mutable_spec()->add_command("/bin/true");
  job.mutable_spec()->mutable_resources()->set_ranks_per_node(1);
  v1::Allocation a;
  a.set_node("n");
  a.add_ranks(0);
  a.add_gpu_indices(0);
  v1::NodeInventory inv;
  for (const auto& [name, kind, gbps] : nics) {
    v1::Nic* nic = inv.add_nics();
    nic->set_name(name);
    nic->set_kind(kind);
    nic->set_gbps(gbps);
  }
  return BuildStartRanks(job, a, inv, LaunchContext{})
      .start_ranks()
      .ranks(0)
      .env();
}

// xl-train's batch_per_rank: auto on CPU is sized from the job's memory
// per node: the ranks get it when the job asked for memory, not otherwise
// (nor when the scheduler derived the figure).
TEST(LaunchEnvTest, TheJobsMemoryPerNodeReachesTheRanks) {
  v1::Job job;
  job.set_id("8");
  job.set_attempt(1);
  job.mutable_spec()->add_command("/bin/true");
  job.mutable_spec()->mutable_resources()->set_ranks_per_node(1);
  v1::Allocation a;
  a.set_node("n");
  a.add_ranks(0);
  auto env = [&] {
    return BuildStartRanks(job, a, v1::NodeInventory(), LaunchContext{})
        .start_ranks()
        .ranks(0)
        .env();
  };
  EXPECT_EQ(env().count("XL_MEMORY_BYTES_PER_NODE"), 0u);
  job.mutable_spec()->mutable_resources()->set_memory_bytes_per_node(
      8ull << 30);
  EXPECT_EQ(env().at("XL_MEMORY_BYTES_PER_NODE"), "8589934592");
  // A figure the planner derived from the default batch is not the job's:
  // auto would size the batch back to that default.
  job.set_memory_derived(true);
  EXPECT_EQ(env().count("XL_MEMORY_BYTES_PER_NODE"), 0u);
}

// An 8-rail node: every 400 Gb/s HCA goes to NCCL, in the inventory's
// order, as exact names (mlx5_1 must not also take mlx5_10, the slower
// storage HCA); the management Ethernet port is not named.
TEST(LaunchEnvTest, EveryRailOfTheFastestSpeedIsAnExactNcclIbHca) {
  std::vector<std::tuple<std::string, v1::NicKind, double>> nics = {
      {"eno1", v1::ETHERNET, 25}};
  for (int i = 0; i < 8; ++i) {
    nics.emplace_back(absl::StrCat("mlx5_", i), v1::INFINIBAND, 400);
  }
  nics.emplace_back("mlx5_10", v1::INFINIBAND, 200);  // storage fabric
  auto env = LaunchEnvWithNics(nics);
  EXPECT_EQ(env.at("NCCL_IB_HCA"),
            "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7");
  EXPECT_EQ(env.count("NCCL_SOCKET_IFNAME"), 0u);
}

// Mixed nodes: the speed decides, then the kind. A faster Ethernet port
// wins over slower HCAs (one interface, as NCCL_SOCKET_IFNAME); a tie
// between Ethernet and HCAs (RoCE shows one card as both) goes to the
// HCAs; Ethernet ports of one speed give the first of them only.
TEST(LaunchEnvTest, MixedNodesGetTheFastestKind) {
  auto eth = LaunchEnvWithNics({{"mlx5_0", v1::INFINIBAND, 100},
                                {"mlx5_1", v1::INFINIBAND, 100},
                                {"ens1", v1::ETHERNET, 200},
                                {"ens2", v1::ETHERNET, 200}});
  EXPECT_EQ(eth.at("NCCL_SOCKET_IFNAME"), "ens1");
  EXPECT_EQ(eth.count("NCCL_IB_HCA"), 0u);

  auto roce = LaunchEnvWithNics({{"ens1f0np0", v1::ETHERNET, 400},
                                 {"ens2f0np0", v1::ETHERNET, 400},
                                 {"mlx5_0", v1::INFINIBAND, 400},
                                 {"mlx5_1", v1::INFINIBAND, 400},
                                 {"mlx5_2", v1::INFINIBAND, 100}});
  EXPECT_EQ(roce.at("NCCL_IB_HCA"), "=mlx5_0,mlx5_1");
  EXPECT_EQ(roce.count("NCCL_SOCKET_IFNAME"), 0u);

  auto none = LaunchEnvWithNics({});
  EXPECT_EQ(none.count("NCCL_IB_HCA") + none.count("NCCL_SOCKET_IFNAME"), 0u);
}

// Two ranks on one GPU fail NCCL on every attempt: such a job is refused
// at submit, with the numbers and the fix, and leaves no job behind.
TEST_F(ControllerTest, MoreRanksThanGpusPerNodeIsRefusedAndChangesNothing) {
  auto a = AddNode("a", 8);
  v1::SubmitJobRequest req;
  req.set_idempotency_key("two-per-gpu");
  req.mutable_spec()->add_command("/bin/true");
  auto* r = req.mutable_spec()->mutable_resources();
  r->set_nodes(2);
  r->set_min_nodes(1);  // elastic: the same check
  r->set_gpus_per_node(8);
  r->set_ranks_per_node(16);
  absl::Status st = SubmitRequest(req).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "resources.ranks_per_node: 16 ranks per node but gpus_per_node "
            "is 8; a GPU rank needs its own GPU (NCCL cannot put two ranks "
            "of one job on one GPU): set ranks_per_node to 8 or less, or "
            "gpus_per_node to 16");
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 0);
  // The key was not taken: the fixed request makes a new job.
  r->set_ranks_per_node(8);
  auto fixed = SubmitRequest(req);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_TRUE(fixed->created());
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 1);
}

// The agent runs the ranks as the submitter, within what the job asked for
// on each node.
TEST_F(ControllerTest, StartRanksCarriesTheSubmitterAndTheNodesLimits) {
  auto a = AddNode("a", 2);
  v1::SubmitJobRequest req;
  auto* spec = req.mutable_spec();
  spec->add_command("/bin/true");
  spec->mutable_resources()->set_nodes(1);
  spec->mutable_resources()->set_gpus_per_node(1);
  spec->mutable_resources()->set_cpus_per_node(3);
  spec->mutable_resources()->set_memory_bytes_per_node(5ull << 30);
  ASSERT_TRUE(SubmitRequest(req).ok());
  controller_->Tick();
  auto start = a->WaitFor(v1::SchedulerMessage::kStartRanks).start_ranks();
  EXPECT_EQ(start.user(), "alice");
  EXPECT_EQ(start.limits().memory_bytes(), 5ull << 30);
  EXPECT_EQ(start.limits().cpus(), 3);
  ASSERT_EQ(start.limits().gpu_indices_size(), 1);
  EXPECT_EQ(start.limits().gpu_indices(0),
            std::stoi(start.ranks(0).env().at("CUDA_VISIBLE_DEVICES")));
}

TEST_F(ControllerTest, FailedRankFailsTheGangAndStopsEveryNode) {
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  std::string id = Submit(2, 1);
  controller_->Tick();
  a->WaitFor(v1::SchedulerMessage::kStartRanks);
  b->WaitFor(v1::SchedulerMessage::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Report("b", b.get(), id, 1, 1, v1::RANK_EXITED, 1);
  EXPECT_EQ(WaitState(id, v1::FAILED), v1::FAILED);
  auto stop = a->WaitFor(v1::SchedulerMessage::kStopJob).stop_job();
  EXPECT_EQ(stop.job_id(), id);
  auto job = *controller_->GetJob(id);
  EXPECT_EQ(job.exit_code(), 1);
  EXPECT_NE(job.reason().find("rank 1 on b exited with code 1"), std::string::npos) << job.reason();
  // a's GPU stays held until its rank has really exited.
  EXPECT_EQ(controller_->GetQueue().gpus_in_use(), 1);
  Report("a", a.get(), id, 1, 0, v1::RANK_EXITED, 143);
  EXPECT_EQ(controller_->GetQueue().gpus_in_use(), 0);
}

TEST_F(ControllerTest, LostNodeRequeuesOntoOthers) {
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  std::string id = Submit(1, 1, "", /*retries=*/1);
  controller_->Tick();
  auto sa = a->WaitFor(v1::SchedulerMessage::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  EXPECT_EQ(WaitState(id, v1::RUNNING), v1::RUNNING);
  // b keeps heartbeating, a falls silent.
  clock_.Advance(absl::Seconds(6));
  controller_->AgentMessage("b", b.get(), v1::AgentMessage());
  clock_.Advance(absl::Seconds(6));
  Beat("b", b.get());
  controller_->Tick();
  EXPECT_FALSE(a->closed().empty());
  // The next attempt waits until a's agent has surely stopped the ranks:
  // its lease ran out now, and it kills them within the grace (10 s) plus a
  // heartbeat for the clocks' difference.
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::PENDING);
  EXPECT_NE(controller_->GetJob(id)->reason().find("lease ran out"),
            std::string::npos)
      << controller_->GetJob(id)->reason();
  clock_.Advance(absl::Seconds(10));
  Beat("b", b.get());
  controller_->Tick();
  Settle();
  EXPECT_EQ(b->Count(v1::SchedulerMessage::kStartRanks), 0);
  clock_.Advance(absl::Seconds(2));
  Beat("b", b.get());
  controller_->Tick();
  auto sb = b->WaitFor(v1::SchedulerMessage::kStartRanks).start_ranks();
  EXPECT_EQ(sb.attempt(), 2);
  auto job = *controller_->GetJob(id);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.allocations(0).node(), "b");
  auto node = *controller_->GetNode("a");
  EXPECT_EQ(node.state(), v1::LOST);
}

TEST_F(ControllerTest, TimeLimitStopsTheJob) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1, "", 0, /*time_limit_s=*/60);
  controller_->Tick();
  a->WaitFor(v1::SchedulerMessage::kStartRanks);
  clock_.Advance(absl::Seconds(5));
  controller_->AgentMessage("a", a.get(), v1::AgentMessage());
  controller_->Tick();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::SCHEDULED);
  clock_.Advance(absl::Seconds(56));
  controller_->AgentMessage("a", a.get(), v1::AgentMessage());
  controller_->Tick();
  EXPECT_EQ(WaitState(id, v1::FAILED), v1::FAILED);
  EXPECT_NE(controller_->GetJob(id)->reason().find("time limit of 1m0s"), std::string::npos);
  a->WaitFor(v1::SchedulerMessage::kStopJob);
}

// A blocked gang gets a reservation: GetJob says when and where, and a job
// submitted after it (a pass over new jobs only) does not take the held
// node.
TEST_F(ControllerTest, ABlockedGangIsReservedAndShownWithItsEstimatedStart) {
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  std::string running = Submit(1, 1, "", 0, /*time_limit_s=*/3600);
  controller_->Tick();
  Settle();
  const std::string busy = controller_->GetJob(running)->allocations(0).node();
  std::string big = Submit(2, 1);
  controller_->Tick();
  Settle();
  v1::Job got = *controller_->GetJob(big);
  EXPECT_EQ(got.state(), v1::PENDING);
  ASSERT_TRUE(got.has_estimated_start_time()) << got.reason();
  EXPECT_EQ(xl::FromProto(got.estimated_start_time()),
            xl::FromProto(controller_->GetJob(running)->start_time()) +
                absl::Hours(1));
  EXPECT_NE(got.reason().find("reserved: expected to start by"), std::string::npos)
      << got.reason();
  std::string small = Submit(1, 1);
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(small)->state(), v1::PENDING)
      << "took " << (busy == "a" ? "b" : "a") << ", held for " << big;
  EXPECT_FALSE(controller_->GetJob(small)->has_estimated_start_time());

  // xlctl explain: its place, what is ahead (the reserved gang, with its
  // estimate), the GPUs asked for ahead, how the rank is made.
  auto explained = controller_->ExplainJob(small);
  ASSERT_TRUE(explained.ok()) << explained.status();
  EXPECT_EQ(explained->position(), 2);
  EXPECT_EQ(explained->pending(), 2);
  EXPECT_EQ(explained->gpus_ahead(), 2);
  ASSERT_EQ(explained->ahead_size(), 1);
  EXPECT_EQ(explained->ahead(0).job_id(), big);
  EXPECT_TRUE(explained->ahead(0).has_estimated_start_time());
  EXPECT_EQ(explained->priority().submit_order(), std::stoll(small));
  auto first = controller_->ExplainJob(big);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->position(), 1);
  EXPECT_EQ(first->ahead_size(), 0);
  auto done = controller_->ExplainJob(running);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->position(), 0);
  EXPECT_EQ(controller_->ExplainJob("999").status().code(),
            absl::StatusCode::kNotFound);
}

// after_ok: a job waits for others to succeed, saying so; it fails when
// one cannot; a dependency that does not exist or already failed is
// refused at submit, naming the field, and nothing is stored.
TEST_F(ControllerTest, AfterOkWaitsForSuccessAndFailsWhenItCannotHappen) {
  auto a = AddNode("a", 1);
  std::string first = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(v1::SchedulerMessage::kStartRanks);
  auto submit_after = [&](const std::vector<std::string>& deps) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_command("/bin/true");
    for (const auto& d : deps) req.mutable_spec()->add_after_ok(d);
    return SubmitRequest(req);
  };
  auto then = submit_after({first});
  ASSERT_TRUE(then.ok()) << then.status();
  controller_->Tick();
  Settle();
  v1::Job waiting = *controller_->GetJob(then->job_id());
  EXPECT_EQ(waiting.state(), v1::PENDING) << "it needs no GPU, only job " << first;
  EXPECT_NE(waiting.reason().find("waits for job " + first), std::string::npos)
      << waiting.reason();

  // A dependent is not in the queue yet: explain says so.
  auto explained = controller_->ExplainJob(then->job_id());
  ASSERT_TRUE(explained.ok());
  EXPECT_EQ(explained->position(), 0);

  // A chain waits for a pending job that is then cancelled: the whole
  // chain fails at once, without a pass per link.
  std::string blocked = Submit(1, 1);  // waits for the only GPU
  auto doomed = submit_after({blocked});
  ASSERT_TRUE(doomed.ok());
  auto doomed2 = submit_after({doomed->job_id(), "0" + first});
  ASSERT_TRUE(doomed2.ok()) << doomed2.status();
  EXPECT_EQ(controller_->GetJob(doomed2->job_id())->spec().after_ok_size(), 2);
  {
    absl::Mutex mu;
    bool done = false;
    v1::CancelJobRequest req;
    req.set_job_id(blocked);
    controller_->Cancel("alice", req, [&](absl::StatusOr<v1::Job>) {
      absl::MutexLock l(&mu);
      done = true;
    });
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(&done));
  }
  EXPECT_EQ(WaitState(doomed->job_id(), v1::FAILED), v1::FAILED);
  EXPECT_EQ(WaitState(doomed2->job_id(), v1::FAILED), v1::FAILED);
  EXPECT_NE(controller_->GetJob(doomed->job_id())->reason().find(
                "job " + blocked + " ended CANCELLED"),
            std::string::npos)
      << controller_->GetJob(doomed->job_id())->reason();

  // The first succeeds: the waiting job starts.
  Report("a", a.get(), first, 1, 0, v1::RANK_RUNNING);
  Report("a", a.get(), first, 1, 0, v1::RANK_EXITED, 0);
  EXPECT_EQ(WaitState(first, v1::SUCCEEDED), v1::SUCCEEDED);
  controller_->Tick();
  Settle();
  EXPECT_NE(controller_->GetJob(then->job_id())->state(), v1::PENDING)
      << controller_->GetJob(then->job_id())->reason();

  // Refused at submit, naming the field; nothing stored.
  const int64_t before = controller_->ListJobs(v1::ListJobsRequest())->jobs_size();
  auto missing = submit_after({"999"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message().rfind("after_ok[0]: job 999", 0), 0u)
      << missing.status();
  auto hopeless = submit_after({first, blocked});
  EXPECT_EQ(hopeless.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(hopeless.status().message().find("after_ok[1]"), std::string::npos)
      << hopeless.status();
  auto garbage = submit_after({"x; rm"});
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(controller_->ListJobs(v1::ListJobsRequest())->jobs_size(), before);
}

TEST_F(ControllerTest, IdempotencyKeyGivesOneJobAcrossRestart) {
  std::string first = Submit(1, 0, "key-1");
  std::string again = Submit(1, 0, "key-1");
  EXPECT_EQ(first, again);
  Open();  // a restart of the scheduler
  EXPECT_EQ(Submit(1, 0, "key-1"), first);
  EXPECT_NE(Submit(1, 0, "key-2"), first);
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 2);
}

TEST_F(ControllerTest, IdempotencyKeysAreEachUsersOwn) {
  std::string alices = Submit(1, 0, "key-1");
  user_ = "bob";
  std::string bobs = Submit(1, 0, "key-1");
  EXPECT_NE(alices, bobs) << "bob's submit was answered with alice's job";
  EXPECT_EQ(controller_->GetJob(bobs)->user(), "bob");
  Open();
  EXPECT_EQ(Submit(1, 0, "key-1"), bobs);
  user_ = "alice";
  EXPECT_EQ(Submit(1, 0, "key-1"), alices);
}

TEST_F(ControllerTest, PendingJobsPerUserAreLimited) {
  submit_limits_.max_pending = 3;
  Open();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(Submit(1, 0));
  auto refused = TrySubmit(1, 0);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_NE(refused.status().message().find("--max-pending-per-user 3"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 3) << "a refusal changed state";
  user_ = "bob";  // another user is not held back by alice's queue
  Submit(1, 0);
  user_ = "alice";
  ASSERT_TRUE(CancelSync(ids[0]).ok());
  Submit(1, 0);
  // The count is rebuilt from the store after a restart.
  Open();
  EXPECT_EQ(TrySubmit(1, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(ControllerTest, SubmitRatePerUserIsLimited) {
  submit_limits_.rate = 2;
  submit_limits_.burst = 3;
  Open();
  for (int i = 0; i < 3; ++i) Submit(1, 0);
  auto refused = TrySubmit(1, 0);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("retry in 0.50s"),
            std::string::npos)
      << refused.status();
  clock_.StepWall(absl::Hours(1));  // a wall step refills nothing
  EXPECT_FALSE(TrySubmit(1, 0).ok());
  clock_.Advance(absl::Milliseconds(500));
  Submit(1, 0);
  EXPECT_FALSE(TrySubmit(1, 0).ok());
  user_ = "bob";
  Submit(1, 0);
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 5);
}

// A pending job's reason is the pass's, kept in memory (not written at
// every pass): after a restart the job is pending and says it waits for the
// first pass, and that pass gives it its reason again.
TEST_F(ControllerTest, PendingJobSurvivesRestartAndThePassGivesItsReasonAgain) {
  std::string id = Submit(3, 8);
  controller_->Tick();
  auto job = *controller_->GetJob(id);
  EXPECT_NE(job.reason().find("no node is registered"), std::string::npos) << job.reason();
  Open();
  job = *controller_->GetJob(id);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.reason(), "waiting for the next scheduling pass");
  controller_->Tick();
  job = *controller_->GetJob(id);
  EXPECT_NE(job.reason().find("no node is registered"), std::string::npos)
      << "after the first pass: " << job.reason();
}

TEST_F(ControllerTest, CancelPendingAndFinished) {
  std::string id = Submit(1, 0);
  ASSERT_TRUE(CancelSync(id).ok());
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::CANCELLED);
  EXPECT_EQ(CancelSync(id).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ControllerTest, RendezvousIsScopedToTheRunningAttemptAndBlocks) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  controller_->Tick();
  auto start = a->WaitFor(v1::SchedulerMessage::kStartRanks).start_ranks();
  const std::string token = start.ranks(0).env().at("XL_RENDEZVOUS_TOKEN");
  v1::RendezvousScope scope;
  scope.set_job_id(id);
  scope.set_attempt(1);
  scope.set_token("wrong");
  v1::RendezvousPutRequest put;
  *put.mutable_scope() = scope;
  put.set_key("nccl/unique_id");
  put.set_value("id-bytes");
  EXPECT_EQ(controller_->rendezvous()->Put(put).code(),
            absl::StatusCode::kPermissionDenied);

  put.mutable_scope()->set_token(token);
  v1::RendezvousGetRequest get;
  *get.mutable_scope() = put.scope();
  get.add_keys("nccl/unique_id");
  absl::Mutex mu;
  std::vector<absl::StatusOr<std::vector<std::string>>> results;
  auto record = [&](absl::StatusOr<std::vector<std::string>> r) {
    absl::MutexLock lock(&mu);
    results.push_back(std::move(r));
  };
  controller_->rendezvous()->Get(get, record);
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(results.empty());  // waits for the key
  }
  ASSERT_TRUE(controller_->rendezvous()->Put(put).ok());
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(results.size(), 1u);
    ASSERT_TRUE(results[0].ok());
    EXPECT_EQ((*results[0])[0], "id-bytes");
  }
  // A key nobody sets: DEADLINE_EXCEEDED naming it, on the fake clock.
  v1::RendezvousGetRequest missing = get;
  missing.set_keys(0, "gloo/rank3");
  missing.mutable_timeout()->set_seconds(30);
  controller_->rendezvous()->Get(missing, record);
  clock_.Advance(absl::Seconds(31));
  controller_->AgentMessage("a", a.get(), v1::AgentMessage());
  controller_->Tick();
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[1].status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_NE(results[1].status().message().find("gloo/rank3"), std::string::npos);
  }
  // Once the attempt ends its waiters are released and its scope is closed.
  controller_->rendezvous()->Get(missing, record);
  Report("a", a.get(), id, 1, 0, v1::RANK_EXITED, 1);
  controller_->Tick();
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(results.size(), 3u);
    EXPECT_EQ(results[2].status().code(), absl::StatusCode::kAborted);
  }
  EXPECT_EQ(controller_->rendezvous()->Put(put).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(ControllerTest, TrainJobRunsXlTrainAndKeepsRankZeroMetrics) {
  auto a = AddNode("a", 0);
  v1::SubmitJobRequest req;
  req.mutable_spec()->mutable_train()->set_steps(50);
  req.mutable_spec()->mutable_resources()->set_nodes(1);
  auto submitted = SubmitRequest(req);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = submitted->job_id();
  controller_->Tick();
  auto start = a->WaitFor(v1::SchedulerMessage::kStartRanks).start_ranks();
  ASSERT_GE(start.argv_size(), 3);
  EXPECT_EQ(start.argv(0), "xl-train");
  EXPECT_EQ(start.argv(1), "--spec-json");
  EXPECT_NE(start.argv(2).find("\"steps\":50"), std::string::npos) << start.argv(2);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  v1::AgentMessage msg;
  auto* m = msg.mutable_metrics();
  m->set_job_id(id);
  m->set_attempt(1);
  m->set_rank(0);
  m->set_step(10);
  m->set_total_steps(50);
  m->set_loss(0.75);
  controller_->AgentMessage("a", a.get(), msg);
  m->set_rank(1);  // only rank 0 speaks for the job
  m->set_loss(9);
  controller_->AgentMessage("a", a.get(), msg);
  auto job = *controller_->GetJob(id);
  // Its model was filled in from the MLP, and its memory derived from it.
  EXPECT_EQ(job.spec().model().mlp().hidden_dim(), 1024);
  EXPECT_GT(job.plan().memory_per_gpu().total_bytes(), 0u);
  EXPECT_EQ(job.spec().resources().memory_bytes_per_node(),
            job.plan().memory_per_gpu().total_bytes());
  // The planner's figure (tensors only) places the job but limits nothing.
  EXPECT_TRUE(job.memory_derived());
  EXPECT_EQ(start.limits().memory_bytes(), 0u);
  EXPECT_EQ(start.user(), "alice");
  EXPECT_EQ(job.metrics().step(), 10);
  EXPECT_DOUBLE_EQ(job.metrics().loss(), 0.75);
  ASSERT_TRUE(store_->WriteSync([](store::Tx&) { return absl::OkStatus(); }).ok());
  auto history = controller_->GetJobMetrics(MetricsOf(id));
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->points_size(), 1);
  EXPECT_EQ(history->points(0).step(), 10);
}

TEST_F(ControllerTest, JobSizedFromItsModel) {
  auto a = AddNode("a", 8);
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_command("/bin/true");
  auto* model = req.mutable_spec()->mutable_model();
  model->set_parameters(7.5e9);
  model->set_sharding(v1::ZERO_3);
  model->set_gpus(64);
  auto r = SubmitRequest(req);
  ASSERT_TRUE(r.ok()) << r.status();
  auto job = *controller_->GetJob(r->job_id());
  const auto& res = job.spec().resources();
  EXPECT_EQ(res.gpus_per_node(), 8);
  EXPECT_EQ(res.nodes(), 8);
  EXPECT_EQ(res.min_gpu_memory_bytes(), job.plan().memory_per_gpu().total_bytes());
  // ZeRO-3 over 64 GPUs: 16 B x 7.5e9 / 64 = 1.875 GB of model states each.
  const auto& m = job.plan().memory_per_gpu();
  EXPECT_EQ(m.weights_bytes() + m.gradients_bytes() + m.optimizer_bytes() +
                m.master_weights_bytes(),
            1875000000u);
  EXPECT_FALSE(job.plan().arithmetic().empty());
  // No grace given: the time to write its checkpoint (14 B x 7.5e9 = 105
  // GB: 10 s + 2 x 105 s), said in the plan's arithmetic.
  EXPECT_EQ(job.plan().checkpoint_bytes(), 105000000000u);
  EXPECT_EQ(job.spec().grace_period().seconds(), 220);
  EXPECT_NE(job.plan().arithmetic(job.plan().arithmetic_size() - 1)
                .find("grace period"),
            std::string::npos);
  // A grace the job gives is its own.
  v1::SubmitJobRequest given = req;
  given.mutable_spec()->mutable_grace_period()->set_seconds(30);
  auto g = SubmitRequest(given);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(controller_->GetJob(g->job_id())->spec().grace_period().seconds(),
            30);
  // 8 nodes are needed and one exists: it waits, saying so.
  controller_->Tick();
  EXPECT_NE(controller_->GetJob(r->job_id())->reason().find("8 nodes"),
            std::string::npos);
}

TEST_F(ControllerTest, ModelThatFitsNowhereIsRejectedWithNumbers) {
  auto a = AddNode("a", 8);
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_command("/bin/true");
  req.mutable_spec()->mutable_model()->set_parameters(7.5e9);  // 120 GB/GPU
  req.mutable_spec()->mutable_resources()->set_gpus_per_node(8);
  auto r = SubmitRequest(req);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "model: needs")) << r.status();
  EXPECT_NE(r.status().message().find("ZERO_3"), std::string::npos);
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 0);
  auto plan = controller_->PlanResources(req.spec().model());
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->warnings().empty());
}

TEST_F(ControllerTest, BadTrainSpecIsRejectedNamingTheField) {
  v1::SubmitJobRequest req;
  req.mutable_spec()->mutable_train()->set_hidden_dim(-4);
  absl::Status status = SubmitRequest(req).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(), "train.hidden_dim")) << status;
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 0);
}

// Most of the fleet silent at once is more likely the scheduler's own
// network than that many nodes: none is counted lost (nothing requeued)
// while the brake holds, `xlctl nodes` says why, and the nodes that come
// back find their jobs as they were. One node of three silent is lost as
// always; and a brake held past its maximum gives way.
TEST_F(ControllerTest, MostOfTheFleetSilentAtOnceRequeuesNothing) {
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  auto c = AddNode("c", 1);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(Submit(1, 1, "", /*retries=*/1));
  controller_->Tick();
  for (auto* conn : {a.get(), b.get(), c.get()}) {
    conn->WaitFor(v1::SchedulerMessage::kStartRanks);
  }
  Settle();
  // Only c is heard from: 2 of 3 silent.
  clock_.Advance(absl::Seconds(11));
  Beat("c", c.get());
  controller_->Tick();
  Settle();
  for (const std::string& id : ids) {
    EXPECT_EQ(controller_->GetJob(id)->attempt(), 1) << id;
  }
  const v1::Node silent = *controller_->GetNode("a");
  EXPECT_EQ(silent.state(), v1::READY);
  EXPECT_NE(silent.state_reason().find("2 of 3 nodes went silent at once"),
            std::string::npos)
      << silent.state_reason();
  // They come back: nothing was lost, the brake lets go.
  Beat("a", a.get());
  Beat("b", b.get());
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetNode("a")->state_reason().find("not counted lost"),
            std::string::npos);
  // One of three silent is a lost node as ever.
  clock_.Advance(absl::Seconds(11));
  Beat("b", b.get());
  Beat("c", c.get());
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetNode("a")->state(), v1::LOST);
  // Two of the two left silent past the brake's maximum (5 min): lost.
  clock_.Advance(absl::Seconds(11));
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetNode("b")->state(), v1::READY);
  clock_.Advance(absl::Minutes(5));
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetNode("b")->state(), v1::LOST);
  EXPECT_EQ(controller_->GetNode("c")->state(), v1::LOST);
}

// An agent that heartbeats but whose supervisor is stuck (a hung mount,
// a blocked exec) gets no new work, and the node says why, until its
// supervisor runs again.
TEST_F(ControllerTest, ANodeWhoseSupervisorIsStuckGetsNoNewWork) {
  auto a = AddNode("a", 1);
  v1::AgentMessage beat;
  beat.mutable_heartbeat()->set_seq(1);
  beat.mutable_heartbeat()->set_supervisor_stalled_ms(30000);
  controller_->AgentMessage("a", a.get(), beat);
  const std::string id = Submit(1, 1);
  controller_->Tick();
  Settle();
  EXPECT_EQ(a->Count(v1::SchedulerMessage::kStartRanks), 0);
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::PENDING);
  EXPECT_NE(controller_->GetNode("a")->state_reason().find(
                "its agent's supervisor has not run for 30s"),
            std::string::npos)
      << controller_->GetNode("a")->state_reason();
  beat.mutable_heartbeat()->set_supervisor_stalled_ms(200);
  controller_->AgentMessage("a", a.get(), beat);
  controller_->Tick();
  a->WaitFor(v1::SchedulerMessage::kStartRanks);
}

}  // namespace
}  // namespace xl::control
