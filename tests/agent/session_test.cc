// Tests of the agent's session against a fake scheduler served by real gRPC
// on 127.0.0.1, and of the bounded outbox behind it.
#include "agent/session/session.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <signal.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/monotonic_wait.h"
#include "agent/session/lease.h"
#include "agent/session/outbox.h"
#include "agent/supervisor/supervisor.h"
#include "common/clock.h"
#include "common/duration.h"
#include "xl/v1/agent.grpc.pb.h"

namespace xl::agent {
namespace {

// The supervisor as a single-user development agent runs it: ranks as the
// test's own user (root in CI) and no cgroups.
SupervisorOptions AgentUserOptions() {
  SupervisorOptions options;
  options.shim_binary = XL_RANK_SHIM;
  options.run_as = RunAs::kAgent;
  options.allow_root_jobs = true;
  return options;
}

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(4);

// A scheduler's AgentService that acknowledges registrations and (unless
// told not to) log chunks and heartbeats, records every message, and lets
// the test send commands down the current stream. It grants a lease when
// given one, and refuses every Register when told to (as the scheduler does
// when another agent serves the node name).
class FakeScheduler final : public v1::AgentService::Service {
 public:
  using Stream =
      grpc::ServerReaderWriter<v1::SchedulerMessage, v1::AgentMessage>;

  grpc::Status Connect(grpc::ServerContext* context, Stream* stream) override {
    v1::AgentMessage message;
    if (!stream->Read(&message)) return grpc::Status::CANCELLED;
    {
      absl::MutexLock lock(&mu_);
      received_.push_back(message);
      if (!refusal_.empty()) {
        // The numbers change at every attempt, as the real scheduler's
        // "heard from ... ago" does.
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                            absl::StrCat(refusal_, " (heard from ",
                                         ++refusals_ * 7, "ms ago)"));
      }
    }
    v1::SchedulerMessage ack;
    bool log_acks = true;
    absl::Duration lease;
    {
      absl::MutexLock lock(&mu_);
      log_acks = log_acks_capability_;
      lease = lease_;
    }
    ack.mutable_register_ack()->set_node(message.register_().name());
    {
      absl::MutexLock lock(&mu_);
      ack.mutable_register_ack()->set_leader_term(term_);
    }
    ack.mutable_register_ack()->set_log_acks(log_acks);
    *ack.mutable_register_ack()->mutable_heartbeat_interval() =
        ToProtoDuration(absl::Milliseconds(50));
    if (lease > absl::ZeroDuration()) {
      *ack.mutable_register_ack()->mutable_lease() = ToProtoDuration(lease);
    }
    {
      absl::MutexLock lock(&mu_);
      stream->Write(ack);
      stream_ = stream;
      context_ = context;
    }
    while (stream->Read(&message)) {
      absl::MutexLock lock(&mu_);
      received_.push_back(message);
      if (message.has_log() && ack_logs_) {
        v1::SchedulerMessage log_ack;
        log_ack.mutable_log_ack()->set_seq(message.seq());
        stream->Write(log_ack);
      }
      if (message.has_heartbeat() && ack_heartbeats_) {
        v1::SchedulerMessage heartbeat_ack;
        heartbeat_ack.mutable_heartbeat_ack()->set_seq(
            message.heartbeat().seq());
        stream->Write(heartbeat_ack);
      }
    }
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
    context_ = nullptr;
    return grpc::Status::OK;
  }

  // Sends a message on the current stream; false when there is none.
  bool Send(const v1::SchedulerMessage& message) {
    absl::MutexLock lock(&mu_);
    return stream_ != nullptr && stream_->Write(message);
  }

  void set_ack_logs(bool ack) {
    absl::MutexLock lock(&mu_);
    ack_logs_ = ack;
  }
  // Whether RegisterAck says log_acks (false: a scheduler from before them).
  void set_log_acks_capability(bool on) {
    absl::MutexLock lock(&mu_);
    log_acks_capability_ = on;
  }

  // The lease RegisterAck grants; zero: none (a scheduler from before
  // leases).
  void set_lease(absl::Duration lease) {
    absl::MutexLock lock(&mu_);
    lease_ = lease;
  }
  // Whether heartbeats are acknowledged (false: the scheduler is stuck, or
  // its answers are lost, while the stream stays open).
  void set_ack_heartbeats(bool ack) {
    absl::MutexLock lock(&mu_);
    ack_heartbeats_ = ack;
  }

  // Answers every Register with ALREADY_EXISTS and `message` (plus a number
  // that changes); empty: accepts them again.
  void set_refusal(const std::string& message) {
    absl::MutexLock lock(&mu_);
    refusal_ = message;
  }

  // RegisterAck.leader_term of later registrations.
  void set_term(uint64_t term) {
    absl::MutexLock lock(&mu_);
    term_ = term;
  }

  // Breaks the current stream, as a scheduler restart would.
  void Break() {
    absl::MutexLock lock(&mu_);
    if (context_ != nullptr) context_->TryCancel();
  }

  template <typename Pred>
  bool WaitFor(Pred pred, absl::Duration timeout = kWait) {
    absl::MutexLock lock(&mu_);
    auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return pred(received_);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  }

  std::vector<v1::AgentMessage> received() {
    absl::MutexLock lock(&mu_);
    return received_;
  }

  int Count(v1::AgentMessage::MsgCase c) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& m : received_) n += m.msg_case() == c;
    return n;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::AgentMessage> received_ ABSL_GUARDED_BY(mu_);
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::ServerContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool ack_logs_ ABSL_GUARDED_BY(mu_) = true;
  bool log_acks_capability_ ABSL_GUARDED_BY(mu_) = true;
  bool ack_heartbeats_ ABSL_GUARDED_BY(mu_) = true;
  absl::Duration lease_ ABSL_GUARDED_BY(mu_);
  std::string refusal_ ABSL_GUARDED_BY(mu_);
  int refusals_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t term_ ABSL_GUARDED_BY(mu_) = 0;
};

// A replica of a replicated scheduler that does not lead: refuses every
// Connect UNAVAILABLE, naming `leader` (if any) in the xl-leader metadata.
class FakeFollower final : public v1::AgentService::Service {
 public:
  explicit FakeFollower(std::string leader) : leader_(std::move(leader)) {}
  grpc::Status Connect(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<v1::SchedulerMessage,
                                                v1::AgentMessage>*) override {
    calls_.fetch_add(1);
    context->AddTrailingMetadata("xl-term", "7");
    if (!leader_.empty()) context->AddTrailingMetadata("xl-leader", leader_);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "does not lead");
  }
  int calls() const { return calls_.load(); }

 private:
  const std::string leader_;
  std::atomic<int> calls_{0};
};

