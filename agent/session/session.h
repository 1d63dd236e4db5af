// The agent's session with the scheduler: one long-lived
// xl.v1.AgentService/Connect stream. Up: Register (inventory and the status of
// every known rank), heartbeats, rank statuses and logs. Down: StartRanks and
// StopJob, handed to the RankController. Reconnects with exponential backoff
// and jitter whenever the stream breaks; rank statuses survive a disconnect
// through the next Register, logs through a bounded buffer. Holds the lease
// the scheduler grants: when no heartbeat is acknowledged in time, every rank
// is stopped (so that the scheduler can run it elsewhere) and the session
// registers again. Every deadline (heartbeats, lease, register timeout,
// backoff) is on the clock's MonotonicNow(), so a wall-clock step changes
// none of them.
//
// Threading: Start() runs one session thread (connect, read the stream,
// dispatch), one lease thread (which watches the lease whatever the stream
// does, and ticks every timed wait of the session; see monotonic_wait.h)
// and, per connection, one writer thread (the only one that writes, so one
// write is in flight). The RankEventSink methods queue and return; they are
// safe from any thread. Shutdown() is safe from any thread but the session's
// own.
#ifndef XL_AGENT_SESSION_SESSION_H_
#define XL_AGENT_SESSION_SESSION_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/monotonic_wait.h"
#include "agent/session/lease.h"
#include "agent/session/outbox.h"
#include "agent/supervisor/supervisor.h"
#include "common/clock.h"
#include "xl/v1/agent.grpc.pb.h"
#include "xl/v1/node.pb.h"

namespace xl::agent {

struct SessionOptions {
  // The scheduler's agent endpoint, HOST:PORT, or a comma-separated list of
  // a replicated scheduler's replicas: the session connects to the one that
  // leads (common/leader.h), and follows it when another takes over.
  std::string scheduler;
  // Where the newest leader term seen is kept (fencing survives a restart
  // of the agent); empty: in memory only.
  std::string term_file;
  // Given a list, start at a random address of it (a fleet does not all
  // knock on the first replica); false: at the first.
  bool random_start = true;
  // Register.instance_id; empty: drawn at random. The agent keeps its own
  // in its state directory, so that a restarted agent that adopted its
  // predecessor's ranks is the same agent to the scheduler.
  std::string instance_id;
  // The node's name in the cluster.
  std::string name;
  v1::NodeInventory inventory;
  std::string agent_version;
  // The agent heartbeats at least this often, and at least as often as the
  // scheduler's RegisterAck asks.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // A scheduler that accepts the stream but sends no RegisterAck in this
  // time is treated as away.
  absl::Duration register_timeout = absl::Seconds(10);
  size_t max_buffered_log_bytes = 8 << 20;
  // HTTP/2 keepalive pings, so that a dead scheduler (or a dead network path)
  // breaks the stream even when nothing is written.
  absl::Duration keepalive_time = absl::Seconds(20);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // How the channel authenticates (TLS with a node certificate); null:
  // plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With TLS: the CA file ranks are told (XL_TLS_CA) to verify the
  // scheduler with, for their rendezvous calls.
  std::string rank_tls_ca;
  // Heartbeats, the lease, the register timeout and the reconnect backoff
  // are measured on its MonotonicNow(). (Shutdown()'s flush timeout bounds a
  // real wait on the network: CLOCK_MONOTONIC whatever this is.)
  Clock* clock = RealClock::Get();
};

class Session : public RankEventSink {
 public:
  explicit Session(SessionOptions options);
  // Calls Shutdown(0).
  ~Session() override;

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Starts the session thread. `controller` receives the scheduler's commands
  // and supplies the Register snapshot; it must outlive the session.
  void Start(RankController* controller);

  // Sends what is queued (for at most `flush_timeout` while connected), ends
  // the stream and joins the threads. Idempotent.
  void Shutdown(absl::Duration flush_timeout = absl::Seconds(1));

  void OnRankStatus(const v1::RankStatus& status) override;
  void OnLogChunk(v1::LogChunk chunk) override;
  void OnMetrics(v1::TrainMetrics metrics) override;
  size_t LogRoom() const override;

