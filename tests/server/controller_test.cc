// The controller with a real store, a fake clock and fake agent connections:
// the environment of ranks, success, failure, requeue on node loss, time
// limits, idempotency and cancel. No gRPC, no sleeps on the clock.
#include "server/service/controller.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace xl::service {
namespace {

class FakeConnection : public AgentConnection {
 public:
  void Send(const v1::SchedulerMessage& msg) override {
    absl::MutexLock lock(&mu_);
    sent_.push_back(msg);
  }
  void Close(const std::string& why) override {
    absl::MutexLock lock(&mu_);
    closed_ = why;
  }
  std::string PeerAddress() const override { return "10.0.0.1"; }

  // Waits (bounded) for a message of the given case; returns it and removes
  // everything before it.
  v1::SchedulerMessage WaitFor(v1::SchedulerMessage::MsgCase c) {
    absl::MutexLock lock(&mu_);
    auto has = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (auto& m : sent_) if (m.msg_case() == c) return true;
      return false;
    };
    mu_.AwaitWithTimeout(absl::Condition(&has), absl::Seconds(10));
    while (!sent_.empty()) {
      auto m = sent_.front();
      sent_.erase(sent_.begin());
      if (m.msg_case() == c) return m;
    }
    ADD_FAILURE() << "no message of case " << c;
    return {};
  }
  std::string closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::SchedulerMessage> sent_ ABSL_GUARDED_BY(mu_);
  std::string closed_ ABSL_GUARDED_BY(mu_);
};

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (std::filesystem::temp_directory_path() / "xl-ctl-XXXXXX").string();
    dir_ = mkdtemp(t.data());
    Open();
  }
  void TearDown() override {
    Close();
    std::filesystem::remove_all(dir_);
  }
  // The scheduler's shutdown order: stop the controller's loop, then close
  // the store (which commits what is queued and runs the callbacks, which
  // reach the controller), then free the controller.
  void Close() {
    if (controller_) controller_->Stop();
    store_.reset();
    controller_.reset();
  }
  void Open() {
    Close();
    store_ = std::move(*store::Store::Open(dir_ + "/x.db"));
    ControllerOptions opts;
    opts.heartbeat_timeout = absl::Seconds(10);
    opts.advertise_address = "127.0.0.1:7070";
    controller_ = std::make_unique<Controller>(store_.get(), &clock_, opts);
    ASSERT_TRUE(controller_->Recover().ok());
  }

  std::shared_ptr<FakeConnection> AddNode(const std::string& name, int gpus) {
    auto conn = std::make_shared<FakeConnection>();
    v1::Register reg;
    reg.set_name(name);
    reg.mutable_inventory()->set_hostname(name);
    reg.mutable_inventory()->set_cpus(8);
    reg.mutable_inventory()->set_memory_bytes(64ull << 30);
    for (int i = 0; i < gpus; ++i) {
      auto* g = reg.mutable_inventory()->add_gpus();
      g->set_index(i);
      g->set_model("NVIDIA H100 80GB HBM3");
      g->set_memory_bytes(80ull << 30);
    }
    auto* nic = reg.mutable_inventory()->add_nics();
    nic->set_name("ib0");
    nic->set_kind(v1::INFINIBAND);
    nic->set_gbps(400);
    EXPECT_TRUE(controller_->AgentRegister(reg, conn).ok());
    conn->WaitFor(v1::SchedulerMessage::kRegisterAck);
    return conn;
  }

  std::string Submit(int nodes, int gpus, const std::string& key = "",
                     int retries = 0, int time_limit_s = 0) {
    v1::SubmitJobRequest req;
    req.set_idempotency_key(key);
    auto* spec = req.mutable_spec();
    spec->add_command("/bin/true");
    spec->mutable_resources()->set_nodes(nodes);
    spec->mutable_resources()->set_gpus_per_node(gpus);
    spec->set_max_retries(retries);
    spec->mutable_time_limit()->set_seconds(time_limit_s);
    absl::Mutex mu;
    bool done = false;
    std::string id;
    controller_->Submit("alice", req, [&](absl::StatusOr<v1::SubmitJobResponse> r) {
      absl::MutexLock lock(&mu);
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) id = r->job_id();
      done = true;
    });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    return id;
  }

  void Report(const std::string& node, FakeConnection* conn, const std::string& job,
              int attempt, int rank, v1::RankState state, int code = 0) {
    v1::AgentMessage msg;
    auto* st = msg.mutable_rank_status();
    st->set_job_id(job);
    st->set_attempt(attempt);
    st->set_rank(rank);
    st->set_state(state);
    st->set_exit_code(code);
    controller_->AgentMessage(node, conn, msg);
  }

  v1::JobState WaitState(const std::string& id, v1::JobState want) {
    for (int i = 0; i < 500; ++i) {
      std::vector<v1::JobEvent> events;
      bool finished;
      EXPECT_TRUE(controller_->ReadEvents(id, 0, &events, &finished).ok());
      if (!events.empty() && events.back().to_state() == want) return want;
      usleep(10000);
    }
    return controller_->GetJob(id)->state();
  }

  FakeClock clock_;
  std::string dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> controller_;
};

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
  EXPECT_EQ(env.at("MASTER_PORT"), "29500");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(env.at("NCCL_IB_HCA"), "ib0");
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
  controller_->Tick();
  EXPECT_FALSE(a->closed().empty());
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

