// The control plane's fences, each shown against the real controller and
// store: a failed write has no effect and puts the scheduler in degraded
// mode; liveness ignores wall-clock steps; resources stay held until ranks
// are really gone; agents speak only for their own ranks; undelivered
// assignments spend no retry; tokens and rank exits survive a restart.
#include "tests/server/controller_fixture.h"

#include "common/duration.h"
#include "common/limits.h"

namespace xl::control {
namespace {

using Msg = v1::SchedulerMessage;

absl::Status DiskFull() {
  return absl::ResourceExhaustedError("database or disk is full");
}

TEST_F(ControllerTest, FailedWriteOfAStartSendsNothingAndDegrades) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  faulty_->FailWrites(DiskFull());
  controller_->Tick();  // places the job; its write fails
  Settle();
  EXPECT_EQ(a->Count(Msg::kStartRanks), 0) << "acted on an unrecorded start";
  // Readers see what is on disk, not the lost transition.
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::PENDING);
  // Writes are refused, saying why and what to do.
  absl::Status writable = controller_->Writable();
  EXPECT_EQ(writable.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(writable.message().find("disk is full"), std::string::npos)
      << writable;
  EXPECT_NE(writable.message().find("free disk space"), std::string::npos);
  auto refused = TrySubmit(1, 0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CancelSync(id).code(), absl::StatusCode::kUnavailable);
  // Heartbeats still renew the agent's lease: a full disk stops no training.
  Beat("a", a.get());
  EXPECT_EQ(a->Count(Msg::kHeartbeatAck), 1);
  // The disk comes back: the next probe reloads the model from the store
  // and asks every agent to register again.
  faulty_->Heal();
  clock_.Advance(absl::Seconds(2));
  controller_->Tick();
  Settle();
  EXPECT_TRUE(controller_->Writable().ok());
  EXPECT_FALSE(a->closed().empty());
  // The agent registers again (what runs is re-reported) and the job starts.
  auto a2 = AddNode("a", 1);
  controller_->Tick();
  auto start = a2->WaitFor(Msg::kStartRanks).start_ranks();
  EXPECT_EQ(start.job_id(), id);
  EXPECT_EQ(start.attempt(), 1);
}

TEST_F(ControllerTest, FailedWriteOfACancelStopsNoRank) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Settle();
  faulty_->FailWrites(DiskFull());
  absl::Status st = CancelSync(id);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  Settle();
  EXPECT_EQ(a->Count(Msg::kStopJob), 0) << "stopped ranks for an unrecorded cancel";
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  // After the reload the job is what the disk says: still running.
  faulty_->Heal();
  clock_.Advance(absl::Seconds(2));
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  EXPECT_TRUE(CancelSync(id).ok());
}

// Controller::Apply is the one door for state changes: whichever handler's
// write fails (a submit, a drain, a queue change, an agent's output), no
// reader sees the change, no agent is told of it, the caller hears
// UNAVAILABLE, and once the disk is back the model is what the disk has.
TEST_F(ControllerTest, AFailedWriteChangesNothingAClientOrAgentSees) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Settle();
  auto jobs = [&] { return controller_->ListJobs({})->jobs_size(); };
  const int jobs_before = jobs();
  auto drained = [&] {
    return controller_->GetNode("a")->state() == v1::DRAINED;
  };
  auto queues = [&] { return controller_->ListQueues()->queues_size(); };
  const int queues_before = queues();
  // The disk is back: the next probe reloads the model, the agent
  // registers again with its running rank; then the disk fails again.
  // Every session of the agent, for counting what any of them was sent.
  std::vector<std::shared_ptr<FakeConnection>> sessions = {a};
  auto recover = [&] {
    faulty_->Heal();
    clock_.Advance(absl::Seconds(2));
    controller_->Tick();
    Settle();
    a = AddNode("a", 1, {Status(id, 1, 0, v1::RANK_RUNNING)});
    sessions.push_back(a);
    Settle();
    ASSERT_TRUE(controller_->Writable().ok());
    faulty_->FailWrites(DiskFull());
  };
  faulty_->FailWrites(DiskFull());

  // A submit.
  EXPECT_EQ(TrySubmit(1, 0).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(jobs(), jobs_before);
  // A drain.
  recover();
  const absl::Status drain =
      Sync<absl::StatusOr<v1::Node>>([&](auto done) {
        controller_->SetDrained("a", true, "maintenance", std::move(done));
      }).status();
  EXPECT_EQ(drain.code(), absl::StatusCode::kUnavailable) << drain;
  EXPECT_FALSE(drained()) << "a reader saw a drain that was not recorded";
  EXPECT_EQ(jobs(), jobs_before);

  // Output from the rank: not acknowledged (the agent sends it again),
  // the stream ends, nothing is stored.
  recover();
  v1::AgentMessage log;
  log.set_seq(1);
  log.mutable_log()->set_job_id(id);
  log.mutable_log()->set_attempt(1);
  log.mutable_log()->set_stream(v1::STDOUT);
  log.mutable_log()->set_data("lost\n");
  log.mutable_log()->set_end_offset(5);
  controller_->AgentMessage("a", a.get(), log);
  Settle();
  EXPECT_EQ(a->Count(Msg::kLogAck), 0) << "acknowledged output not stored";
  EXPECT_NE(a->closed().find("storing output failed"), std::string::npos)
      << a->closed();
  EXPECT_TRUE(store_->ReadLogs(std::stoll(id), 0, -1, 10)->empty());

  // A queue change.
  recover();
  v1::PutQueueRequest put;
  put.mutable_spec()->set_name("research");
  const absl::Status queue =
      Sync<absl::StatusOr<v1::Queue>>([&](auto done) {
        controller_->PutQueue("root", put, std::move(done));
      }).status();
  EXPECT_EQ(queue.code(), absl::StatusCode::kUnavailable) << queue;
  EXPECT_EQ(queues(), queues_before) << "a reader saw an unrecorded queue";
  EXPECT_FALSE(controller_->GetQueueSpec("research").ok());

  // Nothing of it reached the running rank, and the disk's word holds.
  for (const auto& session : sessions) {
    EXPECT_EQ(session->Count(Msg::kStopJob), 0);
  }
  faulty_->Heal();
  clock_.Advance(absl::Seconds(2));
  controller_->Tick();
  Settle();
  EXPECT_EQ(jobs(), jobs_before);
  EXPECT_FALSE(drained());
  EXPECT_FALSE(controller_->GetQueueSpec("research").ok());
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
}

