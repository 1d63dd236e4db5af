// The controller's test fixture: a real store (optionally behind a
// FaultyStore), a fake clock and fake agent connections. No gRPC, no sleeps
// on the clock.
#ifndef XL_TESTS_SERVER_CONTROLLER_FIXTURE_H_
#define XL_TESTS_SERVER_CONTROLLER_FIXTURE_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/control/controller.h"
#include "server/store/faulty_store.h"
#include "server/store/sqlite_store.h"

namespace xl::control {

// The answer of one of the controller's asynchronous calls (its `done`
// callback), to wait for after the call: give the call Callback(), then
// Wait(). Callback() must outlive nothing but the object.
template <typename T>
class Answer {
 public:
  std::function<void(T)> Callback() {
    return [this](T r) {
      absl::MutexLock lock(&mu_);
      value_.emplace(std::move(r));
    };
  }
  // Whether the call has answered.
  bool answered() {
    absl::MutexLock lock(&mu_);
    return value_.has_value();
  }
  // Blocks until the call has answered; returns the answer.
  T Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Answer::Has));
    return *value_;
  }

 private:
  bool Has() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return value_.has_value();
  }
  absl::Mutex mu_;
  std::optional<T> value_ ABSL_GUARDED_BY(mu_);
};

// Makes an asynchronous call with `start(callback)` and waits for its
// answer.
template <typename T, typename Start>
T Sync(Start start) {
  Answer<T> answer;
  start(answer.Callback());
  return answer.Wait();
}

class FakeConnection : public AgentConnection {
 public:
  bool Send(const v1::SchedulerMessage& msg) override {
    absl::MutexLock lock(&mu_);
    if (dead_) return false;
    sent_.push_back(msg);
    return true;
  }
  // The stream ended: Send() answers false from now on.
  void Kill() {
    absl::MutexLock lock(&mu_);
    dead_ = true;
  }
  // Messages of case `c` sent so far (none removed).
  int Count(v1::SchedulerMessage::MsgCase c) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (auto& m : sent_) n += m.msg_case() == c;
    return n;
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
  bool dead_ ABSL_GUARDED_BY(mu_) = false;
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
    faulty_.reset();
    controller_.reset();
  }
  void Open() {
    Close();
    store_ = std::move(*store::SqliteStore::Open(dir_ + "/x.db"));
    faulty_ = std::make_unique<store::FaultyStore>(store_.get());
    ControllerOptions opts;
    opts.heartbeat_timeout = absl::Seconds(10);
    opts.lease = absl::Seconds(10);
    opts.advertise_address = "127.0.0.1:7070";
    opts.retention = retention_;
    opts.self_pause = self_pause_;
    opts.max_output_bytes_per_job = max_output_bytes_per_job_;
    opts.submit_limits = submit_limits_;
    if (tweak_) tweak_(&opts);
    controller_ = std::make_unique<Controller>(faulty_.get(), &clock_, opts);
    ASSERT_TRUE(controller_->Recover().ok());
  }
  // Waits until every write queued so far has committed and its callbacks
  // (effects) have run.
  void Settle() {
    (void)store_->WriteSync([](store::Tx&) { return absl::OkStatus(); });
  }

  std::shared_ptr<FakeConnection> AddNode(
      const std::string& name, int gpus,
      const std::vector<v1::RankStatus>& ranks = {}, bool shared_env = false,
      const std::string& instance_id = "") {
    auto conn = std::make_shared<FakeConnection>();
    v1::Register reg;
    reg.set_instance_id(instance_id);
    for (const auto& st : ranks) *reg.add_ranks() = st;
    reg.set_shared_env(shared_env);
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
    auto r = TrySubmit(nodes, gpus, key, retries, time_limit_s);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : "";
  }
  absl::StatusOr<v1::SubmitJobResponse> TrySubmit(int nodes, int gpus,
                                                  const std::string& key = "",
                                                  int retries = 0,
                                                  int time_limit_s = 0) {
    v1::SubmitJobRequest req;
    req.set_idempotency_key(key);
    auto* spec = req.mutable_spec();
    spec->add_command("/bin/true");
    spec->mutable_resources()->set_nodes(nodes);
    spec->mutable_resources()->set_gpus_per_node(gpus);
    spec->set_max_retries(retries);
    spec->mutable_time_limit()->set_seconds(time_limit_s);
    return SubmitRequest(req);
  }
  absl::StatusOr<v1::SubmitJobResponse> SubmitRequest(
      const v1::SubmitJobRequest& req) {
    return Sync<absl::StatusOr<v1::SubmitJobResponse>>([&](auto done) {
      controller_->Submit(scheduler::Submitter{user_, groups_, admin_}, req,
                          std::move(done));
    });
  }

  static v1::RankStatus Status(const std::string& job, int attempt, int rank,
                               v1::RankState state, int code = 0) {
    v1::RankStatus st;
    st.set_job_id(job);
    st.set_attempt(attempt);
    st.set_rank(rank);
    st.set_state(state);
    st.set_exit_code(code);
    return st;
  }
  void Report(const std::string& node, FakeConnection* conn, const std::string& job,
              int attempt, int rank, v1::RankState state, int code = 0,
              bool processes_remaining = false) {
    v1::AgentMessage msg;
    *msg.mutable_rank_status() = Status(job, attempt, rank, state, code);
    msg.mutable_rank_status()->set_processes_remaining(processes_remaining);
    controller_->AgentMessage(node, conn, msg);
  }
  // A heartbeat from the node.
  void Beat(const std::string& node, FakeConnection* conn) {
    v1::AgentMessage msg;
    msg.mutable_heartbeat()->set_seq(1);
    controller_->AgentMessage(node, conn, msg);
  }
  absl::Status CancelSync(const std::string& id) {
    v1::CancelJobRequest req;
    req.set_job_id(id);
    return Sync<absl::StatusOr<v1::Job>>([&](auto done) {
             controller_->Cancel("alice", req, std::move(done));
           }).status();
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
  // Who Submit() submits as, and the limits Open() gives the controller
  // (none unless a test sets them). An admin, as every caller is with auth
  // off, unless a test says otherwise.
  std::string user_ = "alice";
  std::vector<std::string> groups_;
  bool admin_ = true;
  state::SubmitLimits submit_limits_{/*max_pending=*/0, /*rate=*/0,
                                     /*burst=*/1};
  std::string dir_;
  RetentionPolicy retention_;
  int64_t max_output_bytes_per_job_ = int64_t{1} << 30;
  // Off: these tests step the clock without ticking.
  absl::Duration self_pause_ = absl::InfiniteDuration();
  // Changes the options Open() gives the controller.
  std::function<void(ControllerOptions*)> tweak_;
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<store::FaultyStore> faulty_;
  std::unique_ptr<Controller> controller_;
};

}  // namespace xl::control

#endif  // XL_TESTS_SERVER_CONTROLLER_FIXTURE_H_