// A gRPC server around a FakeScheduler; `port` 0 picks a free port.
class Server {
 public:
  explicit Server(v1::AgentService::Service* service, int port = 0) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port),
                             grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  ~Server() { server_->Shutdown(std::chrono::system_clock::now()); }
  int port() const { return port_; }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

class FakeController : public RankController {
 public:
  void StartRanks(const v1::StartRanks& request) override {
    absl::MutexLock lock(&mu_);
    starts_.push_back(request);
  }
  void StopJob(const v1::StopJob& request) override {
    absl::MutexLock lock(&mu_);
    stops_.push_back(request);
  }
  void StopAllRanks(const std::string& reason) override {
    absl::MutexLock lock(&mu_);
    stop_all_reasons_.push_back(reason);
  }
  std::vector<v1::RankStatus> Snapshot() const override {
    absl::MutexLock lock(&mu_);
    return snapshot_;
  }
  void SetSnapshot(std::vector<v1::RankStatus> s) {
    absl::MutexLock lock(&mu_);
    snapshot_ = std::move(s);
  }
  absl::Duration Stalled() const override {
    absl::MutexLock lock(&mu_);
    return stalled_;
  }
  void SetStalled(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    stalled_ = d;
  }
  bool WaitCommands(size_t starts, size_t stops) {
    absl::MutexLock lock(&mu_);
    auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return starts_.size() >= starts && stops_.size() >= stops;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), kWait);
  }
  std::vector<v1::StartRanks> starts() {
    absl::MutexLock lock(&mu_);
    return starts_;
  }
  std::vector<v1::StopJob> stops() {
    absl::MutexLock lock(&mu_);
    return stops_;
  }
  void LogRoomFreed() override {
    absl::MutexLock lock(&mu_);
    ++room_freed_;
  }
  bool WaitRoomFreed() {
    absl::MutexLock lock(&mu_);
    auto cond = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return room_freed_ > 0;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), kWait);
  }
  int room_freed() {
    absl::MutexLock lock(&mu_);
    return room_freed_;
  }

 private:
  mutable absl::Mutex mu_;
  int room_freed_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::StartRanks> starts_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::StopJob> stops_ ABSL_GUARDED_BY(mu_);
  absl::Duration stalled_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::vector<v1::RankStatus> snapshot_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> stop_all_reasons_ ABSL_GUARDED_BY(mu_);
};

v1::RankStatus Status(const std::string& job, int rank, v1::RankState state) {
  v1::RankStatus s;
  s.set_job_id(job);
  s.set_attempt(1);
  s.set_rank(rank);
  s.set_state(state);
  return s;
}

v1::LogChunk Chunk(const std::string& job, const std::string& data) {
  v1::LogChunk c;
  c.set_job_id(job);
  c.set_attempt(1);
  c.set_stream(v1::STDOUT);
  c.set_data(data);
  return c;
}

SessionOptions Options(int port) {
  SessionOptions options;
  options.scheduler = absl::StrCat("127.0.0.1:", port);
  options.name = "node-a";
  options.inventory.set_hostname("node-a");
  options.inventory.set_cpus(16);
  options.agent_version = "test";
  options.max_backoff = absl::Milliseconds(200);
  return options;
}

// Waits (bounded) until the session has processed `n` RegisterAcks.
bool WaitRegistrations(const Session& session, int n) {
  const absl::Time deadline = absl::Now() + kWait;
  while (session.registrations() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  return session.registrations() >= n;
}

// Polls `pred` until it holds; false at the deadline. For state that has no
// wait of its own.
template <typename Pred>
bool WaitUntil(Pred pred, absl::Duration timeout = kWait) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  return pred();
}

// Register.instance_id of every Register among `ms`, in order.
std::vector<std::string> InstanceIds(const std::vector<v1::AgentMessage>& ms) {
  std::vector<std::string> ids;
  for (const auto& m : ms) {
    if (m.has_register_()) ids.push_back(m.register_().instance_id());
  }
  return ids;
}

// Counts messages of one kind among `ms`.
int CountOf(const std::vector<v1::AgentMessage>& ms,
            v1::AgentMessage::MsgCase c) {
  int n = 0;
  for (const auto& m : ms) n += m.msg_case() == c;
  return n;
}

TEST(SessionTest, RegistersWithInventoryAndSnapshotThenHeartbeats) {
  FakeScheduler scheduler;
  Server server(&scheduler);
  FakeController controller;
  controller.SetSnapshot({Status("j1", 0, v1::RANK_RUNNING)});
  Session session(Options(server.port()));
  session.Start(&controller);

  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kHeartbeat) >= 3;
  }));
  std::vector<v1::AgentMessage> ms = scheduler.received();
  ASSERT_TRUE(ms[0].has_register_());
  const v1::Register& reg = ms[0].register_();
  EXPECT_EQ(reg.name(), "node-a");
  EXPECT_EQ(reg.inventory().hostname(), "node-a");
  EXPECT_EQ(reg.inventory().cpus(), 16);
  EXPECT_EQ(reg.agent_version(), "test");
  EXPECT_TRUE(reg.shared_env());
  EXPECT_TRUE(reg.honours_lease());
  ASSERT_EQ(reg.ranks_size(), 1);
  EXPECT_EQ(reg.ranks(0).job_id(), "j1");
  // Heartbeats are numbered from 1 on each connection.
  std::vector<uint64_t> seqs;
  for (const auto& m : ms) {
    if (m.has_heartbeat()) seqs.push_back(m.heartbeat().seq());
  }
  EXPECT_EQ(std::vector<uint64_t>(seqs.begin(), seqs.begin() + 3),
            (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(session.connected());
  EXPECT_EQ(session.node(), "node-a");
  EXPECT_EQ(session.registrations(), 1);
}

// Heartbeats say how long the supervisor's loop has not come round, so the
// scheduler sees an agent stuck on its node although it still heartbeats.
TEST(SessionTest, HeartbeatsCarryHowLongTheSupervisorHasNotRun) {
  FakeScheduler scheduler;
  Server server(&scheduler);
  FakeController controller;
  controller.SetStalled(absl::Milliseconds(7250));
  Session session(Options(server.port()));
  session.Start(&controller);
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kHeartbeat) >= 2;
  }));
  for (const auto& m : scheduler.received()) {
    if (m.has_heartbeat()) {
      EXPECT_EQ(m.heartbeat().supervisor_stalled_ms(), 7250u);
    }
  }
  session.Shutdown();
}