// A drain is acted on from the moment it is asked for: a pass while its
// write is in flight starts nothing on the node (the operator is told the
// drain is done once it is recorded, and must find no new job there).
TEST_F(ControllerTest, ADrainBeingWrittenStopsNewWorkAtOnce) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);  // committed, not yet placed
  faulty_->Pause();
  Answer<absl::StatusOr<v1::Node>> drained;
  controller_->SetDrained("a", true, "swap a disk", drained.Callback());
  controller_->Tick();  // a pass, the drain not yet on disk
  faulty_->Resume();
  const absl::StatusOr<v1::Node> node = drained.Wait();
  EXPECT_TRUE(node.ok()) << node.status();
  Settle();
  EXPECT_EQ(a->Count(Msg::kStartRanks), 0) << "a job started on a drained node";
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::PENDING);
  EXPECT_EQ(controller_->GetNode("a")->state(), v1::DRAINED);
}

TEST_F(ControllerTest, WallClockStepsChangeNothing) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1, "", 0, /*time_limit_s=*/600);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Settle();
  for (absl::Duration step : {absl::Hours(1), absl::Hours(-2), absl::Hours(1)}) {
    clock_.StepWall(step);
    clock_.Advance(absl::Seconds(1));
    Beat("a", a.get());
    controller_->Tick();
    Settle();
    EXPECT_EQ(controller_->GetNode("a")->state(), v1::READY);
    EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  }
  EXPECT_TRUE(a->closed().empty());
  EXPECT_EQ(a->Count(Msg::kStopJob), 0);
  // Real silence still counts.
  clock_.Advance(absl::Seconds(11));
  controller_->Tick();
  EXPECT_EQ(controller_->GetNode("a")->state(), v1::LOST);
}

TEST_F(ControllerTest, TheSchedulersOwnPauseLosesNoNode) {
  self_pause_ = absl::Seconds(3);
  Open();
  auto a = AddNode("a", 1);
  controller_->Tick();
  // The scheduler's process is stopped for 30 s: nothing ticks, nothing is
  // heard. When it runs again the silence is its own.
  clock_.Advance(absl::Seconds(30));
  controller_->Tick();
  EXPECT_EQ(controller_->GetNode("a")->state(), v1::READY);
  // Silence while it runs still counts.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Seconds(1));
    controller_->Tick();
  }
  EXPECT_EQ(controller_->GetNode("a")->state(), v1::LOST);
}

TEST_F(ControllerTest, ReturningNodeKeepsItsRanksResourcesUntilTheyExit) {
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  std::string id = Submit(1, 1, "", /*retries=*/1);
  controller_->Tick();
  auto start = a->WaitFor(Msg::kStartRanks).start_ranks();
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Settle();
  // a falls silent and is lost; the job is requeued (fenced).
  clock_.Advance(absl::Seconds(6));
  Beat("b", b.get());
  clock_.Advance(absl::Seconds(6));
  Beat("b", b.get());
  controller_->Tick();
  Settle();
  ASSERT_EQ(controller_->GetNode("a")->state(), v1::LOST);
  // a comes back, still running the old attempt's rank: its GPU stays held,
  // and the rank is told to stop.
  auto a2 = AddNode("a", 1, {Status(id, 1, 0, v1::RANK_RUNNING)});
  auto stop = a2->WaitFor(Msg::kStopJob).stop_job();
  EXPECT_EQ(stop.job_id(), id);
  EXPECT_EQ(stop.attempt(), 1);
  EXPECT_EQ(controller_->GetNode("a")->usage().gpus_in_use_size(), 1);
  // Nothing new lands on its busy GPU: the next attempt goes to b.
  clock_.Advance(absl::Seconds(12));
  Beat("a", a2.get());
  Beat("b", b.get());
  controller_->Tick();
  auto sb = b->WaitFor(Msg::kStartRanks).start_ranks();
  EXPECT_EQ(sb.attempt(), 2);
  EXPECT_EQ(a2->Count(Msg::kStartRanks), 0);
  // Once the old rank's processes are all gone, the GPU is free again.
  Report("a", a2.get(), id, 1, 0, v1::RANK_EXITED, 143, /*remaining=*/true);
  EXPECT_EQ(controller_->GetNode("a")->usage().gpus_in_use_size(), 1);
  Report("a", a2.get(), id, 1, 0, v1::RANK_EXITED, 143);
  EXPECT_EQ(controller_->GetNode("a")->usage().gpus_in_use_size(), 0);
}

