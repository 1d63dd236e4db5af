// Queues as objects in the controller, with a real store and a fake clock:
// versions, recorded changes and restarts; what a queue checks at submit;
// quotas holding jobs with their own reason; fair-share usage counted,
// stored, reloaded and ordering the queue.
#include "tests/server/controller_fixture.h"

#include <map>
#include <optional>

#include "common/duration.h"

namespace xl::control {
namespace {

class QueuesTest : public ControllerTest {
 protected:
  absl::StatusOr<v1::Queue> Put(const v1::QueueSpec& spec,
                                int64_t expected_version = 0,
                                const std::string& by = "root") {
    v1::PutQueueRequest req;
    *req.mutable_spec() = spec;
    req.set_expected_version(expected_version);
    return Sync<absl::StatusOr<v1::Queue>>(
        [&](auto done) { controller_->PutQueue(by, req, std::move(done)); });
  }
  absl::Status Delete(const std::string& name) {
    return Sync<absl::Status>([&](auto done) {
      controller_->DeleteQueue("root", name, std::move(done));
    });
  }
  // An elastic job of 1 to `nodes` nodes of 8 GPUs (ranks_per_node 0: one
  // rank per GPU); its id.
  std::string SubmitElastic(int nodes, int ranks_per_node) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_command("/bin/true");
    req.mutable_spec()->mutable_resources()->set_nodes(nodes);
    req.mutable_spec()->mutable_resources()->set_min_nodes(1);
    req.mutable_spec()->mutable_resources()->set_gpus_per_node(8);
    req.mutable_spec()->mutable_resources()->set_ranks_per_node(ranks_per_node);
    return SubmitRequest(req)->job_id();
  }
  // Advances the clock by d, every node beats, a tick, settled.
  void TickAll(
      const std::map<std::string, std::shared_ptr<FakeConnection>>& conns,
      absl::Duration d) {
    clock_.Advance(d);
    for (auto& [name, conn] : conns) Beat(name, conn.get());
    controller_->Tick();
    Settle();
  }
  absl::StatusOr<v1::SubmitJobResponse> SubmitTo(
      const std::string& queue, int gpus, int priority = 0,
      int time_limit_s = 0, int nodes = 1,
      std::optional<bool> preemptible = std::nullopt) {
    v1::SubmitJobRequest req;
    auto* spec = req.mutable_spec();
    spec->add_command("/bin/true");
    spec->set_queue(queue);
    spec->set_priority(priority);
    if (preemptible) spec->mutable_preemptible()->set_value(*preemptible);
    spec->mutable_resources()->set_nodes(nodes);
    spec->mutable_resources()->set_gpus_per_node(gpus);
    spec->mutable_time_limit()->set_seconds(time_limit_s);
    return SubmitRequest(req);
  }
  static v1::QueueSpec Spec(const std::string& name, double weight) {
    v1::QueueSpec spec;
    spec.set_name(name);
    spec.set_weight(weight);
    return spec;
  }
};

TEST_F(QueuesTest, ChangesAreVersionedRecordedAndSurviveRestart) {
  v1::QueueSpec spec = Spec("research", 2);
  auto* quota = spec.add_quotas();
  quota->set_gpu_model("*");
  quota->set_nominal_gpus(8);
  auto created = Put(spec);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->version(), 1);
  EXPECT_EQ(created->updated_by(), "root");
  EXPECT_TRUE(created->defined());
  // The same spec again changes nothing and records nothing.
  EXPECT_EQ(Put(spec)->version(), 1);
  spec.set_weight(3);
  EXPECT_EQ(Put(spec, /*expected_version=*/1)->version(), 2);
  // A change made against an old version is refused and changes nothing.
  spec.set_weight(5);
  auto stale = Put(spec, /*expected_version=*/1);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("at version 2, not 1"),
            std::string::npos);
  // A bad spec is refused naming the field, and changes nothing.
  spec.set_weight(-1);
  auto bad = Put(spec);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("weight:", 0), 0u);
  EXPECT_EQ(controller_->GetQueueSpec("research")->spec().weight(), 3);

  Settle();
  Open();  // a restart
  auto after = controller_->GetQueueSpec("research");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->version(), 2);
  EXPECT_EQ(after->spec().weight(), 3);
  EXPECT_EQ(after->spec().quotas(0).nominal_gpus(), 8);
  v1::ListQueueChangesRequest req;
  auto changes = controller_->ListQueueChanges(req);
  ASSERT_TRUE(changes.ok());
  ASSERT_EQ(changes->changes_size(), 2);
  EXPECT_EQ(changes->changes(0).action(), "update");
  EXPECT_EQ(changes->changes(0).version(), 2);
  EXPECT_EQ(changes->changes(1).action(), "create");
  EXPECT_EQ(changes->changes(1).by(), "root");
  // Numbering goes on after the restart.
  spec.set_weight(4);
  ASSERT_TRUE(Put(spec).ok());
  changes = controller_->ListQueueChanges(req);
  EXPECT_EQ(changes->changes(0).seq(), 3);

  // Create-only refuses an existing queue; a deleted and re-made queue
  // never gets a version it had before.
  v1::QueueSpec other = Spec("other", 1);
  ASSERT_TRUE(Put(other, -1).ok());
  EXPECT_EQ(Put(Spec("other", 2), -1).status().code(),
            absl::StatusCode::kAlreadyExists);
  const int64_t before = controller_->GetQueueSpec("other")->version();
  ASSERT_TRUE(Delete("other").ok());
  auto again = Put(other, -1);
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->version(), before);
  ASSERT_TRUE(Delete("other").ok());

  // The implicit default queue is listed, not defined.
  auto all = controller_->ListQueues();
  ASSERT_EQ(all->queues_size(), 2);
  EXPECT_EQ(all->queues(0).spec().name(), "default");
  EXPECT_FALSE(all->queues(0).defined());
}