TEST_F(ControllerTest, IdempotencyKeyGivesOneJobAcrossRestart) {
  std::string first = Submit(1, 0, "key-1");
  std::string again = Submit(1, 0, "key-1");
  EXPECT_EQ(first, again);
  Open();  // a restart of the scheduler
  EXPECT_EQ(Submit(1, 0, "key-1"), first);
  EXPECT_NE(Submit(1, 0, "key-2"), first);
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 2);
}

TEST_F(ControllerTest, PendingJobSurvivesRestartAndKeepsItsReason) {
  std::string id = Submit(3, 8);
  controller_->Tick();
  auto job = *controller_->GetJob(id);
  EXPECT_NE(job.reason().find("no node is registered"), std::string::npos) << job.reason();
  Open();
  EXPECT_EQ(controller_->GetJob(id)->state(), v1::PENDING);
}

TEST_F(ControllerTest, CancelPendingAndFinished) {
  std::string id = Submit(1, 0);
  absl::Mutex mu;
  bool done = false;
  absl::StatusOr<v1::Job> result;
  v1::CancelJobRequest req;
  req.set_job_id(id);
  controller_->Cancel("alice", req, [&](absl::StatusOr<v1::Job> j) {
    absl::MutexLock lock(&mu);
    result = j;
    done = true;
  });
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
  }
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->state(), v1::CANCELLED);
  done = false;
  controller_->Cancel("alice", req, [&](absl::StatusOr<v1::Job> j) {
    absl::MutexLock lock(&mu);
    result = j;
    done = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
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
  EXPECT_EQ(controller_->RendezvousPut(put).code(),
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
  controller_->RendezvousGet(get, record);
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(results.empty());  // waits for the key
  }
  ASSERT_TRUE(controller_->RendezvousPut(put).ok());
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
  controller_->RendezvousGet(missing, record);
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
  controller_->RendezvousGet(missing, record);
  Report("a", a.get(), id, 1, 0, v1::RANK_EXITED, 1);
  controller_->Tick();
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(results.size(), 3u);
    EXPECT_EQ(results[2].status().code(), absl::StatusCode::kAborted);
  }
  EXPECT_EQ(controller_->RendezvousPut(put).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(ControllerTest, TrainJobRunsXlTrainAndKeepsRankZeroMetrics) {
  auto a = AddNode("a", 0);
  v1::SubmitJobRequest req;
  req.mutable_spec()->mutable_train()->set_steps(50);
  req.mutable_spec()->mutable_resources()->set_nodes(1);
  std::string id;
  bool done = false;
  absl::Mutex mu;
  controller_->Submit("alice", req, [&](absl::StatusOr<v1::SubmitJobResponse> r) {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(r.ok()) << r.status();
    id = r->job_id();
    done = true;
  });
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
  }
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
  EXPECT_EQ(job.metrics().step(), 10);
  EXPECT_DOUBLE_EQ(job.metrics().loss(), 0.75);
  ASSERT_TRUE(store_->WriteSync([](store::Tx&) { return absl::OkStatus(); }).ok());
  auto history = controller_->GetJobMetrics(id);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->points_size(), 1);
  EXPECT_EQ(history->points(0).step(), 10);
}

absl::StatusOr<v1::SubmitJobResponse> SubmitSync(Controller* c,
                                                  v1::SubmitJobRequest req) {
  absl::Mutex mu;
  bool done = false;
  absl::StatusOr<v1::SubmitJobResponse> out;
  c->Submit("alice", req, [&](absl::StatusOr<v1::SubmitJobResponse> r) {
    absl::MutexLock lock(&mu);
    out = std::move(r);
    done = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  return out;
}

TEST_F(ControllerTest, JobSizedFromItsModel) {
  auto a = AddNode("a", 8);
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_command("/bin/true");
  auto* model = req.mutable_spec()->mutable_model();
  model->set_parameters(7.5e9);
  model->set_sharding(v1::ZERO_3);
  model->set_gpus(64);
  auto r = SubmitSync(controller_.get(), req);
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
  auto r = SubmitSync(controller_.get(), req);
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
  absl::Status status;
  bool done = false;
  absl::Mutex mu;
  controller_->Submit("alice", req, [&](absl::StatusOr<v1::SubmitJobResponse> r) {
    absl::MutexLock lock(&mu);
    status = r.status();
    done = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(), "train.hidden_dim")) << status;
  EXPECT_EQ(controller_->ListJobs({})->jobs_size(), 0);
}

}  // namespace
}  // namespace xl::service