TEST(SessionTest, PassesCommandsToTheControllerAndEventsToTheScheduler) {
  FakeScheduler scheduler;
  Server server(&scheduler);
  FakeController controller;
  Session session(Options(server.port()));
  session.Start(&controller);
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) { return !ms.empty(); }));
  // Wait until the stream is ready for the server's writes.
  WaitRegistrations(session, 1);

  v1::SchedulerMessage start;
  start.mutable_start_ranks()->set_job_id("j2");
  start.mutable_start_ranks()->add_argv("/bin/true");
  ASSERT_TRUE(scheduler.Send(start));
  v1::SchedulerMessage stop;
  stop.mutable_stop_job()->set_job_id("j2");
  stop.mutable_stop_job()->set_attempt(1);
  ASSERT_TRUE(scheduler.Send(stop));
  ASSERT_TRUE(controller.WaitCommands(1, 1));
  EXPECT_EQ(controller.starts()[0].job_id(), "j2");
  EXPECT_EQ(controller.stops()[0].attempt(), 1);

  session.OnRankStatus(Status("j2", 0, v1::RANK_RUNNING));
  session.OnLogChunk(Chunk("j2", "hello\n"));
  session.OnRankStatus(Status("j2", 0, v1::RANK_EXITED));
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kRankStatus) >= 2;
  }));
  std::vector<std::string> order;
  for (const auto& m : scheduler.received()) {
    if (m.has_rank_status()) {
      order.push_back(v1::RankState_Name(m.rank_status().state()));
    }
    if (m.has_log()) order.push_back(m.log().data());
  }
  EXPECT_EQ(order, (std::vector<std::string>{"RANK_RUNNING", "hello\n",
                                             "RANK_EXITED"}));
}

TEST(SessionTest, ReconnectsWithSnapshotAndBufferedLogsAfterSchedulerRestart) {
  FakeScheduler first;
  auto server = std::make_unique<Server>(&first);
  const int port = server->port();
  FakeController controller;
  Session session(Options(port));
  session.Start(&controller);
  ASSERT_TRUE(WaitRegistrations(session, 1));

  // The scheduler goes away; meanwhile a rank ends and writes output.
  server.reset();
  controller.SetSnapshot({Status("j3", 0, v1::RANK_EXITED)});
  session.OnRankStatus(Status("j3", 0, v1::RANK_EXITED));
  session.OnLogChunk(Chunk("j3", "while away\n"));

  FakeScheduler second;
  server = std::make_unique<Server>(&second, port);
  ASSERT_EQ(server->port(), port);
  ASSERT_TRUE(second.WaitFor(
      [](const auto& ms) { return CountOf(ms, v1::AgentMessage::kLog) >= 1; }));
  std::vector<v1::AgentMessage> ms = second.received();
  ASSERT_TRUE(ms[0].has_register_());
  ASSERT_EQ(ms[0].register_().ranks_size(), 1);
  EXPECT_EQ(ms[0].register_().ranks(0).state(), v1::RANK_EXITED);
  // The snapshot carried the status; it is not sent a second time.
  EXPECT_EQ(CountOf(ms, v1::AgentMessage::kRankStatus), 0);
  for (const auto& m : ms) {
    if (m.has_log()) EXPECT_EQ(m.log().data(), "while away\n");
  }
  EXPECT_EQ(session.registrations(), 2);
}

// A chunk written on a stream that died before the scheduler stored (and
// acknowledged) it is sent again, same end_offset, on the next connection;
// once acknowledged it is not sent a third time.
TEST(SessionTest, UnacknowledgedLogsAreSentAgainOnTheNextConnection) {
  FakeScheduler first;
  first.set_ack_logs(false);
  auto server = std::make_unique<Server>(&first);
  const int port = server->port();
  FakeController controller;
  Session session(Options(port));
  session.Start(&controller);
  ASSERT_TRUE(first.WaitFor([](const auto& ms) { return !ms.empty(); }));
  v1::LogChunk chunk = Chunk("j4", "not yet stored\n");
  chunk.set_end_offset(4096);
  session.OnLogChunk(chunk);
  ASSERT_TRUE(first.WaitFor(
      [](const auto& ms) { return CountOf(ms, v1::AgentMessage::kLog) >= 1; }));
  server.reset();

  FakeScheduler second;
  server = std::make_unique<Server>(&second, port);
  ASSERT_TRUE(second.WaitFor(
      [](const auto& ms) { return CountOf(ms, v1::AgentMessage::kLog) >= 1; }));
  for (const auto& m : second.received()) {
    if (!m.has_log()) continue;
    EXPECT_EQ(m.log().data(), "not yet stored\n");
    EXPECT_EQ(m.log().end_offset(), 4096);
  }
  // Acknowledged there: a new stream carries a Register and heartbeats only.
  ASSERT_TRUE(second.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kHeartbeat) >= 2;
  }));
  second.Break();
  ASSERT_TRUE(second.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kRegister) >= 2 &&
           CountOf(ms, v1::AgentMessage::kHeartbeat) >= 6;
  }));
  EXPECT_EQ(second.Count(v1::AgentMessage::kLog), 1);
}

// A scheduler that stores nothing (never acknowledges) holds the agent to
// about its buffer bound of output in flight; heartbeats go on.
TEST(SessionTest, UnacknowledgedOutputIsBounded) {
  FakeScheduler scheduler;
  scheduler.set_ack_logs(false);
  Server server(&scheduler);
  FakeController controller;
  SessionOptions options = Options(server.port());
  options.max_buffered_log_bytes = 1000;
  Session session(options);
  session.Start(&controller);
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) { return !ms.empty(); }));
  for (int i = 0; i < 50; ++i) {
    session.OnLogChunk(Chunk("j6", std::string(100, 'x')));
  }
  const int before = scheduler.Count(v1::AgentMessage::kHeartbeat);
  ASSERT_TRUE(scheduler.WaitFor([before](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kHeartbeat) >= before + 4;
  }));
  // Sending stops once more than 1000 bytes wait for acknowledgement: the
  // chunk (or "dropped" marker, ~150 bytes) that crossed the bound is the
  // last one.
  size_t bytes = 0;
  for (const auto& m : scheduler.received()) {
    if (m.has_log()) bytes += m.log().data().size();
  }
  EXPECT_GT(bytes, 1000u);
  EXPECT_LT(bytes, 1000u + 200u);
}

// The session says how much output it takes now (none below half of a
// small buffer), and tells the supervisor once its queue has drained to
// half, so that output waits in the spools on disk instead of being
// dropped from the queue.
TEST(SessionTest, LogRoomShrinksAsTheQueueFillsAndItsDrainIsTold) {
  FakeScheduler scheduler;
  scheduler.set_ack_logs(false);
  Server server(&scheduler);
  FakeController controller;
  SessionOptions options = Options(server.port());
  options.max_buffered_log_bytes = 1000;
  Session session(options);
  EXPECT_EQ(session.LogRoom(), 1000u);
  session.Start(&controller);
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) { return !ms.empty(); }));
  WaitRegistrations(session, 1);
  // Unacknowledged, ~1000 bytes go out; the rest stays queued.
  for (int i = 0; i < 11; ++i) {
    session.OnLogChunk(Chunk("room", std::string(100, 'x')));
  }
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kLog) >= 10;
  }));
  for (int i = 0; i < 6; ++i) {
    session.OnLogChunk(Chunk("room", std::string(100, 'y')));
  }
  EXPECT_EQ(session.LogRoom(), 0u) << "600 of 1000 queued: under half left";
  EXPECT_EQ(controller.room_freed(), 0);
  // The scheduler stores again: the queue drains and the supervisor hears.
  scheduler.set_ack_logs(true);
  scheduler.Break();
  ASSERT_TRUE(controller.WaitRoomFreed());
  const absl::Time deadline = absl::Now() + kWait;
  while (session.LogRoom() != 1000u && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(session.LogRoom(), 1000u) << "the queue never drained";
}