TEST_F(ControllerTest, GpusAreHeldUntilTheWholeProcessGroupIsGone) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  // The rank's first process exits 0 while a child of it still runs.
  Report("a", a.get(), id, 1, 0, v1::RANK_EXITED, 0, /*remaining=*/true);
  EXPECT_EQ(WaitState(id, v1::SUCCEEDED), v1::SUCCEEDED);
  EXPECT_EQ(controller_->GetQueue().gpus_in_use(), 1);
  std::string next = Submit(1, 1);
  controller_->Tick();
  Settle();
  EXPECT_EQ(a->Count(Msg::kStartRanks), 0) << "placed on a GPU still in use";
  Report("a", a.get(), id, 1, 0, v1::RANK_EXITED, 0);
  EXPECT_EQ(controller_->GetQueue().gpus_in_use(), 0);
  controller_->Tick();
  EXPECT_EQ(a->WaitFor(Msg::kStartRanks).start_ranks().job_id(), next);
}

TEST_F(ControllerTest, AgentsSpeakOnlyForTheirOwnRanksAndAttempt) {
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  std::string id = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  EXPECT_EQ(WaitState(id, v1::RUNNING), v1::RUNNING);
  // b claims a's rank failed; an old attempt number is used on a.
  Report("b", b.get(), id, 1, 0, v1::RANK_EXITED, 1);
  Report("a", a.get(), id, 0, 0, v1::RANK_EXITED, 1);
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  // b's output for a's rank is dropped (and acknowledged, so not resent).
  v1::AgentMessage log;
  log.set_seq(7);
  log.mutable_log()->set_job_id(id);
  log.mutable_log()->set_attempt(1);
  log.mutable_log()->set_rank(0);
  log.mutable_log()->set_stream(v1::STDOUT);
  log.mutable_log()->set_data("forged\n");
  controller_->AgentMessage("b", b.get(), log);
  EXPECT_EQ(b->WaitFor(Msg::kLogAck).log_ack().seq(), 7u);
  Settle();
  EXPECT_TRUE(store_->ReadLogs(1, 0, -1, 10)->empty());
  // a's own output is kept.
  controller_->AgentMessage("a", a.get(), log);
  a->WaitFor(Msg::kLogAck);
  EXPECT_EQ(store_->ReadLogs(1, 0, -1, 10)->size(), 1u);
}

TEST_F(ControllerTest, UndeliveredStartSpendsNoRetry) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1, "", /*retries=*/0);
  a->Kill();  // the stream ended; the scheduler has not noticed yet
  controller_->Tick();
  Settle();
  Settle();
  auto job = *controller_->GetJob(id);
  EXPECT_EQ(job.state(), v1::PENDING) << job.reason();
  EXPECT_EQ(job.retries_used(), 0);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_NE(job.reason().find("could not be delivered"), std::string::npos)
      << job.reason();
  // The agent reconnects: the job starts there, still with no retry spent.
  auto a2 = AddNode("a", 1);
  controller_->Tick();
  EXPECT_EQ(a2->WaitFor(Msg::kStartRanks).start_ranks().attempt(), 2);
}

TEST_F(ControllerTest, StartLostWithTheStreamSpendsNoRetry) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1, "", /*retries=*/0);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);  // queued, but the stream died with it
  Settle();
  // The agent registers again knowing nothing of the job.
  auto a2 = AddNode("a", 1);
  Settle();
  auto job = *controller_->GetJob(id);
  EXPECT_NE(job.state(), v1::FAILED) << job.reason();
  EXPECT_EQ(job.retries_used(), 0);
  controller_->Tick();
  EXPECT_EQ(a2->WaitFor(Msg::kStartRanks).start_ranks().attempt(), 2);
}

TEST_F(ControllerTest, TokensAndRankExitsSurviveARestart) {
  auto a = AddNode("a", 2);
  std::string id = Submit(1, 2);
  controller_->Tick();
  auto start = a->WaitFor(Msg::kStartRanks).start_ranks();
  const std::string token = start.ranks(0).env().at("XL_RENDEZVOUS_TOKEN");
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Report("a", a.get(), id, 1, 1, v1::RANK_RUNNING);
  Report("a", a.get(), id, 1, 0, v1::RANK_EXITED, 0);
  Settle();
  Open();  // the scheduler restarts
  // The running attempt's token still opens its rendezvous.
  v1::RendezvousPutRequest put;
  put.mutable_scope()->set_job_id(id);
  put.mutable_scope()->set_attempt(1);
  put.mutable_scope()->set_token(token);
  put.set_key("k");
  put.set_value("v");
  EXPECT_TRUE(controller_->rendezvous()->Put(put).ok());
  // The agent reconnects (rank 0's exit already forgotten by it); rank 1
  // exits 0 after the restart: the job succeeded, since rank 0's exit was
  // stored.
  auto a2 = AddNode("a", 2, {Status(id, 1, 1, v1::RANK_RUNNING)});
  Report("a", a2.get(), id, 1, 1, v1::RANK_EXITED, 0);
  EXPECT_EQ(WaitState(id, v1::SUCCEEDED), v1::SUCCEEDED);
  EXPECT_EQ(controller_->GetJob(id)->rank_exits_size(), 2);
  EXPECT_EQ(controller_->GetQueue().gpus_in_use(), 0);
}

TEST_F(ControllerTest, EndedJobStillStoppingHoldsItsGpusAcrossARestart) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  ASSERT_TRUE(CancelSync(id).ok());
  Settle();
  Open();  // restart while the cancelled rank is still stopping
  auto a2 = AddNode("a", 1, {Status(id, 1, 0, v1::RANK_RUNNING)});
  EXPECT_EQ(controller_->GetNode("a")->usage().gpus_in_use_size(), 1);
  std::string next = Submit(1, 1);
  controller_->Tick();
  Settle();
  EXPECT_EQ(a2->Count(Msg::kStartRanks), 0);
  Report("a", a2.get(), id, 1, 0, v1::RANK_EXITED, 143);
  controller_->Tick();
  EXPECT_EQ(a2->WaitFor(Msg::kStartRanks).start_ranks().job_id(), next);
}