// A queue change enters the model once it is on disk; changes that come
// while one is being written wait for it and are checked against it: two
// admins changing version 1 at once do not both win, and a delete sent
// right after a create finds the queue.
TEST_F(QueuesTest, ChangesInFlightAreCheckedAgainstTheOneBeforeThem) {
  v1::QueueSpec spec;
  spec.set_name("research");
  auto first = Put(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::Mutex mu;
  std::vector<absl::StatusOr<v1::Queue>> answers;
  absl::Status deleted = absl::UnknownError("not answered");
  bool delete_done = false;
  // Held back: the three calls below are all in before any write commits.
  faulty_->Pause();
  for (int weight : {2, 3}) {
    v1::PutQueueRequest req;
    *req.mutable_spec() = spec;
    req.mutable_spec()->set_weight(weight);
    req.set_expected_version(first->version());
    controller_->PutQueue("root", req, [&](absl::StatusOr<v1::Queue> q) {
      absl::MutexLock lock(&mu);
      answers.push_back(std::move(q));
    });
  }
  controller_->DeleteQueue("root", "research", [&](absl::Status st) {
    absl::MutexLock lock(&mu);
    deleted = st;
    delete_done = true;
  });
  faulty_->Resume();
  {
    absl::MutexLock lock(&mu);
    auto all = [&] { return answers.size() == 2 && delete_done; };
    mu.Await(absl::Condition(&all));
  }
  int won = 0, stale = 0;
  for (const auto& a : answers) {
    if (a.ok()) ++won;
    if (a.status().code() == absl::StatusCode::kFailedPrecondition) ++stale;
  }
  EXPECT_EQ(won, 1);
  EXPECT_EQ(stale, 1) << "two changes of one version both went through";
  EXPECT_TRUE(deleted.ok()) << deleted;
  EXPECT_FALSE(controller_->GetQueueSpec("research").ok());
  // The record has each change once (newest first): delete, update, create.
  auto changes = controller_->ListQueueChanges({});
  ASSERT_TRUE(changes.ok());
  ASSERT_EQ(changes->changes_size(), 3);
  EXPECT_EQ(changes->changes(0).action(), "delete");
  EXPECT_EQ(changes->changes(1).action(), "update");
  EXPECT_EQ(changes->changes(2).action(), "create");
}

// Admission takes a queue change from the moment it is asked for: a
// submit while the queue's delete is being written is refused as it would
// be after it (else a job would wait in a queue that is gone, also after a
// restart).
TEST_F(QueuesTest, ASubmitDuringTheQueuesDeleteIsRefused) {
  v1::QueueSpec spec;
  spec.set_name("research");
  ASSERT_TRUE(Put(spec).ok());
  Answer<absl::Status> deleted;
  faulty_->Pause();  // the delete is on its way while the submit comes
  controller_->DeleteQueue("root", "research", deleted.Callback());
  Answer<absl::StatusOr<v1::SubmitJobResponse>> submitted;
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_command("/bin/true");
  req.mutable_spec()->set_queue("research");
  controller_->Submit(scheduler::Submitter{user_, groups_, admin_}, req,
                      submitted.Callback());
  faulty_->Resume();
  const absl::Status delete_status = deleted.Wait();
  EXPECT_TRUE(delete_status.ok()) << delete_status;
  const absl::StatusOr<v1::SubmitJobResponse> job = submitted.Wait();
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument)
      << job.status();
  EXPECT_EQ(job.status().message().find("default, research"),
            std::string::npos)
      << "offered the queue being deleted: " << job.status();
  Open();  // a restart: nothing waits in the queue that is gone
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 0);
}

// A queue is a permission: mallory cannot submit into a team's queue nor
// above her cap there, and a refused submit stores nothing. Only an admin
// gives a job another priority, and the change is one of its events.
TEST_F(QueuesTest, QueuesAdmitTheirOwnAndPriorityIsTheAdminsToGive) {
  v1::QueueSpec research = Spec("research", 1);
  research.add_users("alice");
  research.add_groups("ml");
  research.mutable_max_priority()->set_value(5);
  ASSERT_TRUE(Put(research).ok());
  admin_ = false;
  user_ = "mallory";
  auto outside = SubmitTo("research", 1);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied)
      << outside.status();
  auto high = SubmitTo("default", 1, /*priority=*/2147483647);
  EXPECT_EQ(high.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 0);
  groups_ = {"ml"};  // her token says she is in ml now
  EXPECT_TRUE(SubmitTo("research", 1, 5).ok());
  EXPECT_EQ(SubmitTo("research", 1, 6).status().code(),
            absl::StatusCode::kPermissionDenied);
  user_ = "alice";
  groups_.clear();
  auto alices = SubmitTo("research", 1, 3);
  ASSERT_TRUE(alices.ok()) << alices.status();
  const std::string id = alices->job_id();

  auto set = [&](int priority) {
    v1::SetJobPriorityRequest req;
    req.set_job_id(id);
    req.set_priority(priority);
    req.set_reason("deadline");
    return Sync<absl::StatusOr<v1::Job>>([&](auto done) {
      controller_->SetPriority("root", req, std::move(done));
    });
  };
  auto raised = set(100);
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->spec().priority(), 100);
  std::vector<v1::JobEvent> events;
  bool finished = false;
  ASSERT_TRUE(controller_->ReadEvents(id, 0, &events, &finished).ok());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].reason(), "priority 3 -> 100 set by root: deadline");
  EXPECT_EQ(events[1].from_state(), events[1].to_state());
  // Again: nothing new (a retry of a change that went through).
  ASSERT_TRUE(set(100).ok());
  events.clear();
  ASSERT_TRUE(controller_->ReadEvents(id, 0, &events, &finished).ok());
  EXPECT_EQ(events.size(), 2u);
  // It survives a restart.
  Open();
  EXPECT_EQ(controller_->GetJob(id)->spec().priority(), 100);
  ASSERT_TRUE(CancelSync(id).ok());
  EXPECT_EQ(set(1).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Pending specs are counted in bytes as well as jobs (finding F4): a user
// cannot park gigabytes of environment in the queue; a spec whose command
// and env would make a StartRanks too large for an agent is refused.
TEST_F(QueuesTest, PendingSpecsAreCountedInBytes) {
  submit_limits_.max_pending_bytes = 300000;
  Open();
  auto padded = [&](size_t bytes) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_command("/bin/true");
    (*req.mutable_spec()->mutable_env())["PAD"] = std::string(bytes, 'x');
    req.mutable_spec()->mutable_resources()->set_nodes(2);  // stays pending
    return SubmitRequest(req);
  };
  ASSERT_TRUE(padded(200000).ok());
  auto over = padded(200000);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("--max-pending-bytes-per-user"),
            std::string::npos)
      << over.status();
  auto huge = padded(size_t{2} << 20);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(huge.status().message().rfind("env: command and env hold", 0), 0u)
      << huge.status();
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 1);
  // Other users are not held back by it.
  user_ = "bob";
  EXPECT_TRUE(padded(200000).ok());
}