  // True between a RegisterAck and the end of that stream.
  bool connected() const;
  // Registrations acknowledged so far.
  int registrations() const;
  // The node name the scheduler acknowledged last.
  std::string node() const;
  // Times the lease ran out (and every rank was stopped).
  int lease_expirations() const;
  // How long ago the scheduler last acknowledged a heartbeat (or Register)
  // of this agent, on the monotonic clock; InfiniteDuration before the
  // first. For /metrics.
  absl::Duration SinceLastAck() const;
  // Rank exits (and failures to start) reported so far.
  int64_t rank_exits() const;
  // The newest scheduler leader term seen (RegisterAck.leader_term), and the
  // commands and acks refused for carrying an older one (a deposed
  // leader's).
  uint64_t newest_term() const;
  int64_t fenced() const;
  // The scheduler address of the current (or last) connection.
  std::string scheduler() const;
  // Register.instance_id: options.instance_id, or 128 random bits in hex
  // drawn once per Session (the same across its reconnects).
  const std::string& instance_id() const { return instance_id_; }

 private:
  using Stream =
      grpc::ClientReaderWriterInterface<v1::AgentMessage, v1::SchedulerMessage>;

  void Run();
  // One connection: register, read until the stream ends. OK when it ended
  // because of Shutdown(); otherwise why it ended.
  absl::Status RunConnection(bool* registered);
  void WriterLoop(Stream* stream, grpc::ClientContext* context);
  void Dispatch(const v1::SchedulerMessage& message);
  // The lease thread: stops every rank when the lease runs out.
  void WatchLease();
  // Lock held on entry and exit; released while the controller is called.
  void ExpireLease(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until `cond` holds (true) or options_.clock->MonotonicNow()
  // reaches `deadline` (false); see AwaitUntil().
  bool AwaitUntil(const absl::Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs why a connection failed before its RegisterAck, once per kind of
  // refusal (a name served by another agent) rather than once per attempt.
  void LogFailedAttempt(const absl::Status& status, absl::Duration retry_in);
  // True (and counted, logged) when a message of `term` comes from a
  // deposed leader: older than the newest term seen.
  bool Fenced(uint64_t term, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionOptions options_;
  const std::string instance_id_;
  // One per address of options_.scheduler.
  std::vector<std::string> addresses_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::AgentService::Stub>> stubs_;
  // The address connected to, an index into addresses_.
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  // The leader a refusing replica named (xl-leader) at the end of the last
  // connection; session thread only.
  std::string redirect_;
  // A replica that does not lead refused the last connection (it answered
  // with the xl-term metadata); session thread only.
  bool replica_refused_ = false;
  // Redirects followed in a row without registering; session thread only.
  size_t redirects_ = 0;
  uint64_t newest_term_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fenced_ ABSL_GUARDED_BY(mu_) = 0;
  RankController* controller_ = nullptr;
  std::thread thread_;
  std::thread lease_thread_;
  // The lease thread's sleeps; cancelled by Shutdown().
  RelativeSleeper lease_sleeper_;

  mutable absl::Mutex mu_;
  Outbox outbox_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // The live connection; cancelled by Shutdown().
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool acked_ ABSL_GUARDED_BY(mu_) = false;
  // Ends the current connection's writer.
  bool connection_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_);
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  std::string node_ ABSL_GUARDED_BY(mu_);
  bool logged_drop_ ABSL_GUARDED_BY(mu_) = false;
  // LogRoom() said there was little: the supervisor waits to be told when
  // the outbox has drained to half.
  mutable bool room_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // The scheduler of this connection acknowledges log messages.
  bool log_acks_ ABSL_GUARDED_BY(mu_) = false;
  // Log messages written on this connection and not yet acknowledged
  // (LogAck): sent again, first, on the next connection.
  std::deque<v1::AgentMessage> unacked_ ABSL_GUARDED_BY(mu_);
  size_t unacked_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_log_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Shutdown() began: no reconnect; the writer half-closes the stream.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // Held across connections: a broken stream does not stop the clock.
  Lease lease_ ABSL_GUARDED_BY(mu_);
  // Heartbeat.seq of the last heartbeat written on this connection.
  uint64_t heartbeat_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Counts connections, so that an expiry ends only the one it saw.
  uint64_t connection_serial_ ABSL_GUARDED_BY(mu_) = 0;
  // The lease thread ended the current connection.
  bool lease_ended_connection_ ABSL_GUARDED_BY(mu_) = false;
  int lease_expirations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rank_exits_ ABSL_GUARDED_BY(mu_) = 0;
  // Bumped by the lease thread every kTickPeriod: ends each timed wait in
  // time even when a wall-clock step moved Abseil's deadline.
  uint64_t ticks_ ABSL_GUARDED_BY(mu_) = 0;
  // The last refusal logged (its digits masked), so that one refusal
  // repeated at every retry is logged once; cleared by a registration.
  // Touched by the session thread only.
  std::string last_refusal_;
};

}  // namespace xl::agent

#endif  // XL_AGENT_SESSION_SESSION_H_