TEST_F(ControllerTest, UnknownRunningRankKeepsTheNodeFromNewWork) {
  // The agent runs a rank the scheduler holds nothing for.
  auto a = AddNode("a", 1, {Status("99", 3, 0, v1::RANK_RUNNING)});
  EXPECT_EQ(a->WaitFor(Msg::kStopJob).stop_job().job_id(), "99");
  std::string id = Submit(1, 1);
  controller_->Tick();
  Settle();
  EXPECT_EQ(a->Count(Msg::kStartRanks), 0);
  EXPECT_NE(controller_->GetJob(id)->reason().find("no record of"),
            std::string::npos)
      << controller_->GetJob(id)->reason();
  Report("a", a.get(), "99", 3, 0, v1::RANK_EXITED, 143);
  controller_->Tick();
  EXPECT_EQ(a->WaitFor(Msg::kStartRanks).start_ranks().job_id(), id);
}

TEST_F(ControllerTest, LeaseIsGrantedAndHeartbeatsAcknowledged) {
  auto conn = std::make_shared<FakeConnection>();
  v1::Register reg;
  reg.set_name("a");
  reg.set_honours_lease(true);
  ASSERT_TRUE(controller_->AgentRegister(reg, conn).ok());
  auto ack = conn->WaitFor(Msg::kRegisterAck).register_ack();
  EXPECT_EQ(FromProto(ack.lease()), absl::Seconds(10));
  v1::AgentMessage beat;
  beat.mutable_heartbeat()->set_seq(42);
  controller_->AgentMessage("a", conn.get(), beat);
  EXPECT_EQ(conn->WaitFor(Msg::kHeartbeatAck).heartbeat_ack().seq(), 42u);
}

TEST_F(ControllerTest, SharedEnvironmentGoesOncePerNode) {
  auto a = AddNode("a", 2, {}, /*shared_env=*/true);
  std::string id = Submit(1, 2);
  controller_->Tick();
  auto start = a->WaitFor(Msg::kStartRanks).start_ranks();
  EXPECT_EQ(start.env().at("WORLD_SIZE"), "2");
  EXPECT_EQ(start.env().at("XL_JOB_ID"), id);
  ASSERT_EQ(start.ranks_size(), 2);
  EXPECT_EQ(start.ranks(1).env().at("RANK"), "1");
  EXPECT_EQ(start.ranks(1).env().count("WORLD_SIZE"), 0u);
}

TEST_F(ControllerTest, ListNodesIsPaged) {
  for (int i = 0; i < 5; ++i) AddNode(absl::StrCat("n", i), 0);
  v1::ListNodesRequest req;
  req.set_page_size(2);
  std::vector<std::string> names;
  for (int page = 0; page < 10; ++page) {
    auto resp = controller_->ListNodes(req);
    ASSERT_TRUE(resp.ok());
    EXPECT_LE(resp->nodes_size(), 2);
    for (const auto& n : resp->nodes()) names.push_back(n.name());
    if (resp->next_page_token().empty()) break;
    req.set_page_token(resp->next_page_token());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"n0", "n1", "n2", "n3", "n4"}));
}