TEST_F(QueuesTest, SubmitChecksTheQueue) {
  admin_ = false;  // a queue's caps bind users, not admins
  v1::QueueSpec spec = Spec("short", 1);
  spec.mutable_default_time_limit()->set_seconds(600);
  spec.mutable_max_time_limit()->set_seconds(3600);
  spec.set_max_pending_jobs_per_user(2);
  spec.mutable_max_priority()->set_value(10);
  ASSERT_TRUE(Put(spec).ok());

  auto unknown = SubmitTo("nope", 1);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message().rfind("queue: there is no queue 'nope'",
                                             0),
            0u)
      << unknown.status();
  auto too_long = SubmitTo("short", 1, 0, /*time_limit_s=*/7200);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(too_long.status().message().rfind("time_limit:", 0), 0u);
  auto too_high = SubmitTo("short", 1, /*priority=*/11);
  EXPECT_EQ(too_high.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(too_high.status().message().rfind("priority:", 0), 0u);
  v1::QueueSpec capped = Spec("capped", 1);
  capped.set_max_running_gpus_per_user(4);
  auto* quota = capped.add_quotas();
  quota->set_gpu_model("*");
  quota->set_nominal_gpus(6);
  ASSERT_TRUE(Put(capped).ok());
  auto never = SubmitTo("capped", 8);
  EXPECT_EQ(never.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(never.status().message().find("max_running_gpus_per_user"),
            std::string::npos);
  capped.set_max_running_gpus_per_user(0);
  ASSERT_TRUE(Put(capped).ok());
  never = SubmitTo("capped", 8);
  EXPECT_EQ(never.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(never.status().message().find("can hold at most 6"),
            std::string::npos);
  // Rejected requests stored nothing.
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 0);

  auto first = SubmitTo("short", 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(xl::FromProto(
                controller_->GetJob(first->job_id())->spec().time_limit()),
            absl::Minutes(10));
  ASSERT_TRUE(SubmitTo("short", 1, 0, 60).ok());
  auto third = SubmitTo("short", 1);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("max_pending_jobs_per_user"),
            std::string::npos);
  // Other users and other queues are not limited by it.
  EXPECT_TRUE(SubmitTo("default", 1).ok());
  user_ = "bob";
  EXPECT_TRUE(SubmitTo("short", 1).ok());

  // A queue with jobs cannot be deleted; once they are gone it can, and
  // then nothing can be submitted to it.
  EXPECT_EQ(Delete("short").code(), absl::StatusCode::kFailedPrecondition);
  const v1::ListJobsResponse jobs = *controller_->ListJobs({});
  for (const auto& job : jobs.jobs()) ASSERT_TRUE(CancelSync(job.id()).ok());
  EXPECT_TRUE(Delete("short").ok());
  EXPECT_EQ(SubmitTo("short", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Delete("short").code(), absl::StatusCode::kNotFound);
}

TEST_F(QueuesTest, AQuotaHoldsJobsWithTheirOwnReason) {
  auto a = AddNode("a", 8);
  v1::QueueSpec spec = Spec("research", 1);
  auto* quota = spec.add_quotas();
  quota->set_gpu_model("NVIDIA H100 80GB HBM3");
  quota->set_nominal_gpus(4);
  ASSERT_TRUE(Put(spec).ok());
  std::string first = SubmitTo("research", 4)->job_id();
  std::string second = SubmitTo("research", 2)->job_id();
  std::string other = SubmitTo("default", 2)->job_id();
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(first)->state(), v1::SCHEDULED);
  EXPECT_EQ(controller_->GetJob(other)->state(), v1::SCHEDULED);
  v1::Job waiting = *controller_->GetJob(second);
  EXPECT_EQ(waiting.state(), v1::PENDING);
  EXPECT_NE(waiting.reason().find("queue research's quota of 4 NVIDIA H100"),
            std::string::npos)
      << waiting.reason();
  const v1::ListQueuesResponse listed = *controller_->ListQueues();
  for (const auto& q : listed.queues()) {
    if (q.spec().name() != "research") continue;
    EXPECT_EQ(q.gpus_in_use().at("NVIDIA H100 80GB HBM3"), 4);
    EXPECT_EQ(q.pending_jobs(), 1);
    EXPECT_EQ(q.running_jobs(), 1);
  }
  // Raising the quota lets it start at the next pass.
  quota->set_nominal_gpus(6);
  ASSERT_TRUE(Put(spec).ok());
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(second)->state(), v1::SCHEDULED);
}

TEST_F(QueuesTest, FairShareUsageIsCountedStoredAndOrdersTheQueue) {
  tweak_ = [](ControllerOptions* o) {
    o->usage_interval = absl::Seconds(1);
    o->usage_store_interval = absl::Seconds(10);
    o->priority_weights.half_life = absl::Hours(24);
  };
  Open();
  auto a = AddNode("a", 8);
  // alice uses the node for an hour.
  std::string used = SubmitTo("default", 8)->job_id();
  controller_->Tick();
  a->WaitFor(v1::SchedulerMessage::kStartRanks);
  for (int i = 0; i < 60; ++i) {
    clock_.Advance(absl::Minutes(1));
    Beat("a", a.get());
    controller_->Tick();
  }
  Report("a", a.get(), used, 1, 0, v1::RANK_EXITED);
  for (int r = 1; r < 8; ++r) Report("a", a.get(), used, 1, r, v1::RANK_EXITED);
  EXPECT_EQ(WaitState(used, v1::SUCCEEDED), v1::SUCCEEDED);
  v1::GetSharesResponse shares = controller_->GetShares();
  double alice_hours = 0, alice_factor = 1;
  for (const auto& row : shares.rows()) {
    if (row.user() == "alice") {
      alice_hours = row.gpu_hours();
      alice_factor = row.fair_share_factor();
    }
  }
  // 8 GPUs x 1 h, decayed by at most an hour of a 24 h half-life.
  EXPECT_NEAR(alice_hours, 8 * 0.98, 0.2);
  // The only user of the only queue used all of it: exactly the queue's
  // share (0.5) and exactly hers within it (0.5).
  EXPECT_NEAR(alice_factor, 0.25, 1e-9);

  // Stored (at most usage_store_interval old) and loaded after a restart.
  clock_.Advance(absl::Seconds(11));
  controller_->Tick();
  Settle();
  Open();
  a = AddNode("a", 8);
  shares = controller_->GetShares();
  double reloaded = 0;
  for (const auto& row : shares.rows()) {
    if (row.user() == "alice") reloaded = row.gpu_hours();
  }
  EXPECT_NEAR(reloaded, alice_hours, 0.05);

  // alice submits first, bob second: bob, who used nothing, goes first.
  std::string alices = SubmitTo("default", 8)->job_id();
  user_ = "bob";
  std::string bobs = SubmitTo("default", 8)->job_id();
  auto explained = controller_->ExplainJob(alices);
  ASSERT_TRUE(explained.ok());
  EXPECT_EQ(explained->position(), 2);
  // With bob active her share is half the queue's, and she used it all.
  EXPECT_NEAR(explained->priority().fair_share_factor(), 0.125, 0.01);
  EXPECT_NEAR(explained->priority().effective(),
              100 * explained->priority().fair_share_factor(), 0.1);
  ASSERT_EQ(explained->ahead_size(), 1);
  EXPECT_EQ(explained->ahead(0).job_id(), bobs);
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(bobs)->state(), v1::SCHEDULED);
  EXPECT_EQ(controller_->GetJob(alices)->state(), v1::PENDING);
}