// A scheduler from before LogAck: chunks go unnumbered and are not sent
// again after a reconnect.
TEST(SessionTest, SchedulerWithoutLogAcksGetsEachChunkOnce) {
  FakeScheduler scheduler;
  scheduler.set_log_acks_capability(false);
  scheduler.set_ack_logs(false);
  Server server(&scheduler);
  FakeController controller;
  Session session(Options(server.port()));
  session.Start(&controller);
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) { return !ms.empty(); }));
  session.OnLogChunk(Chunk("j7", "once\n"));
  ASSERT_TRUE(scheduler.WaitFor(
      [](const auto& ms) { return CountOf(ms, v1::AgentMessage::kLog) >= 1; }));
  scheduler.Break();
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kRegister) >= 2 &&
           CountOf(ms, v1::AgentMessage::kHeartbeat) >= 4;
  }));
  EXPECT_EQ(scheduler.Count(v1::AgentMessage::kLog), 1);
  for (const auto& m : scheduler.received()) {
    if (m.has_log()) EXPECT_EQ(m.seq(), 0u);
  }
}

TEST(SessionTest, ReconnectsAfterTheStreamBreaks) {
  FakeScheduler scheduler;
  Server server(&scheduler);
  FakeController controller;
  Session session(Options(server.port()));
  session.Start(&controller);
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) { return !ms.empty(); }));
  WaitRegistrations(session, 1);
  scheduler.Break();
  EXPECT_TRUE(scheduler.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kRegister) >= 2;
  }));
}

// One agent process, one instance id: the same on every reconnect of a
// Session, another for another Session (another agent process).
TEST(SessionTest, InstanceIdIsOnePerSessionAndKeptAcrossReconnects) {
  FakeScheduler scheduler;
  Server server(&scheduler);
  FakeController controller;
  std::string first_id;
  {
    Session session(Options(server.port()));
    session.Start(&controller);
    ASSERT_TRUE(WaitRegistrations(session, 1));
    scheduler.Break();
    ASSERT_TRUE(WaitRegistrations(session, 2));
    scheduler.Break();
    ASSERT_TRUE(WaitRegistrations(session, 3));
    std::vector<std::string> ids = InstanceIds(scheduler.received());
    ASSERT_EQ(ids.size(), 3u);
    first_id = ids[0];
    EXPECT_THAT(first_id, ::testing::MatchesRegex("[0-9a-f]{32}"));
    EXPECT_EQ(ids[1], first_id);
    EXPECT_EQ(ids[2], first_id);
    EXPECT_EQ(session.instance_id(), first_id);
  }
  Session second(Options(server.port()));
  second.Start(&controller);
  ASSERT_TRUE(WaitRegistrations(second, 1));
  std::vector<std::string> ids = InstanceIds(scheduler.received());
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_THAT(ids[3], ::testing::MatchesRegex("[0-9a-f]{32}"));
  EXPECT_NE(ids[3], first_id);
}

// The scheduler refuses the name (another agent serves it): the agent says
// so once, not at every retry, and keeps retrying until the other goes.
TEST(SessionTest, RefusedNameIsLoggedOnceAndRetriedUntilFree) {
  FakeScheduler scheduler;
  const std::string refusal =
      "register.name: node node-a is already served by another xl-agent";
  scheduler.set_refusal(refusal);
  Server server(&scheduler);
  FakeController controller;
  SessionOptions options = Options(server.port());
  options.initial_backoff = absl::Milliseconds(5);
  options.max_backoff = absl::Milliseconds(20);
  ::testing::internal::CaptureStderr();
  std::string log;
  {
    Session session(options);
    session.Start(&controller);
    const bool refused_often = scheduler.WaitFor([](const auto& ms) {
      return CountOf(ms, v1::AgentMessage::kRegister) >= 5;
    });
    EXPECT_EQ(session.registrations(), 0);
    scheduler.set_refusal("");  // The other agent went away.
    const bool registered = WaitRegistrations(session, 1);
    session.Shutdown(absl::ZeroDuration());
    log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(refused_often);
    ASSERT_TRUE(registered);
  }
  // The message, word for word, with who refused and this agent's id.
  size_t first = log.find(refusal);
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find(refusal, first + 1), std::string::npos)
      << "logged more than once:\n"
      << log;
  EXPECT_THAT(log, HasSubstr("refuses this agent (instance "));
  EXPECT_THAT(log, HasSubstr("in case the other agent goes away"));
  // Not mistaken for an unreachable scheduler.
  EXPECT_THAT(log, ::testing::Not(HasSubstr("cannot reach")));
}

TEST(SessionTest, RetriesUntilTheSchedulerAppears) {
  int port;
  {
    FakeScheduler unused;
    Server probe(&unused);
    port = probe.port();
  }
  FakeController controller;
  Session session(Options(port));
  session.Start(&controller);
  absl::SleepFor(absl::Milliseconds(300));  // A few failed attempts.
  EXPECT_FALSE(session.connected());
  FakeScheduler scheduler;
  Server server(&scheduler, port);
  EXPECT_TRUE(scheduler.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kRegister) >= 1;
  }));
}

TEST(SessionTest, ShutdownSendsWhatIsQueued) {
  FakeScheduler scheduler;
  Server server(&scheduler);
  FakeController controller;
  Session session(Options(server.port()));
  session.Start(&controller);
  WaitRegistrations(session, 1);
  session.OnRankStatus(Status("j4", 0, v1::RANK_EXITED));
  session.Shutdown(absl::Seconds(1));
  EXPECT_TRUE(scheduler.WaitFor([](const auto& ms) {
    return CountOf(ms, v1::AgentMessage::kRankStatus) == 1;
  }));
}

// A directory of the test's own: what an earlier run left there (a rank
// state directory) would be adopted.
std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return dir;
}