TEST_F(ControllerTest, RetentionForgetsOldFinishedJobs) {
  retention_.max_age = absl::Hours(1);
  Open();
  std::string old_job = Submit(1, 0);
  ASSERT_TRUE(CancelSync(old_job).ok());
  clock_.Advance(absl::Hours(2));
  std::string young = Submit(1, 0);
  ASSERT_TRUE(CancelSync(young).ok());
  std::string running = Submit(1, 0);
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(old_job).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(controller_->GetJob(young).ok());
  EXPECT_TRUE(controller_->GetJob(running).ok());
  Open();  // gone from the database too
  EXPECT_EQ(controller_->GetJob(old_job).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(controller_->GetJob(young).ok());
}

// A job's stored output has a budget: past it the oldest goes as new comes
// (the newest output is what explains a failure), and its events say so
// once. Metrics count too, and a rank cannot store them faster than one
// point a second whatever its points say.
TEST_F(ControllerTest, OneJobCannotFillTheSchedulersDisk) {
  max_output_bytes_per_job_ = 1000;
  Open();
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Settle();
  const int64_t events_before = [&] {
    std::vector<v1::JobEvent> events;
    bool finished;
    EXPECT_TRUE(controller_->ReadEvents(id, 0, &events, &finished).ok());
    return static_cast<int64_t>(events.size());
  }();
  for (int i = 1; i <= 30; ++i) {
    v1::AgentMessage log;
    log.set_seq(i);
    log.mutable_log()->set_job_id(id);
    log.mutable_log()->set_attempt(1);
    log.mutable_log()->set_stream(v1::STDOUT);
    log.mutable_log()->set_data(absl::StrCat("line ", 1000 + i, std::string(90, '.'), "\n"));
    log.mutable_log()->set_end_offset(100 * i);
    controller_->AgentMessage("a", a.get(), log);
    EXPECT_EQ(a->WaitFor(Msg::kLogAck).log_ack().seq(), static_cast<uint64_t>(i));
  }
  // A rank writing metrics as fast as it can, each point claiming to be
  // the last step (which once made every one of them stored).
  for (int i = 0; i < 200; ++i) {
    v1::AgentMessage m;
    m.mutable_metrics()->set_job_id(id);
    m.mutable_metrics()->set_attempt(1);
    m.mutable_metrics()->set_step(7);
    m.mutable_metrics()->set_total_steps(7);
    m.mutable_metrics()->set_loss(i);
    controller_->AgentMessage("a", a.get(), m);
  }
  Settle();
  auto logs = store_->ReadLogs(1, 0, -1, 100);
  int64_t stored = 0;
  for (const auto& c : *logs) stored += c.data().size();
  EXPECT_LE(stored, 1000);
  EXPECT_GE(stored, 300) << "trims take a tenth of the budget at a time";
  // The newest output is kept, the oldest gone.
  EXPECT_NE(logs->back().data().find("line 1030"), std::string::npos);
  EXPECT_EQ(logs->front().data().find("line 1001"), std::string::npos);
  auto points = store_->ReadMetrics(1, 0, 1000);
  EXPECT_EQ(points->size(), 1u) << "one point a second, whatever it says";
  // Its events say so, once.
  std::vector<v1::JobEvent> events;
  bool finished;
  ASSERT_TRUE(controller_->ReadEvents(id, 0, &events, &finished).ok());
  ASSERT_EQ(static_cast<int64_t>(events.size()), events_before + 1);
  EXPECT_NE(events.back().reason().find("passed its budget of 1000 B"),
            std::string::npos)
      << events.back().reason();
  // The latest point is stored when its second is up.
  clock_.Advance(absl::Seconds(1));
  controller_->Tick();
  Settle();
  points = store_->ReadMetrics(1, 0, 1000);
  ASSERT_EQ(points->size(), 2u);
  EXPECT_EQ(points->back().second.loss(), 199);

  // Tiny chunks ("x\n", a row each) weigh their rows too: counted by their
  // data alone, 1000 bytes would be 500 rows.
  for (int i = 31; i <= 330; ++i) {
    v1::AgentMessage log;
    log.set_seq(i);
    log.mutable_log()->set_job_id(id);
    log.mutable_log()->set_attempt(1);
    log.mutable_log()->set_stream(v1::STDOUT);
    log.mutable_log()->set_data("x\n");
    log.mutable_log()->set_end_offset(3000 + 2 * i);
    controller_->AgentMessage("a", a.get(), log);
    EXPECT_EQ(a->WaitFor(Msg::kLogAck).log_ack().seq(), static_cast<uint64_t>(i));
  }
  Settle();
  logs = store_->ReadLogs(1, 0, -1, 1000);
  int64_t weight = 0;
  for (const auto& c : *logs) {
    weight += static_cast<int64_t>(c.data().size()) + kStoredRowOverheadBytes;
  }
  EXPECT_LE(weight, 1000) << logs->size() << " rows";
  EXPECT_GE(logs->size(), 3u);
}

TEST_F(ControllerTest, RendezvousScopesAreBounded) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  controller_->Tick();
  auto start = a->WaitFor(Msg::kStartRanks).start_ranks();
  v1::RendezvousPutRequest put;
  put.mutable_scope()->set_job_id(id);
  put.mutable_scope()->set_attempt(1);
  put.mutable_scope()->set_token(start.ranks(0).env().at("XL_RENDEZVOUS_TOKEN"));
  put.set_value(std::string(1 << 20, 'v'));
  absl::Status st;
  int i = 0;
  for (; i < 100 && st.ok(); ++i) {
    put.set_key(absl::StrCat("k", i));
    st = controller_->rendezvous()->Put(put);
  }
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(i, 64);  // 63 values of 1 MiB (and their keys) fit in 64 MiB
  // Replacing a value counts only the difference.
  put.set_key("k0");
  EXPECT_TRUE(controller_->rendezvous()->Put(put).ok());
}

// Found in review: each of these failed before its fix.

TEST_F(ControllerTest, AttemptEndedBeforeItsStartWasRecordedHoldsNothing) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  // A slow write ahead keeps the start's write in flight.
  store_->Write([](store::Tx&) { usleep(300000); return absl::OkStatus(); },
                nullptr);
  controller_->Tick();
  EXPECT_TRUE(CancelSync(id).ok());
  Settle();
  EXPECT_EQ(a->Count(Msg::kStartRanks), 0);
  EXPECT_EQ(controller_->GetNode("a")->usage().gpus_in_use_size(), 0);
  std::string next = Submit(1, 1);
  controller_->Tick();
  EXPECT_EQ(a->WaitFor(Msg::kStartRanks).start_ranks().job_id(), next);
}