TEST_F(QueuesTest, AHigherPriorityJobPreemptsAWholeGangWithoutSpendingARetry) {
  auto a = AddNode("a", 8);
  auto b = AddNode("b", 8);
  std::string low = SubmitTo("default", 8, 0, 0, /*nodes=*/2)->job_id();
  controller_->Tick();
  a->WaitFor(v1::SchedulerMessage::kStartRanks);
  b->WaitFor(v1::SchedulerMessage::kStartRanks);
  std::map<std::string, std::vector<int>> ranks_on;
  const v1::Job started = *controller_->GetJob(low);
  for (const auto& alloc : started.allocations()) {
    ranks_on[alloc.node()].assign(alloc.ranks().begin(), alloc.ranks().end());
  }
  for (const auto& [node, ranks] : ranks_on) {
    FakeConnection* conn = node == "a" ? a.get() : b.get();
    for (int r : ranks) Report(node, conn, low, 1, r, v1::RANK_RUNNING);
  }
  ASSERT_EQ(WaitState(low, v1::RUNNING), v1::RUNNING);

  std::string high = SubmitTo("default", 8, /*priority=*/5)->job_id();
  controller_->Tick();
  Settle();
  v1::Job victim = *controller_->GetJob(low);
  EXPECT_EQ(victim.state(), v1::PENDING);
  EXPECT_EQ(victim.attempt(), 2);
  EXPECT_EQ(victim.retries_used(), 0);
  EXPECT_EQ(victim.preemptions(), 1);
  std::vector<v1::JobEvent> events;
  bool finished = false;
  ASSERT_TRUE(controller_->ReadEvents(low, 0, &events, &finished).ok());
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2].to_state(), v1::PREEMPTED);
  EXPECT_NE(events[events.size() - 2].reason().find("preempted by job " + high),
            std::string::npos);
  EXPECT_EQ(events.back().to_state(), v1::PENDING);
  EXPECT_NE(events.back().reason().find("without spending a retry"),
            std::string::npos);
  // Every node of the gang is told to stop it, with its grace.
  a->WaitFor(v1::SchedulerMessage::kStopJob);
  b->WaitFor(v1::SchedulerMessage::kStopJob);
  v1::Job waiting = *controller_->GetJob(high);
  EXPECT_EQ(waiting.state(), v1::PENDING);
  EXPECT_NE(waiting.reason().find("preempting job " + low), std::string::npos)
      << waiting.reason();
  EXPECT_TRUE(waiting.has_estimated_start_time());
  // Nothing more is preempted while the victim stops.
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(low)->preemptions(), 1);

  // Once the victim's ranks are gone, the preemptor starts; the victim
  // waits (it cannot preempt a higher priority).
  for (const auto& [node, ranks] : ranks_on) {
    FakeConnection* conn = node == "a" ? a.get() : b.get();
    for (int r : ranks) Report(node, conn, low, 1, r, v1::RANK_EXITED, 143);
  }
  Settle();
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(high)->state(), v1::SCHEDULED);
  EXPECT_EQ(controller_->GetJob(low)->state(), v1::PENDING);
}

// While its victims stop, the preemptor preempts nothing more, through
// full passes too; the victim waits out its grace before it may start
// again; the preemptor gets the node once the victim's ranks are gone.
TEST_F(QueuesTest, APreemptorWaitsForItsVictimsAndTakesNoMore) {
  tweak_ = [](ControllerOptions* o) { o->periodic_pass = absl::Seconds(1); };
  Open();
  auto a = AddNode("a", 8);
  auto b = AddNode("b", 8);
  std::string one = SubmitTo("default", 8)->job_id();
  std::string two = SubmitTo("default", 8)->job_id();
  controller_->Tick();
  Settle();
  std::string high = SubmitTo("default", 8, /*priority=*/5)->job_id();
  controller_->Tick();
  Settle();
  auto preempted = [&] {
    return controller_->GetJob(one)->preemptions() +
           controller_->GetJob(two)->preemptions();
  };
  ASSERT_EQ(preempted(), 1);
  const std::string victim =
      controller_->GetJob(one)->preemptions() == 1 ? one : two;
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Seconds(2));
    Beat("a", a.get());
    Beat("b", b.get());
    controller_->Tick();
    Settle();
  }
  EXPECT_EQ(preempted(), 1) << "preempted again while the victim stops";
  EXPECT_EQ(controller_->GetJob(high)->state(), v1::PENDING);
  // The victim's ranks exit; the node goes to the preemptor.
  for (const std::string& n : {std::string("a"), std::string("b")}) {
    FakeConnection* conn = n == "a" ? a.get() : b.get();
    for (int r = 0; r < 8; ++r) {
      Report(n, conn, victim, 1, r, v1::RANK_EXITED, 143);
    }
  }
  Settle();
  clock_.Advance(absl::Seconds(2));
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(high)->state(), v1::SCHEDULED);
  EXPECT_EQ(controller_->GetJob(victim)->state(), v1::PENDING);
  EXPECT_EQ(preempted(), 1);
}