// The agent's pieces together: the scheduler's StartRanks runs a real rank
// through the Supervisor; its status and output come back up the stream.
TEST(SessionTest, RunsARankEndToEnd) {
  FakeScheduler scheduler;
  Server server(&scheduler);
  std::string dir = FreshDir("xl-session-e2e");
  Session session(Options(server.port()));
  SupervisorOptions supervisor_options = AgentUserOptions();
  supervisor_options.work_dir = dir;
  supervisor_options.scratch_dir = dir + "/scratch";
  Supervisor supervisor(supervisor_options, &session);
  ASSERT_TRUE(supervisor.Start().ok());
  session.Start(&supervisor);
  WaitRegistrations(session, 1);
  v1::SchedulerMessage start;
  v1::StartRanks* s = start.mutable_start_ranks();
  s->set_job_id("e2e");
  s->set_attempt(1);
  for (const char* a : {"/bin/sh", "-c", "sleep 0.2; echo hi from $RANK; exit 4"}) {
    s->add_argv(a);
  }
  v1::RankLaunch* launch = s->add_ranks();
  launch->set_rank(7);
  (*launch->mutable_env())["RANK"] = "7";
  ASSERT_TRUE(scheduler.Send(start));

  auto ended = [](const std::vector<v1::AgentMessage>& ms) {
    for (const auto& m : ms) {
      if (m.has_rank_status() && m.rank_status().state() == v1::RANK_EXITED) {
        return true;
      }
    }
    return false;
  };
  ASSERT_TRUE(scheduler.WaitFor(ended));
  std::vector<std::string> seen;
  for (const auto& m : scheduler.received()) {
    if (m.has_rank_status()) {
      seen.push_back(absl::StrCat(v1::RankState_Name(m.rank_status().state()),
                                  " rank ", m.rank_status().rank(), " code ",
                                  m.rank_status().exit_code()));
    } else if (m.has_log()) {
      seen.push_back(m.log().data());
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"RANK_RUNNING rank 7 code 0",
                                            "hi from 7\n",
                                            "RANK_EXITED rank 7 code 4"}));
  EXPECT_TRUE(supervisor.StopAll(absl::Seconds(1)).ok());
  session.Shutdown();
}

// A session and a real supervisor wired together. The session is shut down
// before the supervisor goes: its threads call into the supervisor.
struct Agent {
  Agent(int port, const std::string& dir)
      : session(Options(port)), supervisor(SupervisorFor(dir), &session) {
    EXPECT_TRUE(supervisor.Start().ok());
    session.Start(&supervisor);
  }
  ~Agent() { session.Shutdown(absl::ZeroDuration()); }

  static SupervisorOptions SupervisorFor(const std::string& dir) {
    SupervisorOptions options = AgentUserOptions();
    options.work_dir = dir;
    options.scratch_dir = dir + "/scratch";
    return options;
  }

  Session session;
  Supervisor supervisor;
};

constexpr absl::Duration kLease = absl::Seconds(1);
constexpr absl::Duration kGrace = absl::Milliseconds(300);

v1::SchedulerMessage StartSleep(const std::string& job) {
  v1::SchedulerMessage message;
  v1::StartRanks* start = message.mutable_start_ranks();
  start->set_job_id(job);
  start->set_attempt(1);
  start->add_argv("/bin/sleep");
  start->add_argv("60");
  *start->mutable_grace_period() = ToProtoDuration(kGrace);
  start->add_ranks()->set_rank(0);
  return message;
}

// The pid of `job`'s rank 0 once a RANK_RUNNING status says it; 0 before.
int RunningPid(const std::vector<v1::AgentMessage>& ms,
               const std::string& job) {
  for (const auto& m : ms) {
    if (m.has_rank_status() && m.rank_status().job_id() == job &&
        m.rank_status().state() == v1::RANK_RUNNING) {
      return m.rank_status().pid();
    }
  }
  return 0;
}

// What the latest Register after the first reports of `job`'s rank 0; state
// UNSPECIFIED when none reports it.
v1::RankStatus LaterRegisterReport(const std::vector<v1::AgentMessage>& ms,
                                   const std::string& job) {
  v1::RankStatus found;
  int registers = 0;
  for (const auto& m : ms) {
    if (!m.has_register_() || ++registers == 1) continue;
    for (const v1::RankStatus& r : m.register_().ranks()) {
      if (r.job_id() == job) found = r;
    }
  }
  return found;
}