TEST_F(ControllerTest, TheLostNodeFenceHoldsAcrossARestart) {
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  std::string id = Submit(1, 1, "", /*retries=*/1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Settle();
  clock_.Advance(absl::Seconds(6));
  Beat("b", b.get());
  clock_.Advance(absl::Seconds(6));
  Beat("b", b.get());
  controller_->Tick();
  Settle();
  ASSERT_EQ(controller_->GetNode("a")->state(), v1::LOST);
  Open();  // the scheduler restarts at once
  auto b2 = AddNode("b", 1);
  controller_->Tick();
  Settle();
  EXPECT_EQ(b2->Count(Msg::kStartRanks), 0)
      << "attempt 2 started inside the lost node's fence";
  clock_.Advance(absl::Seconds(12));
  Beat("b", b2.get());
  controller_->Tick();
  EXPECT_EQ(b2->WaitFor(Msg::kStartRanks).start_ranks().attempt(), 2);
}

TEST_F(ControllerTest, JobIdsAreNeverGivenTwice) {
  retention_.max_age = absl::Hours(1);
  Open();
  std::string old_job = Submit(1, 0);
  ASSERT_TRUE(CancelSync(old_job).ok());
  clock_.Advance(absl::Hours(2));
  controller_->Tick();
  Settle();
  ASSERT_EQ(controller_->GetJob(old_job).status().code(),
            absl::StatusCode::kNotFound);
  Open();  // the newest job was deleted, and the scheduler restarts
  EXPECT_NE(Submit(1, 0), old_job);
}

TEST_F(ControllerTest, AStatusDuringAnUnrecordedCancelStopsNothing) {
  auto a = AddNode("a", 1);
  std::string id = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Settle();
  store_->Write([](store::Tx&) { usleep(200000); return absl::OkStatus(); },
                nullptr);
  faulty_->FailWrites(DiskFull());
  v1::CancelJobRequest req;
  req.set_job_id(id);
  Answer<absl::StatusOr<v1::Job>> cancelled;
  controller_->Cancel("alice", req, cancelled.Callback());
  // The rank reports again while the cancel's write is still in flight.
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  const absl::Status out = cancelled.Wait().status();
  Settle();
  EXPECT_EQ(out.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a->Count(Msg::kStopJob), 0)
      << "stopped the ranks of an unrecorded cancel";
}

TEST_F(ControllerTest, ASecondAgentClaimingALiveNodeIsRefused) {
  auto a = AddNode("a", 1, {}, false, "instance-1");
  std::string id = Submit(1, 1, "", /*retries=*/3);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Settle();
  // A cloned host with the same --name, running nothing.
  auto impostor = std::make_shared<FakeConnection>();
  v1::Register reg;
  reg.set_name("a");
  reg.set_instance_id("instance-2");
  auto refused = controller_->AgentRegister(reg, impostor);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("--name"), std::string::npos)
      << refused.status();
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  EXPECT_EQ(controller_->GetNode("a")->usage().gpus_in_use_size(), 1);
  // The same agent process reconnecting is welcome.
  auto again = AddNode("a", 1, {Status(id, 1, 0, v1::RANK_RUNNING)}, false,
                       "instance-1");
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
}

// What an agent reports is printed in everyone's `xlctl nodes` and plans:
// a control character anywhere in it refuses the registration, naming the
// field, and registers nothing.
TEST_F(ControllerTest, AnInventoryWithControlCharactersIsRefused) {
  auto conn = std::make_shared<FakeConnection>();
  v1::Register reg;
  reg.set_name("n9");
  reg.mutable_inventory()->set_hostname("n9");
  auto* g = reg.mutable_inventory()->add_gpus();
  g->set_model("H100\x1b]52;c;eA==\x07");
  auto refused = controller_->AgentRegister(reg, conn);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message().rfind("register.inventory.gpus[0].model", 0),
            0u)
      << refused.status();
  g->set_model("H100");
  (*reg.mutable_inventory()->mutable_labels())["rack"] = "r1\nfake";
  refused = controller_->AgentRegister(reg, conn);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("labels"), std::string::npos)
      << refused.status();
  reg.mutable_inventory()->mutable_labels()->clear();
  reg.set_name("n9\r");
  EXPECT_EQ(controller_->AgentRegister(reg, conn).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(controller_->GetNode("n9").ok());
  EXPECT_FALSE(controller_->GetNode("n9\r").ok());
}

// A rank's exit shows only after the output it wrote before exiting: the
// agent says how far that output reached, and the scheduler acts on the
// exit once it has stored that much (here the chunk comes after the exit,
// as after a reconnect), or once it waited --log-settle for it.
TEST_F(ControllerTest, AnExitWaitsForTheOutputWrittenBeforeIt) {
  auto a = AddNode("a", 2);
  const std::string id = Submit(1, 1);
  const std::string lost = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Settle();
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  Report("a", a.get(), lost, 1, 0, v1::RANK_RUNNING);
  Settle();
  auto exit_after = [&](const std::string& job, int64_t out, int64_t err) {
    v1::AgentMessage msg;
    *msg.mutable_rank_status() = Status(job, 1, 0, v1::RANK_EXITED, 0);
    msg.mutable_rank_status()->set_stdout_bytes(out);
    msg.mutable_rank_status()->set_stderr_bytes(err);
    controller_->AgentMessage("a", a.get(), msg);
  };
  exit_after(id, 6, 4);
  exit_after(lost, 6, 0);
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  auto chunk = [&](int64_t seq, v1::LogStream stream, const std::string& data,
                   int64_t end) {
    v1::AgentMessage log;
    log.set_seq(seq);
    log.mutable_log()->set_job_id(id);
    log.mutable_log()->set_attempt(1);
    log.mutable_log()->set_rank(0);
    log.mutable_log()->set_stream(stream);
    log.mutable_log()->set_data(data);
    log.mutable_log()->set_end_offset(end);
    controller_->AgentMessage("a", a.get(), log);
    Settle();
  };
  chunk(1, v1::STDOUT, "hello\n", 6);
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING) << "stderr too";
  chunk(2, v1::STDERR, "bye\n", 4);
  EXPECT_EQ(WaitState(id, v1::SUCCEEDED), v1::SUCCEEDED);
  EXPECT_EQ(store_->ReadLogs(1, 0, -1, 10)->size(), 2u);
  // The other job's output never comes: its exit counts after the wait.
  EXPECT_EQ(controller_->GetJob(lost)->state(), v1::RUNNING);
  clock_.Advance(absl::Seconds(9));
  Beat("a", a.get());
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(lost)->state(), v1::RUNNING);
  clock_.Advance(absl::Seconds(2));
  Beat("a", a.get());
  controller_->Tick();
  EXPECT_EQ(WaitState(lost, v1::SUCCEEDED), v1::SUCCEEDED);
}