// A node where ranks of three different jobs fail to start for reasons of
// the node drains by itself, saying why; a job's own failures do not count.
TEST_F(QueuesTest, BadNodesDrainThemselves) {
  auto a = AddNode("a", 8);
  auto b = AddNode("b", 8);
  // Only one node has room for the failing jobs: the other is busy.
  std::string busy = SubmitTo("default", 8)->job_id();
  controller_->Tick();
  Settle();
  const std::string busy_node =
      controller_->GetJob(busy)->allocations(0).node();
  auto bad = busy_node == "a" ? b : a;
  const std::string bad_name = busy_node == "a" ? "b" : "a";
  for (int i = 0; i < 4; ++i) {
    std::string id = SubmitTo("default", 8)->job_id();
    controller_->Tick();
    Settle();
    ASSERT_EQ(controller_->GetJob(id)->allocations(0).node(), bad_name)
        << "job " << i;
    v1::AgentMessage msg;
    *msg.mutable_rank_status() = Status(id, 1, 0, v1::RANK_FAILED_TO_START);
    // The first job's failure is its own (its command): it counts for
    // nothing against the node, so the node drains only after three more.
    msg.mutable_rank_status()->set_message(
        i == 0 ? "cannot execute x: not found in PATH"
               : "cannot create pipes: Too many open files");
    msg.mutable_rank_status()->set_node_fault(i > 0);
    controller_->AgentMessage(bad_name, bad.get(), msg);
    for (int r = 1; r < 8; ++r) {
      Report(bad_name, bad.get(), id, 1, r, v1::RANK_EXITED, 143);
    }
    Settle();
    EXPECT_EQ(controller_->GetJob(id)->state(), v1::FAILED);
  }
  v1::Node node = *controller_->GetNode(bad_name);
  EXPECT_EQ(node.state(), v1::DRAINED);
  EXPECT_NE(node.state_reason().find("3 different jobs"), std::string::npos)
      << node.state_reason();
  // Drained is stored: it survives a restart.
  Settle();
  Open();
  EXPECT_EQ(controller_->GetNode(bad_name)->state(), v1::DRAINED);
}

// A retry prefers other nodes than the one its attempt failed on, and goes
// back to it only when nothing else has room.
TEST_F(QueuesTest, ARetryAvoidsTheNodeItFailedOn) {
  auto a = AddNode("a", 8);
  auto b = AddNode("b", 8);
  v1::SubmitJobRequest req;
  auto* spec = req.mutable_spec();
  spec->add_command("/bin/true");
  spec->set_max_retries(2);
  spec->mutable_resources()->set_nodes(1);
  spec->mutable_resources()->set_gpus_per_node(8);
  std::string id = SubmitRequest(req)->job_id();
  controller_->Tick();
  Settle();
  const std::string first = controller_->GetJob(id)->allocations(0).node();
  auto conn = [&](const std::string& n) { return n == "a" ? a.get() : b.get(); };
  for (int r = 0; r < 8; ++r) {
    Report(first, conn(first), id, 1, r, v1::RANK_EXITED, r == 0 ? 1 : 143);
  }
  Settle();
  controller_->Tick();
  Settle();
  const std::string second = controller_->GetJob(id)->allocations(0).node();
  EXPECT_NE(second, first);
  // It fails there too: now that node is the one it avoids. Both are
  // free, and it goes to the first one (the other job, submitted after it,
  // gets the second).
  for (int r = 0; r < 8; ++r) {
    Report(second, conn(second), id, 2, r, v1::RANK_EXITED, r == 0 ? 1 : 143);
  }
  Settle();
  std::string blocker = SubmitTo("default", 8)->job_id();
  controller_->Tick();
  Settle();
  ASSERT_EQ(controller_->GetJob(id)->attempt(), 3);
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::SCHEDULED);
  EXPECT_EQ(controller_->GetJob(id)->allocations(0).node(), first);
  EXPECT_EQ(controller_->GetJob(blocker)->allocations(0).node(), second);
}

// --switches=N@wait: the limit holds while the job waits less than its
// wait, then is dropped.
TEST_F(QueuesTest, ASwitchLimitRelaxesAfterItsWait) {
  auto a = AddNode("a", 8);  // the fixture's nodes have no switch label
  v1::SubmitJobRequest req;
  auto* spec = req.mutable_spec();
  spec->add_command("/bin/true");
  spec->mutable_resources()->set_nodes(1);
  spec->mutable_resources()->set_gpus_per_node(8);
  spec->mutable_resources()->set_max_switches(1);
  spec->mutable_resources()->mutable_max_switches_wait()->set_seconds(600);
  std::string id = SubmitRequest(req)->job_id();
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::PENDING);
  EXPECT_NE(controller_->GetJob(id)->reason().find("under at most 1 switch"),
            std::string::npos)
      << controller_->GetJob(id)->reason();
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(absl::Minutes(1));
    Beat("a", a.get());
    controller_->Tick();
    Settle();
  }
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::SCHEDULED);
}

// The preemptor's wait survives a restart: while the victim's old ranks
// still run, it preempts nothing more.
TEST_F(QueuesTest, APreemptorStillWaitsForItsVictimsAfterARestart) {
  tweak_ = [](ControllerOptions* o) { o->periodic_pass = absl::Seconds(1); };
  Open();
  auto a = AddNode("a", 8);
  auto b = AddNode("b", 8);
  std::string one = SubmitTo("default", 8)->job_id();
  std::string two = SubmitTo("default", 8)->job_id();
  controller_->Tick();
  Settle();
  std::string high = SubmitTo("default", 8, /*priority=*/5)->job_id();
  controller_->Tick();
  Settle();
  const int64_t first = controller_->GetJob(one)->preemptions() +
                        controller_->GetJob(two)->preemptions();
  ASSERT_EQ(first, 1);
  const std::string victim =
      controller_->GetJob(one)->preemptions() == 1 ? one : two;
  EXPECT_EQ(controller_->GetJob(victim)->preempted_by(), high);
  std::map<std::string, std::string> node_of;
  for (const std::string& id : {one, two}) {
    // The victim's allocation is gone from the job; its hold tells.
    v1::Job j = *controller_->GetJob(id);
    if (j.allocations_size() > 0) node_of[id] = j.allocations(0).node();
  }
  const std::string survivor = victim == one ? two : one;
  const std::string victim_node = node_of[survivor] == "a" ? "b" : "a";
  Settle();
  Open();  // a restart while the victim stops
  std::vector<v1::RankStatus> old_ranks, running;
  for (int r = 0; r < 8; ++r) {
    old_ranks.push_back(Status(victim, 1, r, v1::RANK_RUNNING));
    running.push_back(Status(survivor, 1, r, v1::RANK_RUNNING));
  }
  a = AddNode("a", 8, victim_node == "a" ? old_ranks : running);
  b = AddNode("b", 8, victim_node == "b" ? old_ranks : running);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(2));
    Beat("a", a.get());
    Beat("b", b.get());
    controller_->Tick();
    Settle();
  }
  EXPECT_EQ(controller_->GetJob(survivor)->preemptions(), 0)
      << "preempted a second victim after the restart";
  EXPECT_EQ(controller_->GetJob(high)->state(), v1::PENDING);
}