bool GroupGone(int pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

// Polls until the process group is gone; false at the deadline.
bool WaitGroupGone(int pgid, absl::Time deadline) {
  while (absl::Now() < deadline) {
    if (GroupGone(pgid)) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return GroupGone(pgid);
}

// Heartbeats received after the last Register: the current connection has
// carried (and, when acknowledging, renewed the lease with) this many.
int HeartbeatsSinceLastRegister(const std::vector<v1::AgentMessage>& ms) {
  int n = 0;
  for (const auto& m : ms) {
    if (m.has_register_()) n = 0;
    if (m.has_heartbeat()) ++n;
  }
  return n;
}

// The scheduler keeps the stream open but stops acknowledging heartbeats:
// past the lease the agent stops the rank itself, registers again and
// reports the exit; a rank started on the new connection, whose heartbeats
// are acknowledged again, runs on past the lease.
TEST(SessionLeaseTest, UnacknowledgedHeartbeatsStopTheRanksAtTheLease) {
  FakeScheduler scheduler;
  scheduler.set_lease(kLease);
  scheduler.set_ack_heartbeats(false);
  Server server(&scheduler);
  Agent agent(server.port(), FreshDir("xl-session-lease"));
  ASSERT_TRUE(WaitRegistrations(agent.session, 1));
  const absl::Time registered = absl::Now();
  ASSERT_TRUE(scheduler.Send(StartSleep("leased")));
  int pid = 0;
  ASSERT_TRUE(scheduler.WaitFor(
      [&pid](const auto& ms) { return (pid = RunningPid(ms, "leased")) > 0; }));
  EXPECT_EQ(agent.session.lease_expirations(), 0);

  ASSERT_TRUE(WaitGroupGone(pid, registered + kLease + kGrace + kWait / 4));
  EXPECT_GE(absl::Now() - registered, kLease - absl::Milliseconds(100));
  EXPECT_GE(agent.session.lease_expirations(), 1);
  ASSERT_TRUE(scheduler.WaitFor([](const auto& ms) {
    return LaterRegisterReport(ms, "leased").state() == v1::RANK_EXITED;
  }));
  EXPECT_EQ(LaterRegisterReport(scheduler.received(), "leased").signal(),
            SIGTERM);

  // Acknowledged again: a start on a connection past the expiry runs, and
  // keeps running past the lease.
  scheduler.set_ack_heartbeats(true);
  ASSERT_TRUE(scheduler.WaitFor(
      [](const auto& ms) { return HeartbeatsSinceLastRegister(ms) >= 5; }));
  const int expirations = agent.session.lease_expirations();
  ASSERT_TRUE(scheduler.Send(StartSleep("after")));
  int after = 0;
  ASSERT_TRUE(scheduler.WaitFor([&after](const auto& ms) {
    return (after = RunningPid(ms, "after")) > 0;
  }));
  absl::SleepFor(kLease * 1.5);  // Nothing to wait for: nothing may happen.
  EXPECT_FALSE(GroupGone(after));
  EXPECT_EQ(agent.session.lease_expirations(), expirations);
  EXPECT_TRUE(agent.supervisor.StopAll(absl::Seconds(1)).ok());
}

TEST(SessionLeaseTest, AcknowledgedHeartbeatsKeepRanksRunningPastTheLease) {
  FakeScheduler scheduler;
  scheduler.set_lease(kLease);
  Server server(&scheduler);
  Agent agent(server.port(), FreshDir("xl-session-renewed"));
  ASSERT_TRUE(WaitRegistrations(agent.session, 1));
  ASSERT_TRUE(scheduler.Send(StartSleep("renewed")));
  int pid = 0;
  ASSERT_TRUE(scheduler.WaitFor([&pid](const auto& ms) {
    return (pid = RunningPid(ms, "renewed")) > 0;
  }));
  absl::SleepFor(kLease * 2.5);
  EXPECT_FALSE(GroupGone(pid));
  EXPECT_EQ(agent.session.lease_expirations(), 0);
  EXPECT_EQ(agent.session.registrations(), 1);
  EXPECT_TRUE(agent.supervisor.StopAll(absl::Seconds(1)).ok());
}

// A scheduler from before leases (no lease in RegisterAck, no HeartbeatAck):
// nothing ever expires.
TEST(SessionLeaseTest, NoLeaseNeverExpires) {
  FakeScheduler scheduler;
  scheduler.set_ack_heartbeats(false);
  Server server(&scheduler);
  Agent agent(server.port(), FreshDir("xl-session-nolease"));
  ASSERT_TRUE(WaitRegistrations(agent.session, 1));
  ASSERT_TRUE(scheduler.Send(StartSleep("unleased")));
  int pid = 0;
  ASSERT_TRUE(scheduler.WaitFor([&pid](const auto& ms) {
    return (pid = RunningPid(ms, "unleased")) > 0;
  }));
  absl::SleepFor(kLease * 2);
  EXPECT_FALSE(GroupGone(pid));
  EXPECT_EQ(agent.session.lease_expirations(), 0);
  EXPECT_EQ(agent.session.registrations(), 1);
  EXPECT_TRUE(agent.supervisor.StopAll(absl::Seconds(1)).ok());
}

// The scheduler goes away altogether: the lease runs out while the agent
// retries with backoff, the rank is stopped then, and the Register that
// finally gets through reports its end.
TEST(SessionLeaseTest, LeaseExpiresWhileReconnecting) {
  FakeScheduler back;  // Outlives both servers.
  auto scheduler = std::make_unique<FakeScheduler>();
  scheduler->set_lease(kLease);
  auto server = std::make_unique<Server>(scheduler.get());
  const int port = server->port();
  Agent agent(port, FreshDir("xl-session-away"));
  ASSERT_TRUE(WaitRegistrations(agent.session, 1));
  ASSERT_TRUE(scheduler->Send(StartSleep("away")));
  int pid = 0;
  ASSERT_TRUE(scheduler->WaitFor(
      [&pid](const auto& ms) { return (pid = RunningPid(ms, "away")) > 0; }));
  const absl::Time gone = absl::Now();
  server.reset();
  ASSERT_TRUE(WaitGroupGone(pid, gone + kLease + kGrace + kWait / 4));
  EXPECT_EQ(agent.session.lease_expirations(), 1);

  server = std::make_unique<Server>(&back, port);
  ASSERT_TRUE(back.WaitFor(
      [](const auto& ms) { return !ms.empty() && ms[0].has_register_(); }));
  const v1::Register reg = back.received()[0].register_();
  ASSERT_EQ(reg.ranks_size(), 1);
  EXPECT_EQ(reg.ranks(0).state(), v1::RANK_EXITED);
  EXPECT_EQ(reg.ranks(0).signal(), SIGTERM);
}

// A wall-clock step moves no heartbeat: on a fake clock that stands still
// none is due, whichever way the wall clock steps; each Advance() by the
// interval brings one.
TEST(SessionClockTest, WallStepsNeitherStallNorHurryHeartbeats) {
  FakeScheduler scheduler;  // Asks for a heartbeat every 50 ms.
  Server server(&scheduler);
  FakeController controller;
  FakeClock clock;
  SessionOptions options = Options(server.port());
  options.clock = &clock;
  Session session(options);
  session.Start(&controller);
  auto heartbeats = [](int n) {
    return [n](const std::vector<v1::AgentMessage>& ms) {
      return CountOf(ms, v1::AgentMessage::kHeartbeat) >= n;
    };
  };
  // The first goes at once after the RegisterAck.
  ASSERT_TRUE(scheduler.WaitFor(heartbeats(1)));
  // Time stands still (the real clock runs): nothing is due.
  EXPECT_FALSE(scheduler.WaitFor(heartbeats(2), absl::Milliseconds(200)));
  clock.StepWall(absl::Hours(1));
  EXPECT_FALSE(scheduler.WaitFor(heartbeats(2), absl::Milliseconds(200)));
  clock.Advance(absl::Milliseconds(50));
  EXPECT_TRUE(scheduler.WaitFor(heartbeats(2)));
  clock.StepWall(-absl::Hours(2));
  clock.Advance(absl::Milliseconds(50));
  EXPECT_TRUE(scheduler.WaitFor(heartbeats(3)));
  EXPECT_FALSE(scheduler.WaitFor(heartbeats(4), absl::Milliseconds(100)));
}

// The lease is measured on the monotonic clock: a step forward does not end
// it early, a step back does not make it last longer.
TEST(SessionClockTest, WallStepsNeitherShortenNorLengthenTheLease) {
  FakeScheduler scheduler;
  scheduler.set_lease(absl::Seconds(10));
  scheduler.set_ack_heartbeats(false);  // Only the Register renews it.
  Server server(&scheduler);
  FakeController controller;
  FakeClock clock;
  SessionOptions options = Options(server.port());
  options.clock = &clock;
  Session session(options);
  session.Start(&controller);
  ASSERT_TRUE(WaitRegistrations(session, 1));
  auto expired = [&session] { return session.lease_expirations() > 0; };

  clock.StepWall(absl::Hours(1));
  EXPECT_FALSE(WaitUntil(expired, absl::Milliseconds(200)));
  clock.StepWall(-absl::Hours(2));
  clock.Advance(absl::Seconds(10) - absl::Milliseconds(1));
  EXPECT_FALSE(WaitUntil(expired, absl::Milliseconds(200)));
  clock.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(WaitUntil(expired));
  EXPECT_EQ(session.lease_expirations(), 1);
}

// The waits behind both: Abseil's timed waits end at an absolute wall time,
// which a step back makes late (here: an hour away); a tick ends the wait
// anyway and the deadline is read again on the monotonic clock.
TEST(MonotonicWaitTest, ATickEndsAWaitWhoseDeadlinePassedOnTheClock) {
  FakeClock clock;
  absl::Mutex mu;
  uint64_t ticks = 0;
  bool ready = false;
  int evaluations = 0;
  auto is_ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ++evaluations;
    return ready;
  };
  bool returned = false;
  bool result = true;
  const absl::Time deadline = clock.MonotonicNow() + absl::Hours(1);
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result =
        AwaitUntil(&mu, absl::Condition(&is_ready), &ticks, clock, deadline);
    returned = true;
  });
  // Once the waiter has looked at its condition and let go of the lock, it
  // waits inside Abseil for an hour of real time.
  auto waiting = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return evaluations > 0;
  };
  mu.LockWhen(absl::Condition(&waiting));
  clock.Advance(absl::Hours(1));
  ++ticks;
  const bool in_time =
      mu.AwaitWithTimeout(absl::Condition(&returned), absl::Seconds(2));
  if (!in_time) ready = true;  // Frees the waiter, so that the test ends.
  mu.Await(absl::Condition(&returned));
  mu.Unlock();
  waiter.join();
  EXPECT_TRUE(in_time) << "the wait outlived its deadline";
  EXPECT_FALSE(result);
}