// A node that registers again (its stream broke, its agent restarted) while
// a job's exits wait for their output acts on none of them early: not on
// the other nodes' exits, nor on its own, whose unacknowledged output it
// sends again after its Register. Acted on early, the job ended before its
// output was stored, and `xlctl logs` right after `xlctl wait` showed none
// of it (the quick start's empty logs).
TEST_F(ControllerTest, AReconnectActsOnNoExitBeforeItsOutput) {
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  const std::string id = Submit(2, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  b->WaitFor(Msg::kStartRanks);
  Settle();
  const v1::Job job = *controller_->GetJob(id);
  std::map<std::string, int> rank_on;
  for (const auto& alloc : job.allocations()) rank_on[alloc.node()] = alloc.ranks(0);
  ASSERT_EQ(rank_on.size(), 2u);
  Report("a", a.get(), id, 1, rank_on["a"], v1::RANK_RUNNING);
  Report("b", b.get(), id, 1, rank_on["b"], v1::RANK_RUNNING);
  Settle();
  v1::RankStatus exited_a = Status(id, 1, rank_on["a"], v1::RANK_EXITED, 0);
  exited_a.set_stdout_bytes(6);
  const v1::RankStatus exited_b = Status(id, 1, rank_on["b"], v1::RANK_EXITED, 0);
  v1::AgentMessage msg;
  *msg.mutable_rank_status() = exited_a;
  controller_->AgentMessage("a", a.get(), msg);
  *msg.mutable_rank_status() = exited_b;
  controller_->AgentMessage("b", b.get(), msg);
  Settle();
  ASSERT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  // b comes back: its exit is in its Register, a's output is still to come.
  b = AddNode("b", 1, {exited_b});
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING)
      << "b's Register acted on a's exit before a's output was stored";
  // a comes back too, reports its exit again and then sends its output.
  a = AddNode("a", 1, {exited_a});
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING)
      << "a's Register acted on its exit before its output was sent again";
  v1::AgentMessage log;
  log.set_seq(1);
  log.mutable_log()->set_job_id(id);
  log.mutable_log()->set_attempt(1);
  log.mutable_log()->set_rank(rank_on["a"]);
  log.mutable_log()->set_stream(v1::STDOUT);
  log.mutable_log()->set_data("hello\n");
  log.mutable_log()->set_end_offset(6);
  controller_->AgentMessage("a", a.get(), log);
  EXPECT_EQ(WaitState(id, v1::SUCCEEDED), v1::SUCCEEDED);
  EXPECT_EQ(store_->ReadLogs(1, 0, -1, 10)->size(), 1u);
}

// A lost node's exits count before its loss does, and in the order the
// job's exits came: the first rank to fail is the one the reason names.
TEST_F(ControllerTest, ALostNodesExitsCountBeforeItsLossInOrder) {
  // Output may wait longer than a node takes to be lost.
  tweak_ = [](ControllerOptions* o) { o->log_settle = absl::Seconds(60); };
  Open();
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  auto c = AddNode("c", 1);
  const std::string id = Submit(3, 1, "", /*retries=*/1);
  controller_->Tick();
  for (auto* n : {a.get(), b.get(), c.get()}) n->WaitFor(Msg::kStartRanks);
  Settle();
  const v1::Job job = *controller_->GetJob(id);
  std::map<std::string, int> rank_on;
  for (const auto& alloc : job.allocations()) rank_on[alloc.node()] = alloc.ranks(0);
  std::map<std::string, FakeConnection*> conn = {
      {"a", a.get()}, {"b", b.get()}, {"c", c.get()}};
  for (auto& [name, cn] : conn) Report(name, cn, id, 1, rank_on[name], v1::RANK_RUNNING);
  Settle();
  // a fails with its traceback on the way, then b, then c (also waiting).
  for (const std::string name : {"a", "b", "c"}) {
    v1::AgentMessage msg;
    *msg.mutable_rank_status() = Status(id, 1, rank_on[name], v1::RANK_EXITED,
                                        name == "b" ? 0 : 1);
    msg.mutable_rank_status()->set_stderr_bytes(name == "b" ? 0 : 5);
    controller_->AgentMessage(name, conn[name], msg);
  }
  Settle();
  ASSERT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  // b goes silent past the heartbeat timeout (a and c beat on).
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(absl::Seconds(1));
    Beat("a", a.get());
    Beat("c", c.get());
  }
  controller_->Tick();
  Settle();
  // a's exit came first: the requeue names a's rank, not b's loss.
  const v1::Job after = *controller_->GetJob(id);
  EXPECT_EQ(after.attempt(), 2);
  EXPECT_EQ(after.state(), v1::PENDING);
  std::vector<v1::JobEvent> events;
  bool finished = false;
  ASSERT_TRUE(controller_->ReadEvents(id, 0, &events, &finished).ok());
  ASSERT_FALSE(events.empty());
  const std::string requeue = events.back().reason();
  EXPECT_EQ(requeue.rfind(absl::StrCat("rank ", rank_on["a"], " on a "), 0), 0u)
      << requeue;
}

// Output stored before the scheduler restarted counts after it: an exit
// reported in the agent's next Register is acted on at once.
TEST_F(ControllerTest, OutputStoredBeforeARestartCountsForAnExitAfterIt) {
  auto a = AddNode("a", 1);
  const std::string id = Submit(1, 1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Settle();
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  v1::AgentMessage log;
  log.set_seq(1);
  log.mutable_log()->set_job_id(id);
  log.mutable_log()->set_attempt(1);
  log.mutable_log()->set_rank(0);
  log.mutable_log()->set_stream(v1::STDOUT);
  log.mutable_log()->set_data("hello\n");
  log.mutable_log()->set_end_offset(6);
  controller_->AgentMessage("a", a.get(), log);
  a->WaitFor(Msg::kLogAck);
  Open();
  v1::RankStatus exited = Status(id, 1, 0, v1::RANK_EXITED, 0);
  exited.set_stdout_bytes(6);
  a = AddNode("a", 1, {exited});
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::SUCCEEDED);
}