TEST_F(QueuesTest, MinimumRuntimeAndNonPreemptibleJobsAreRespected) {
  v1::QueueSpec spec = Spec("long", 1);
  spec.mutable_min_runtime()->set_seconds(3600);
  spec.set_allow_non_preemptible(true);
  ASSERT_TRUE(Put(spec).ok());
  auto refused = SubmitTo("default", 1, 0, 0, 1, /*preemptible=*/false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message().rfind("preemptible:", 0), 0u);

  auto a = AddNode("a", 8);
  std::string young = SubmitTo("long", 4)->job_id();
  std::string fixed = SubmitTo("long", 4, 0, 0, 1, false)->job_id();
  controller_->Tick();
  Settle();
  ASSERT_EQ(controller_->GetJob(young)->state(), v1::SCHEDULED);
  ASSERT_EQ(controller_->GetJob(fixed)->state(), v1::SCHEDULED);
  // A job of another queue may not preempt them (preemption stays inside a
  // queue unless --preempt-across-queues); one of their own queue may.
  std::string other = SubmitTo("default", 4, /*priority=*/5)->job_id();
  std::string high = SubmitTo("long", 4, /*priority=*/5)->job_id();
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(young)->preemptions(), 0);
  // An hour later the young one may go; the fixed one never.
  int minutes = 0;
  while (minutes < 70 && controller_->GetJob(young)->preemptions() == 0) {
    clock_.Advance(absl::Minutes(1));
    ++minutes;
    Beat("a", a.get());
    controller_->Tick();
    Settle();
  }
  EXPECT_GE(minutes, 60);
  EXPECT_EQ(controller_->GetJob(young)->preemptions(), 1);
  EXPECT_EQ(controller_->GetJob(fixed)->preemptions(), 0);
  EXPECT_NE(controller_->GetJob(high)->reason().find("preempting job " + young),
            std::string::npos)
      << controller_->GetJob(high)->reason() << " / state "
      << controller_->GetJob(high)->state();
  EXPECT_EQ(controller_->GetJob(other)->state(), v1::PENDING);
  EXPECT_EQ(controller_->GetJob(fixed)->state(), v1::SCHEDULED);
}