TEST(MonotonicWaitTest, ReturnsOnceTheConditionHolds) {
  FakeClock clock;
  absl::Mutex mu;
  uint64_t ticks = 0;
  bool ready = false;
  std::thread setter([&] {
    absl::MutexLock lock(&mu);
    ready = true;
  });
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(AwaitUntil(&mu, absl::Condition(&ready), &ticks, clock,
                         clock.MonotonicNow() + absl::Hours(1)));
  mu.Unlock();
  setter.join();
  mu.Lock();
}

TEST(RelativeSleeperTest, SleepsForTheDurationAndEndsWhenCancelled) {
  RelativeSleeper sleeper;
  const absl::Time start = absl::Now();
  EXPECT_TRUE(sleeper.SleepFor(absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  bool slept = true;
  std::thread sleeping([&] { slept = sleeper.SleepFor(absl::Hours(1)); });
  // Lets the sleep begin, so that Cancel() has one to end (the test passes
  // either way; it only shows something when it has).
  absl::SleepFor(absl::Milliseconds(20));
  sleeper.Cancel();
  sleeping.join();  // Hangs for an hour (the test times out) if broken.
  EXPECT_FALSE(slept);
  EXPECT_FALSE(sleeper.SleepFor(absl::Milliseconds(1)));
}

TEST(LeaseTest, NoneUntilGrantedAndNoneWhenGrantedZero) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(5);
  Lease lease;
  EXPECT_FALSE(lease.held());
  EXPECT_FALSE(lease.ExpiredAt(t0 + absl::Hours(100)));
  lease.Grant(t0, absl::ZeroDuration());
  EXPECT_FALSE(lease.held());
  lease.HeartbeatSent(1, t0);
  EXPECT_FALSE(lease.HeartbeatAcked(1));
  EXPECT_FALSE(lease.ExpiredAt(t0 + absl::Hours(100)));
}

TEST(LeaseTest, RenewedFromTheSendTimeOfTheAcknowledgedHeartbeat) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(5);
  Lease lease;
  lease.Grant(t0, absl::Seconds(10));
  EXPECT_EQ(lease.valid_until(), t0 + absl::Seconds(10));
  EXPECT_FALSE(lease.ExpiredAt(t0 + absl::Seconds(10) - absl::Nanoseconds(1)));
  EXPECT_TRUE(lease.ExpiredAt(t0 + absl::Seconds(10)));

  lease.HeartbeatSent(1, t0 + absl::Seconds(1));
  lease.HeartbeatSent(2, t0 + absl::Seconds(2));
  lease.HeartbeatSent(3, t0 + absl::Seconds(3));
  // Not the time the acknowledgement arrives: the send time.
  EXPECT_TRUE(lease.HeartbeatAcked(2));
  EXPECT_EQ(lease.valid_until(), t0 + absl::Seconds(12));
  EXPECT_EQ(lease.renewed_from(), t0 + absl::Seconds(2));
  // An earlier heartbeat's late acknowledgement does not move it back.
  EXPECT_FALSE(lease.HeartbeatAcked(1));
  EXPECT_FALSE(lease.HeartbeatAcked(7));  // Never sent.
  EXPECT_EQ(lease.valid_until(), t0 + absl::Seconds(12));
  EXPECT_TRUE(lease.HeartbeatAcked(3));
  EXPECT_EQ(lease.valid_until(), t0 + absl::Seconds(13));
}

TEST(LeaseTest, RunsOnAcrossConnectionsAndEndsWhenReleased) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(5);
  Lease lease;
  lease.Grant(t0, absl::Seconds(10));
  lease.HeartbeatSent(1, t0 + absl::Seconds(4));
  lease.NewConnection();
  // Seq 1 of the new connection is another heartbeat than the one sent.
  EXPECT_FALSE(lease.HeartbeatAcked(1));
  EXPECT_TRUE(lease.held());
  EXPECT_TRUE(lease.ExpiredAt(t0 + absl::Seconds(10)));
  lease.Grant(t0 + absl::Seconds(9), absl::Seconds(10));
  EXPECT_EQ(lease.valid_until(), t0 + absl::Seconds(19));
  lease.Release();
  EXPECT_FALSE(lease.held());
  EXPECT_FALSE(lease.ExpiredAt(t0 + absl::Hours(100)));
}

TEST(OutboxTest, DropsTheOldestLogsPastTheBoundAndSaysSo) {
  Outbox outbox(10);
  outbox.PushLog(Chunk("j", "aaaa"));
  outbox.PushStatus(Status("j", 0, v1::RANK_EXITED));
  EXPECT_FALSE(outbox.PushLog(Chunk("j", "bbbb")));
  EXPECT_TRUE(outbox.PushLog(Chunk("j", "cccc")));  // 12 > 10: "aaaa" goes.
  EXPECT_EQ(outbox.log_bytes(), 8u);
  EXPECT_EQ(outbox.dropped_bytes_total(), 4u);

  v1::AgentMessage m;
  ASSERT_TRUE(outbox.Pop(&m));
  ASSERT_TRUE(m.has_log());
  EXPECT_THAT(m.log().data(), HasSubstr("4 bytes"));
  EXPECT_EQ(m.log().job_id(), "j");
  ASSERT_TRUE(outbox.Pop(&m));
  EXPECT_TRUE(m.has_rank_status());  // Statuses are never dropped.
  ASSERT_TRUE(outbox.Pop(&m));
  EXPECT_EQ(m.log().data(), "bbbb");
  ASSERT_TRUE(outbox.Pop(&m));
  EXPECT_EQ(m.log().data(), "cccc");
  EXPECT_FALSE(outbox.Pop(&m));
  EXPECT_TRUE(outbox.empty());
  EXPECT_EQ(outbox.log_bytes(), 0u);
}