// The scheduler's own restart loses no node: its agents come back after
// their reconnect backoff, which may be longer than the heartbeat timeout.
// A node that does not come back is lost once the timeout and that grace
// have passed.
TEST_F(ControllerTest, ARestartedSchedulerGivesItsNodesTimeToReconnect) {
  auto a = AddNode("a", 1);
  auto b = AddNode("b", 1);
  const std::string id = Submit(1, 1, "", /*retries=*/1);
  const std::string other = Submit(1, 1, "", /*retries=*/1);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  b->WaitFor(Msg::kStartRanks);
  Settle();
  const std::string on_a =
      controller_->GetJob(id)->allocations(0).node() == "a" ? id : other;
  const std::string on_b = on_a == id ? other : id;
  Report("a", a.get(), on_a, 1, 0, v1::RANK_RUNNING);
  Report("b", b.get(), on_b, 1, 0, v1::RANK_RUNNING);
  Settle();
  Open();
  clock_.Advance(absl::Seconds(15));  // past the 10 s timeout, within grace
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(on_a)->state(), v1::RUNNING);
  a = AddNode("a", 1, {Status(on_a, 1, 0, v1::RANK_RUNNING)});
  clock_.Advance(absl::Seconds(6));
  Beat("a", a.get());
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(on_a)->state(), v1::RUNNING);
  EXPECT_EQ(controller_->GetJob(on_a)->attempt(), 1);
  // b never came back: lost after timeout + grace, its job requeued.
  EXPECT_EQ(controller_->GetJob(on_b)->attempt(), 2);
  EXPECT_EQ(controller_->GetJob(on_b)->state(), v1::PENDING);
}

// Exits are acted on in the order they came: the rank that failed first
// (its traceback still on the way) is the one the job's reason names, not
// a peer that failed after it with nothing to say. And ranks that ended
// before the time limit count, their output stored or not.
TEST_F(ControllerTest, ParkedExitsKeepTheirOrderAndBeatTheTimeLimit) {
  auto a = AddNode("a", 2);
  const std::string id = Submit(1, 2);
  const std::string limited = Submit(1, 0, "", 0, /*time_limit_s=*/60);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Settle();
  for (int r = 0; r < 2; ++r) Report("a", a.get(), id, 1, r, v1::RANK_RUNNING);
  Report("a", a.get(), limited, 1, 0, v1::RANK_RUNNING);
  Settle();
  auto exit = [&](const std::string& job, int rank, int code, int64_t err) {
    v1::AgentMessage msg;
    *msg.mutable_rank_status() = Status(job, 1, rank, v1::RANK_EXITED, code);
    msg.mutable_rank_status()->set_stderr_bytes(err);
    controller_->AgentMessage("a", a.get(), msg);
  };
  exit(id, 0, 3, 10);   // the traceback is on its way
  exit(id, 1, 1, 0);    // a peer that lost rank 0
  exit(limited, 0, 0, 5);
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  v1::AgentMessage log;
  log.set_seq(1);
  log.mutable_log()->set_job_id(id);
  log.mutable_log()->set_attempt(1);
  log.mutable_log()->set_rank(0);
  log.mutable_log()->set_stream(v1::STDERR);
  log.mutable_log()->set_data("Traceback\n");
  log.mutable_log()->set_end_offset(10);
  controller_->AgentMessage("a", a.get(), log);
  EXPECT_EQ(WaitState(id, v1::FAILED), v1::FAILED);
  const v1::Job failed = *controller_->GetJob(id);
  EXPECT_NE(failed.reason().find("rank 0 on a exited with code 3"),
            std::string::npos)
      << failed.reason();
  EXPECT_EQ(failed.exit_code(), 3);
  // Past its limit with its exit still parked: it ran to the end in time.
  clock_.Advance(absl::Seconds(61));
  Beat("a", a.get());
  controller_->Tick();
  EXPECT_EQ(WaitState(limited, v1::SUCCEEDED), v1::SUCCEEDED);
}

// A rank its agent stopped on its own (its lease ran out while the
// scheduler was out of reach) failed by no fault of the job: the attempt
// is requeued without spending a retry.
TEST_F(ControllerTest, ARankStoppedByItsAgentSpendsNoRetry) {
  auto a = AddNode("a", 1);
  const std::string id = Submit(1, 1, "", /*retries=*/0);
  controller_->Tick();
  a->WaitFor(Msg::kStartRanks);
  Settle();
  Report("a", a.get(), id, 1, 0, v1::RANK_RUNNING);
  v1::AgentMessage msg;
  *msg.mutable_rank_status() = Status(id, 1, 0, v1::RANK_EXITED, 143);
  msg.mutable_rank_status()->set_signal(SIGTERM);
  msg.mutable_rank_status()->set_stopped_by_agent(true);
  msg.mutable_rank_status()->set_message(
      "killed by signal 15 after its agent stopped it: lease expired");
  controller_->AgentMessage("a", a.get(), msg);
  Settle();
  const v1::Job job = *controller_->GetJob(id);
  EXPECT_EQ(job.state(), v1::PENDING) << job.reason();
  EXPECT_EQ(job.retries_used(), 0);
  EXPECT_EQ(job.attempt(), 2);
}

}  // namespace
}  // namespace xl::control