TEST_F(QueuesTest, ADryRunShowsThePlacementOrTheWaitAndStoresNothing) {
  auto a = AddNode("a", 8);
  auto b = AddNode("b", 8);
  auto dry = [&](int nodes, int gpus, int priority) {
    v1::SubmitJobRequest req;
    req.set_dry_run(true);
    auto* spec = req.mutable_spec();
    spec->add_command("/bin/true");
    spec->set_priority(priority);
    spec->mutable_resources()->set_nodes(nodes);
    spec->mutable_resources()->set_gpus_per_node(gpus);
    return SubmitRequest(req);
  };
  auto now = dry(2, 4, 0);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_TRUE(now->job_id().empty());
  const v1::DryRun& d = now->dry_run();
  EXPECT_TRUE(d.starts_now());
  ASSERT_EQ(d.allocations_size(), 2);
  EXPECT_EQ(d.allocations(1).group_rank(), 1);
  EXPECT_EQ(d.allocations(1).ranks_size(), 4);
  EXPECT_EQ(d.allocations(1).ranks(0), 4);
  EXPECT_EQ(d.allocations(0).gpu_indices_size(), 4);
  EXPECT_EQ(d.position(), 1);
  EXPECT_EQ(d.spec().queue(), "default");
  // Nothing was stored or queued.
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 0);
  controller_->Tick();
  Settle();
  EXPECT_EQ(a->Count(v1::SchedulerMessage::kStartRanks), 0);

  // The fleet full with a job of an hour's limit: a 2-node dry run waits,
  // with the reservation's start; a higher priority would preempt it.
  std::string full = SubmitTo("default", 8, 0, 3600, /*nodes=*/2)->job_id();
  controller_->Tick();
  Settle();
  ASSERT_EQ(controller_->GetJob(full)->state(), v1::SCHEDULED);
  auto waits = dry(2, 8, 0);
  ASSERT_TRUE(waits.ok());
  EXPECT_FALSE(waits->dry_run().starts_now());
  EXPECT_NE(waits->dry_run().reason().find("reserved"), std::string::npos)
      << waits->dry_run().reason();
  EXPECT_TRUE(waits->dry_run().has_estimated_start_time());
  auto preempts = dry(1, 8, 5);
  ASSERT_TRUE(preempts.ok());
  ASSERT_EQ(preempts->dry_run().would_preempt_size(), 1);
  EXPECT_EQ(preempts->dry_run().would_preempt(0), full);
  controller_->Tick();
  Settle();
  EXPECT_EQ(controller_->GetJob(full)->preemptions(), 0);
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 1);
  // A job that would wait for its after_ok says so, and is not placed.
  v1::SubmitJobRequest after;
  after.set_dry_run(true);
  after.mutable_spec()->add_command("/bin/true");
  after.mutable_spec()->add_after_ok(full);
  auto waiting = SubmitRequest(after);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_FALSE(waiting->dry_run().starts_now());
  EXPECT_NE(waiting->dry_run().reason().find("waits for job " + full),
            std::string::npos)
      << waiting->dry_run().reason();
  // A dry run is checked as a submit is.
  v1::SubmitJobRequest bad;
  bad.set_dry_run(true);
  bad.mutable_spec()->add_command("/bin/true");
  bad.mutable_spec()->set_queue("nope");
  EXPECT_EQ(SubmitRequest(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// An elastic job (1 to 3 nodes) starts on the one node there is, grows
// onto two more once its attempt has run --elastic-grow-after (a new attempt
// on all three, rank 0 kept on its node, WORLD_SIZE from the nodes it got),
// and under preemption shrinks onto the nodes the preemptor leaves it.
TEST_F(QueuesTest, AnElasticJobStartsSmallGrowsAndShrinks) {
  tweak_ = [](ControllerOptions* o) {
    o->periodic_pass = absl::Seconds(1);
    o->elastic_grow_after = absl::Seconds(5);
  };
  Open();
  std::map<std::string, std::shared_ptr<FakeConnection>> conns;
  conns["b"] = AddNode("b", 8);
  const std::string id = SubmitElastic(3, 2);
  controller_->Tick();
  Settle();
  // Runs every rank of the current attempt, or ends them (SIGTERM'd).
  auto report = [&](v1::RankState state, int code = 0) {
    const v1::Job job = *controller_->GetJob(id);
    for (const auto& alloc : job.allocations()) {
      for (int r : alloc.ranks()) {
        Report(alloc.node(), conns[alloc.node()].get(), id, job.attempt(), r,
               state, code);
      }
    }
    Settle();
  };
  auto tick = [&](absl::Duration d) { TickAll(conns, d); };
  v1::Job job = *controller_->GetJob(id);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  ASSERT_EQ(job.allocations_size(), 1);
  EXPECT_EQ(job.world_size(), 2);
  const std::string first = job.allocations(0).node();
  const v1::Job started = job;
  report(v1::RANK_RUNNING);

  conns["a"] = AddNode("a", 8);
  conns["c"] = AddNode("c", 8);
  tick(absl::Seconds(2));
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING)
      << "grew before --elastic-grow-after";
  tick(absl::Seconds(4));
  job = *controller_->GetJob(id);
  ASSERT_EQ(job.state(), v1::PENDING) << job.reason();
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.resizes(), 1);
  EXPECT_EQ(job.retries_used(), 0);
  EXPECT_NE(job.reason().find("elastic: growing from 1 to 3 of 3 nodes (a, c free)"),
            std::string::npos)
      << job.reason();
  // Its old ranks stop; once fenced off, it starts on all three.
  auto stopped = [&](const v1::Job& attempt) {
    for (const auto& alloc : attempt.allocations()) {
      for (int r : alloc.ranks()) {
        Report(alloc.node(), conns[alloc.node()].get(), id, attempt.attempt(),
               r, v1::RANK_EXITED, 143);
      }
    }
    Settle();
  };
  // Fenced off (grace and a heartbeat) but its old rank on b still holds
  // its GPUs: it does not restart on a and c alone (and grow again later).
  tick(absl::Seconds(12));
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::PENDING)
      << "restarted on fewer nodes than it holds"
      << controller_->GetJob(id)->DebugString();
  stopped(started);
  for (int i = 0; i < 20 && controller_->GetJob(id)->state() == v1::PENDING;
       ++i) {
    tick(absl::Seconds(2));
  }
  job = *controller_->GetJob(id);
  ASSERT_EQ(job.state(), v1::SCHEDULED) << job.reason();
  ASSERT_EQ(job.allocations_size(), 3);
  EXPECT_EQ(job.world_size(), 6);
  // Rank 0 stays on b, where its checkpoint is (a sorts first).
  EXPECT_EQ(job.allocations(0).node(), first) << "rank 0 moved";
  const v1::Job grown = job;
  report(v1::RANK_RUNNING);

  // A higher priority job needs one node: the elastic job gives it one
  // and restarts on the other two.
  v1::SubmitJobRequest high;
  high.mutable_spec()->add_command("/bin/true");
  high.mutable_spec()->set_priority(5);
  high.mutable_spec()->mutable_resources()->set_gpus_per_node(8);
  const std::string hid = SubmitRequest(high)->job_id();
  tick(absl::Seconds(1));
  job = *controller_->GetJob(id);
  ASSERT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.preemptions(), 1);
  EXPECT_NE(job.reason().find("preempted by job " + hid + " of alice (priority 5 > 0); elastic, it shrinks from 3 to 2 nodes"),
            std::string::npos)
      << job.reason();
  stopped(grown);
  for (int i = 0; i < 20 && (controller_->GetJob(id)->state() == v1::PENDING ||
                             controller_->GetJob(hid)->state() == v1::PENDING);
       ++i) {
    tick(absl::Seconds(2));
  }
  EXPECT_EQ(controller_->GetJob(hid)->state(), v1::SCHEDULED);
  job = *controller_->GetJob(id);
  ASSERT_EQ(job.state(), v1::SCHEDULED) << job.reason();
  EXPECT_EQ(job.allocations_size(), 2);
  EXPECT_EQ(job.world_size(), 4);
  EXPECT_EQ(job.attempt(), 3);
}

// Nodes that free while an elastic job is younger than --elastic-grow-after
// are offered to it once it is old enough, not at the next periodic pass
// (an hour away here): the pass that saw it too young sets a pass for then.
TEST_F(QueuesTest, AnElasticJobGrowsWhenOldEnoughNotAtThePeriodicPass) {
  tweak_ = [](ControllerOptions* o) {
    o->periodic_pass = absl::Hours(1);
    o->elastic_grow_after = absl::Seconds(5);
  };
  Open();
  std::map<std::string, std::shared_ptr<FakeConnection>> conns;
  conns["b"] = AddNode("b", 8);
  const std::string id = SubmitElastic(2, 0);
  controller_->Tick();
  Settle();
  v1::Job job = *controller_->GetJob(id);
  ASSERT_EQ(job.allocations_size(), 1);
  for (int r : job.allocations(0).ranks()) {
    Report("b", conns["b"].get(), id, job.attempt(), r, v1::RANK_RUNNING, 0);
  }
  Settle();
  auto tick = [&](absl::Duration d) { TickAll(conns, d); };
  tick(absl::Seconds(1));
  conns["a"] = AddNode("a", 8);  // free while the job is 1 s old
  tick(absl::Seconds(1));
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING);
  tick(absl::Seconds(2));
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::RUNNING)
      << "grew before --elastic-grow-after";
  tick(absl::Seconds(2));  // 6 s old
  job = *controller_->GetJob(id);
  EXPECT_EQ(job.state(), v1::PENDING) << job.reason();
  EXPECT_EQ(job.resizes(), 1);
  EXPECT_NE(job.reason().find("elastic: growing from 1 to 2 of 2 nodes"),
            std::string::npos)
      << job.reason();
}