// Metrics queued while the scheduler is away are bounded: past the bound
// the oldest points go, the newest stay, statuses and logs are untouched.
TEST(OutboxTest, KeepsTheNewestMetricsPastTheBound) {
  Outbox outbox(1 << 20, /*max_metrics=*/4);
  v1::RankStatus status;
  status.set_job_id("j");
  outbox.PushStatus(status);
  for (int step = 1; step <= 10; ++step) {
    v1::TrainMetrics m;
    m.set_step(step);
    outbox.PushMetrics(m);
  }
  EXPECT_EQ(outbox.dropped_metrics_total(), 6u);
  std::vector<int64_t> steps;
  int statuses = 0;
  v1::AgentMessage message;
  while (outbox.Pop(&message)) {
    if (message.has_metrics()) steps.push_back(message.metrics().step());
    statuses += message.has_rank_status();
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{7, 8, 9, 10}));
  EXPECT_EQ(statuses, 1);
  // Popped and put back counts as queued again.
  v1::TrainMetrics m;
  m.set_step(11);
  outbox.PushMetrics(m);
  ASSERT_TRUE(outbox.Pop(&message));
  outbox.PushFront(message);
  for (int step = 12; step <= 15; ++step) {
    m.set_step(step);
    outbox.PushMetrics(m);
  }
  EXPECT_EQ(outbox.dropped_metrics_total(), 7u);
}

TEST(OutboxTest, DropStatusesKeepsLogsAndPushFrontRequeues) {
  Outbox outbox(1 << 20);
  outbox.PushStatus(Status("j", 0, v1::RANK_RUNNING));
  outbox.PushLog(Chunk("j", "x"));
  outbox.PushStatus(Status("j", 0, v1::RANK_EXITED));
  outbox.DropStatuses();
  v1::AgentMessage m;
  ASSERT_TRUE(outbox.Pop(&m));
  EXPECT_EQ(m.log().data(), "x");
  EXPECT_FALSE(outbox.Pop(&m));
  v1::AgentMessage back;
  *back.mutable_log() = Chunk("j", "y");
  outbox.PushFront(back);
  EXPECT_EQ(outbox.log_bytes(), 1u);
  ASSERT_TRUE(outbox.Pop(&m));
  EXPECT_EQ(m.log().data(), "y");
}

}  // namespace
}  // namespace xl::agent

namespace xl::agent {
namespace {

// Fencing: once a leader of term 5 was seen, commands and registrations of
// an older term (a deposed leader's) are refused; a newer leader is taken.
TEST(SessionFencingTest, CommandsAndAcksOfAnOlderLeaderTermAreRefused) {
  FakeScheduler scheduler;
  scheduler.set_term(5);
  Server server(&scheduler);
  FakeController controller;
  Session session(Options(server.port()));
  session.Start(&controller);
  ASSERT_TRUE(WaitRegistrations(session, 1));
  EXPECT_EQ(session.newest_term(), 5u);

  auto start = [](const std::string& job, uint64_t term) {
    v1::SchedulerMessage m;
    m.mutable_start_ranks()->set_job_id(job);
    m.mutable_start_ranks()->add_argv("/bin/true");
    m.mutable_start_ranks()->set_leader_term(term);
    return m;
  };
  v1::SchedulerMessage stale_stop;
  stale_stop.mutable_stop_job()->set_job_id("current");
  stale_stop.mutable_stop_job()->set_leader_term(4);
  ASSERT_TRUE(scheduler.Send(start("deposed", 4)));
  ASSERT_TRUE(scheduler.Send(stale_stop));
  ASSERT_TRUE(scheduler.Send(start("current", 5)));
  ASSERT_TRUE(controller.WaitCommands(1, 0));
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_EQ(controller.starts().size(), 1u);
  EXPECT_EQ(controller.starts()[0].job_id(), "current");
  EXPECT_TRUE(controller.stops().empty());
  EXPECT_EQ(session.fenced(), 2);

  // A deposed leader's registration is refused too, again and again...
  scheduler.set_term(3);
  scheduler.Break();
  const absl::Time until = absl::Now() + kWait;
  while (session.fenced() < 4 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(session.fenced(), 4);
  EXPECT_EQ(session.registrations(), 1);
  // ...and a newer leader's taken.
  scheduler.set_term(6);
  ASSERT_TRUE(WaitRegistrations(session, 2));
  EXPECT_EQ(session.newest_term(), 6u);
}

// The newest term survives a restart of the agent: a new session with the
// same term file refuses the deposed leader from its first registration.
TEST(SessionFencingTest, TheNewestTermSurvivesARestart) {
  char tmpl[] = "/tmp/xl-term-test-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  FakeScheduler scheduler;
  scheduler.set_term(9);
  Server server(&scheduler);
  FakeController controller;
  SessionOptions options = Options(server.port());
  options.term_file = dir + "/leader_term";
  {
    Session first(options);
    first.Start(&controller);
    ASSERT_TRUE(WaitRegistrations(first, 1));
    first.Shutdown();
  }
  scheduler.set_term(8);
  Session second(options);
  EXPECT_EQ(second.newest_term(), 9u);
  second.Start(&controller);
  const absl::Time until = absl::Now() + kWait;
  while (second.fenced() < 1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(second.fenced(), 1);
  EXPECT_EQ(second.registrations(), 0);
  second.Shutdown();
  std::filesystem::remove_all(dir);
}

// Given a list, the agent goes where a refusing replica says the leader
// is, not to the next address.
TEST(SessionFencingTest, FollowsTheLeaderAReplicaNames) {
  FakeScheduler leader;
  leader.set_term(7);
  Server leader_server(&leader);
  const std::string leader_address =
      absl::StrCat("127.0.0.1:", leader_server.port());
  FakeFollower named(leader_address);
  Server named_server(&named);
  FakeFollower skipped("");
  Server skipped_server(&skipped);
  SessionOptions options = Options(named_server.port());
  options.scheduler =
      absl::StrCat("127.0.0.1:", named_server.port(), ",127.0.0.1:",
                   skipped_server.port(), ",", leader_address);
  options.random_start = false;
  FakeController controller;
  Session session(options);
  session.Start(&controller);
  ASSERT_TRUE(WaitRegistrations(session, 1));
  EXPECT_EQ(session.scheduler(), leader_address);
  EXPECT_EQ(named.calls(), 1);
  EXPECT_EQ(skipped.calls(), 0);
  session.Shutdown();
}

}  // namespace
}  // namespace xl::agent