// Pending jobs beyond the pass's reservations get an estimated start from
// the estimator's pass: each in rank order after the ends of the running
// jobs and of the jobs before it.
TEST_F(QueuesTest, EveryPendingJobGetsAnEstimatedStart) {
  tweak_ = [](ControllerOptions* o) { o->reservations = 1; };
  Open();
  auto a = AddNode("a", 8);
  const std::string running = SubmitTo("default", 8, 0, 3600)->job_id();
  controller_->Tick();
  Settle();
  ASSERT_EQ(controller_->GetJob(running)->state(), v1::SCHEDULED);
  std::vector<std::string> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(SubmitTo("default", 8, 0, 3600)->job_id());
  }
  controller_->Tick();
  Settle();
  const absl::Time now = clock_.Now();
  auto estimate = [&](const std::string& id) {
    const v1::Job job = *controller_->GetJob(id);
    return job.has_estimated_start_time()
               ? FromProto(job.estimated_start_time())
               : absl::InfinitePast();
  };
  // The pass reserves for the first only.
  EXPECT_EQ(estimate(waiting[0]), now + absl::Hours(1))
      << controller_->GetJob(waiting[0])->DebugString();
  EXPECT_EQ(estimate(waiting[1]), absl::InfinitePast());
  controller_->EstimateStarts();
  EXPECT_EQ(estimate(waiting[0]), now + absl::Hours(1));
  EXPECT_EQ(estimate(waiting[1]), now + absl::Hours(2));
  EXPECT_EQ(estimate(waiting[2]), now + absl::Hours(3));
  // Never in the past: an estimate that passed says now.
  clock_.Advance(absl::Hours(5));
  Beat("a", a.get());
  EXPECT_EQ(estimate(waiting[2]), clock_.Now());
}

// A job its queue's quota holds gets its estimate from a pass without the
// queues' policies: when resources free for it.
TEST_F(QueuesTest, AQuotaHeldJobIsEstimatedFromWhenResourcesFree) {
  auto a = AddNode("a", 8);
  v1::QueueSpec spec = Spec("research", 1);
  auto* quota = spec.add_quotas();
  quota->set_gpu_model("NVIDIA H100 80GB HBM3");
  quota->set_nominal_gpus(8);
  ASSERT_TRUE(Put(spec).ok());
  const std::string running = SubmitTo("research", 8, 0, 3600)->job_id();
  controller_->Tick();
  Settle();
  ASSERT_EQ(controller_->GetJob(running)->state(), v1::SCHEDULED);
  const std::string held = SubmitTo("research", 8, 0, 3600)->job_id();
  controller_->Tick();
  Settle();
  v1::Job job = *controller_->GetJob(held);
  ASSERT_EQ(job.state(), v1::PENDING);
  EXPECT_NE(job.reason().find("quota"), std::string::npos) << job.reason();
  EXPECT_FALSE(job.has_estimated_start_time());
  controller_->EstimateStarts();
  job = *controller_->GetJob(held);
  ASSERT_TRUE(job.has_estimated_start_time()) << job.reason();
  EXPECT_EQ(FromProto(job.estimated_start_time()),
            clock_.Now() + absl::Hours(1));
}

// Resources are free now; its quota admits it when the queue's running
// job ends at its time limit: that is its estimate. A queue whose running
// job has no time limit gives its held job none (it would be a guess).
TEST_F(QueuesTest, AJobOnlyItsQuotaHoldsIsEstimatedFromWhenTheQuotaFrees) {
  auto a = AddNode("a", 8);
  auto b = AddNode("b", 8);
  auto c = AddNode("c", 8);
  for (const char* name : {"research", "open"}) {
    v1::QueueSpec spec = Spec(name, 1);
    auto* quota = spec.add_quotas();
    quota->set_gpu_model("*");
    quota->set_nominal_gpus(8);
    ASSERT_TRUE(Put(spec).ok());
  }
  const std::string running = SubmitTo("research", 8, 0, 1800)->job_id();
  const std::string forever = SubmitTo("open", 8)->job_id();
  controller_->Tick();
  Settle();
  ASSERT_EQ(controller_->GetJob(running)->state(), v1::SCHEDULED);
  ASSERT_EQ(controller_->GetJob(forever)->state(), v1::SCHEDULED);
  const std::string held = SubmitTo("research", 8, 0, 3600)->job_id();
  const std::string never = SubmitTo("open", 8)->job_id();
  controller_->Tick();
  Settle();
  v1::Job job = *controller_->GetJob(held);
  ASSERT_EQ(job.state(), v1::PENDING);
  EXPECT_NE(job.reason().find("quota"), std::string::npos) << job.reason();
  controller_->EstimateStarts();
  job = *controller_->GetJob(held);
  ASSERT_TRUE(job.has_estimated_start_time()) << job.reason();
  EXPECT_EQ(FromProto(job.estimated_start_time()),
            clock_.Now() + absl::Minutes(30));
  job = *controller_->GetJob(never);
  ASSERT_EQ(job.state(), v1::PENDING);
  EXPECT_FALSE(job.has_estimated_start_time())
      << FromProto(job.estimated_start_time());
}

// A queue's default_checkpoint_dir is what its jobs that name none get,
// recorded at submit; {job} and {attempt} expand at each start, into
// StartRanks.checkpoint_dir (each rank makes it) and XL_CHECKPOINT_DIR.
TEST_F(QueuesTest, AQueuesDefaultCheckpointDirIsExpandedAtEachStart) {
  v1::QueueSpec bad = Spec("shared", 1);
  bad.set_default_checkpoint_dir("relative/{job}");
  absl::Status refused = Put(bad).status();
  EXPECT_NE(refused.message().find("default_checkpoint_dir"), std::string::npos)
      << refused;
  v1::QueueSpec spec = Spec("shared", 1);
  spec.set_default_checkpoint_dir("/nfs/ckpt/{job}/{attempt}");
  ASSERT_TRUE(Put(spec).ok());
  auto a = AddNode("a", 8);
  const std::string id = SubmitTo("shared", 8)->job_id();
  EXPECT_EQ(controller_->GetJob(id)->spec().checkpoint_dir(),
            "/nfs/ckpt/{job}/{attempt}");
  controller_->Tick();
  const v1::StartRanks start =
      a->WaitFor(v1::SchedulerMessage::kStartRanks).start_ranks();
  const std::string want = absl::StrCat("/nfs/ckpt/", id, "/1");
  EXPECT_EQ(start.checkpoint_dir(), want);
  const auto& env = start.env().empty() ? start.ranks(0).env() : start.env();
  EXPECT_EQ(env.at("XL_CHECKPOINT_DIR"), want);
  // A job's own wins over the queue's.
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_command("/bin/true");
  req.mutable_spec()->set_queue("shared");
  req.mutable_spec()->set_checkpoint_dir("/mine/{job}");
  auto own = SubmitRequest(req);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(controller_->GetJob(own->job_id())->spec().checkpoint_dir(),
            "/mine/{job}");
}

}  // namespace
}  // namespace xl::control
