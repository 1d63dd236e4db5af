// Over 600 lines: the stream's one state machine (connect, register,
// reconcile, heartbeats, the bounded outbox and its acknowledgements, the
// lease); splitting it would spread the transitions of one state.
#include "agent/session/session.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/log.h"
#include "agent/shim/rank_shim.h"
#include "common/duration.h"
#include "common/limits.h"
#include "common/grpc_status.h"
#include "common/leader.h"
#include "common/status.h"

namespace xl::agent {
namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const SessionOptions& options,
                                           const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(
      GRPC_ARG_KEEPALIVE_TIME_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
  args.SetInt(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // The channel's own reconnect backoff (default up to 120 s) would make our
  // fail-fast attempts fail without trying; keep it in step with ours.
  args.SetInt(
      GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.initial_backoff)));
  args.SetInt(
      GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
      static_cast<int>(absl::ToInt64Milliseconds(options.initial_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.max_backoff)));
  // What the scheduler may send (a StartRanks of a large job): a message
  // over gRPC's default of 4 MiB would end the session again and again.
  args.SetMaxReceiveMessageSize(kMaxSchedulerToAgentBytes);
  return grpc::CreateCustomChannel(
      address,
      options.credentials != nullptr ? options.credentials
                                     : grpc::InsecureChannelCredentials(),
      args);
}

// Register.instance_id: 128 random bits, as 32 hex digits.
std::string NewInstanceId() {
  std::random_device random;  // /dev/urandom or the CPU's generator.
  std::string id;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(
        &id, absl::Hex(static_cast<uint32_t>(random()), absl::kZeroPad8));
  }
  return id;
}

// `text` with every run of digits as one '#': a refusal that differs from the
// last one only in its numbers ("heard from 1.2s ago") is the same refusal.
std::string WithoutNumbers(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!absl::ascii_isdigit(text[i])) {
      out.push_back(text[i]);
    } else if (out.empty() || out.back() != '#') {
      out.push_back('#');
    }
  }
  return out;
}

// The longest wait between tries while the scheduler's replicas have no
// leader: a refusal is one stream on a connection already open, cheap for
// the replica even from a fleet, and an election takes about a second.
constexpr absl::Duration kBetweenLeaders = absl::Milliseconds(500);

// The heartbeat interval for a RegisterAck: ours, or the scheduler's when
// shorter, and short enough that a lost heartbeat or two cannot cost the
// lease.
absl::Duration HeartbeatInterval(absl::Duration ours,
                                 const v1::RegisterAck& ack) {
  absl::Duration interval = ours;
  const absl::Duration asked = FromProto(ack.heartbeat_interval());
  if (asked > absl::ZeroDuration()) interval = std::min(interval, asked);
  const absl::Duration lease = FromProto(ack.lease());
  if (lease > absl::ZeroDuration()) interval = std::min(interval, lease / 3);
  return interval;
}

// "stopping 3 ranks of jobs 4, 7 so that the scheduler can run them
// elsewhere", from the ranks that still run.
std::string DescribeStop(const std::vector<v1::RankStatus>& snapshot) {
  int ranks = 0;
  std::vector<std::string> jobs;
  for (const v1::RankStatus& status : snapshot) {
    const bool runs =
        status.state() == v1::RANK_RUNNING ||
        (status.state() == v1::RANK_EXITED && status.processes_remaining());
    if (!runs) continue;
    ++ranks;
    if (std::find(jobs.begin(), jobs.end(), status.job_id()) == jobs.end()) {
      jobs.push_back(status.job_id());
    }
  }
  if (ranks == 0) return "no rank runs here";
  return absl::StrCat("stopping ", ranks, ranks == 1 ? " rank" : " ranks",
                      jobs.size() == 1 ? " of job " : " of jobs ",
                      absl::StrJoin(jobs, ", "),
                      " so that the scheduler can run ",
                      ranks == 1 ? "it" : "them", " elsewhere");
}

std::string Describe(const v1::StartRanks& start) {
  std::vector<int> ranks;
  for (const v1::RankLaunch& r : start.ranks()) ranks.push_back(r.rank());
  return absl::StrCat("job ", start.job_id(), " attempt ", start.attempt(),
                      ": start ranks [", absl::StrJoin(ranks, ","), "]");
}

}  // namespace

Session::Session(SessionOptions options)
    : options_(std::move(options)),
      instance_id_(options_.instance_id.empty() ? NewInstanceId()
                                                : options_.instance_id),
      outbox_(options_.max_buffered_log_bytes),
      heartbeat_interval_(options_.heartbeat_interval) {
  // xl-agent checked the list; a bad one here is the caller's: used whole.
  auto list = SplitServerList(options_.scheduler, "--scheduler");
  addresses_ = list.ok() && !list->empty()
                   ? *std::move(list)
                   : std::vector<std::string>{options_.scheduler};
  for (const std::string& address : addresses_) {
    channels_.push_back(MakeChannel(options_, address));
    stubs_.push_back(v1::AgentService::NewStub(channels_.back()));
  }
  // A fleet does not all knock on the first replica.
  if (std::string text; !options_.term_file.empty() &&
                        shim::ReadWholeFile(options_.term_file, &text)) {
    uint64_t term = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &term)) {
      newest_term_ = term;
    }
  }
  if (options_.random_start) {
    current_ = std::random_device{}() % addresses_.size();
  }
}

std::string Session::scheduler() const {
  absl::MutexLock lock(&mu_);
  return addresses_[current_];
}

uint64_t Session::newest_term() const {
  absl::MutexLock lock(&mu_);
  return newest_term_;
}

int64_t Session::fenced() const {
  absl::MutexLock lock(&mu_);
  return fenced_;
}

bool Session::Fenced(uint64_t term, absl::string_view what) {
  if (term >= newest_term_) {
    if (term > newest_term_ && !options_.term_file.empty() &&
        !shim::WriteFileAtomically(options_.term_file,
                                   absl::StrCat(term, "\n"))) {
      LogLine(absl::StrCat("cannot write ", options_.term_file,
                           "; a restarted agent forgets leader term ", term));
    }
    newest_term_ = term;
    return false;
  }
  ++fenced_;
  LogLine(absl::StrCat("refused ", what, " from the scheduler at ",
                       addresses_[current_], ": it is of leader term ", term,
                       ", older than term ", newest_term_,
                       " already seen (a deposed leader; if the scheduler's "
                       "replicas were rebuilt as a new cluster, stop this "
                       "agent, remove ",
                       options_.term_file.empty() ? std::string("nothing")
                                                  : options_.term_file,
                       " and start it again)"));
  return true;
}

Session::~Session() { Shutdown(absl::ZeroDuration()); }

void Session::Start(RankController* controller) {
  absl::MutexLock lock(&mu_);
  if (started_ || shutdown_) return;
  started_ = true;
  controller_ = controller;
  thread_ = std::thread([this] { Run(); });
  lease_thread_ = std::thread([this] { WatchLease(); });
}

void Session::Shutdown(absl::Duration flush_timeout) {
  // A real wait on the network, whatever clock the session runs on.
  const Clock& real = *RealClock::Get();
  const absl::Time deadline = real.MonotonicNow() + flush_timeout;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    if (acked_ && flush_timeout > absl::ZeroDuration()) {
      // Everything queued is written...
      auto flushed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return (outbox_.empty() && !write_in_flight_ && unacked_.empty()) ||
               !acked_;
      };
      agent::AwaitUntil(&mu_, absl::Condition(&flushed), &ticks_, real,
                        deadline);
      // ...then the writer half-closes and the scheduler ends the stream,
      // which delivers what was written (a cancel could drop it).
      closing_ = true;
      auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return context_ == nullptr;
      };
      agent::AwaitUntil(&mu_, absl::Condition(&ended), &ticks_, real, deadline);
    }
    shutdown_ = true;
    closing_ = true;
    connection_done_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  lease_sleeper_.Cancel();
  if (thread_.joinable()) thread_.join();
  if (lease_thread_.joinable()) lease_thread_.join();
}

void Session::OnRankStatus(const v1::RankStatus& status) {
  absl::MutexLock lock(&mu_);
  // An exit is reported again while its process group lingers, and once
  // more when the group is gone: count the last.
  if (status.state() != v1::RANK_RUNNING && !status.processes_remaining()) {
    ++rank_exits_;
  }
  outbox_.PushStatus(status);
}

absl::Duration Session::SinceLastAck() const {
  absl::MutexLock lock(&mu_);
  if (lease_.renewed_from() == absl::InfinitePast()) {
    return absl::InfiniteDuration();
  }
  return options_.clock->MonotonicNow() - lease_.renewed_from();
}

int64_t Session::rank_exits() const {
  absl::MutexLock lock(&mu_);
  return rank_exits_;
}

void Session::OnLogChunk(v1::LogChunk chunk) {
  absl::MutexLock lock(&mu_);
  if (outbox_.PushLog(std::move(chunk)) && !logged_drop_) {
    logged_drop_ = true;
    LogLine(absl::StrCat("log buffer full (", options_.max_buffered_log_bytes,
                         " bytes): dropping the oldest rank output until the "
                         "scheduler catches up"));
  }
}

size_t Session::LogRoom() const {
  absl::MutexLock lock(&mu_);
  const size_t max = options_.max_buffered_log_bytes;
  const size_t used = outbox_.log_bytes();
  const size_t room = used >= max ? 0 : max - used;
  // Less than a spool read's worth (or half a small buffer): none, so that
  // spools are read in pieces, not bytes; the reader waits to be told.
  if (room < std::min<size_t>(64u << 10, max / 2)) {
    room_wanted_ = true;
    return 0;
  }
  return room;
}

void Session::OnMetrics(v1::TrainMetrics metrics) {
  absl::MutexLock lock(&mu_);
  outbox_.PushMetrics(std::move(metrics));
}

bool Session::connected() const {
  absl::MutexLock lock(&mu_);
  return acked_;
}

int Session::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}

std::string Session::node() const {
  absl::MutexLock lock(&mu_);
  return node_;
}

int Session::lease_expirations() const {
  absl::MutexLock lock(&mu_);
  return lease_expirations_;
}

void Session::Run() {
  std::mt19937_64 rng(std::random_device{}());
  absl::Duration backoff = options_.initial_backoff;
  while (true) {
    bool registered = false;
    absl::Status status = RunConnection(&registered);
    absl::MutexLock lock(&mu_);
    if (shutdown_ || closing_) return;
    if (registered) {
      backoff = options_.initial_backoff;
      last_refusal_.clear();
      LogLine(absl::StrCat("lost the scheduler at ", addresses_[current_],
                           " (", status.ToString(), "); reconnecting"));
    }
    // Jitter: uniform in [backoff/2, backoff], so agents that lost the same
    // scheduler do not come back in lockstep.
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    absl::Duration wait = backoff * jitter(rng);
    if (registered) redirects_ = 0;
    // A replica named the leader: go there next, without backing off
    // (unless replicas keep sending the agent around: stale views).
    const auto named = std::find(addresses_.begin(), addresses_.end(),
                                 redirect_);
    if (!redirect_.empty() && named != addresses_.end() &&
        static_cast<size_t>(named - addresses_.begin()) != current_ &&
        redirects_ < addresses_.size()) {
      LogLine(absl::StrCat("the scheduler at ", addresses_[current_],
                           " does not lead; the leader is ", redirect_));
      current_ = named - addresses_.begin();
      ++redirects_;
      continue;
    }
    redirects_ = 0;
    if (replica_refused_) {
      // A live replica that does not lead: between leaders (an election
      // takes about a second), or one elected and still loading its state
      // (it named itself: again there). Backing off up to half a second,
      // so that the agent is soon with the new leader; jittered, so that a
      // fleet does not come in lockstep.
      if (redirect_.empty() || named == addresses_.end()) {
        current_ = (current_ + 1) % addresses_.size();
      }
      wait = std::min(backoff, kBetweenLeaders) * jitter(rng);
      backoff = std::min({backoff * 2, options_.max_backoff, kBetweenLeaders});
    } else {
      if (!registered) {
        LogFailedAttempt(status, wait);
        backoff = std::min(backoff * 2, options_.max_backoff);
      }
      // Another replica may lead now (or soon): try the next address.
      current_ = (current_ + 1) % addresses_.size();
    }
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutdown_ || closing_;
    };
    if (AwaitUntil(absl::Condition(&stopping),
                   options_.clock->MonotonicNow() + wait)) {
      return;
    }
  }
}

void Session::LogFailedAttempt(const absl::Status& status,
                               absl::Duration retry_in) {
  if (absl::IsAlreadyExists(status)) {
    // Another agent process serves this node name, or did until lately
    // (this node's previous agent, not yet timed out): it may go away, so
    // keep trying, but say it once rather than at every retry.
    std::string refusal = WithoutNumbers(status.message());
    if (refusal == last_refusal_) return;
    last_refusal_ = std::move(refusal);
    LogLine(absl::StrCat("the scheduler at ", addresses_[current_],
                         " refuses this agent (instance ", instance_id_, "): ",
                         status.message(), "; retrying with backoff (at most ",
                         absl::FormatDuration(options_.max_backoff),
                         " apart) in case the other agent goes away"));
    return;
  }
  last_refusal_.clear();
  LogLine(absl::StrCat(
      "cannot reach the scheduler at ", addresses_[current_], " (",
      status.ToString(), "); retrying in ",
      absl::FormatDuration(absl::Trunc(retry_in, absl::Milliseconds(1))),
      "; check --scheduler and that xl-scheduler runs"));
}

bool Session::AwaitUntil(const absl::Condition& cond, absl::Time deadline) {
  return agent::AwaitUntil(&mu_, cond, &ticks_, *options_.clock, deadline);
}

absl::Status Session::RunConnection(bool* registered) {
  grpc::ClientContext context;
  v1::AgentService::Stub* stub = nullptr;
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  redirect_.clear();
  replica_refused_ = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_ || closing_) return absl::OkStatus();
    stub = stubs_[current_].get();
    address = addresses_[current_];
    channel = channels_[current_];
    context_ = &context;
    acked_ = false;
    connection_done_ = false;
    ++connection_serial_;
    lease_ended_connection_ = false;
    heartbeat_seq_ = 0;
    lease_.NewConnection();
    // The snapshot below carries every status queued so far.
    outbox_.DropStatuses();
  }
  if (addresses_.size() > 1 &&
      channel->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY) {
    // A replica that was down, or whose connection a role change cut, a
    // moment ago may lead now: its channel's reconnect backoff must not
    // fail this attempt without trying, nor may the failure the channel
    // last saw (a fail-fast call reports it until a new connection is up):
    // a fresh connection gets a moment to come up.
    grpc::experimental::ChannelResetConnectionBackoff(channel.get());
    channel->WaitForConnected(std::chrono::system_clock::now() +
                              std::chrono::milliseconds(500));
  }
  std::unique_ptr<Stream> stream = stub->Connect(&context);

  v1::AgentMessage hello;
  v1::Register* reg = hello.mutable_register_();
  reg->set_name(options_.name);
  *reg->mutable_inventory() = options_.inventory;
  for (const v1::RankStatus& status : controller_->Snapshot()) {
    *reg->add_ranks() = status;
  }
  reg->set_agent_version(options_.agent_version);
  reg->set_shared_env(true);
  reg->set_honours_lease(true);
  reg->set_instance_id(instance_id_);

  std::thread writer;
  absl::Status result;
  // Read before the write: an early reading only makes the lease shorter.
  const absl::Time register_sent = options_.clock->MonotonicNow();
  if (stream->Write(hello)) {
    writer = std::thread([&] { WriterLoop(stream.get(), &context); });
    v1::SchedulerMessage message;
    if (!stream->Read(&message)) {
      result = absl::UnavailableError("the stream ended before RegisterAck");
    } else if (!message.has_register_ack()) {
      result = absl::InternalError(
          "the scheduler's first message is not a RegisterAck");
      context.TryCancel();
    } else {
      const v1::RegisterAck& ack = message.register_ack();
      const absl::Duration interval =
          HeartbeatInterval(options_.heartbeat_interval, ack);
      bool fenced = false;
      {
        absl::MutexLock lock(&mu_);
        fenced = Fenced(ack.leader_term(), "a registration");
      }
      if (fenced) {
        context.TryCancel();
        while (stream->Read(&message)) {
        }
        result = absl::FailedPreconditionError(absl::StrCat(
            "a deposed leader (term ", ack.leader_term(), ")"));
      } else {
      // Unset (a scheduler from before leases): no lease, never expires.
      const absl::Duration lease =
          ack.has_lease() ? FromProto(ack.lease()) : absl::ZeroDuration();
      {
        absl::MutexLock lock(&mu_);
        lease_.Grant(register_sent, lease);
        if (controller_ != nullptr) controller_->SetLease(lease_.valid_until());
        acked_ = true;
        log_acks_ = ack.log_acks();
        heartbeat_interval_ = interval;
        node_ = ack.node();
        ++registrations_;
        logged_drop_ = false;
      }
      *registered = true;
      LogLine(absl::StrCat(
          "registered with the scheduler at ", address, " as node ",
          ack.node(), " (heartbeat every ", absl::FormatDuration(interval),
          lease > absl::ZeroDuration()
              ? absl::StrCat("; lease ", absl::FormatDuration(lease))
              : std::string("; no lease"),
          ")"));
      while (stream->Read(&message)) Dispatch(message);
      result = absl::UnavailableError("the stream ended");
      }
    }
  } else {
    result = absl::UnavailableError("cannot send Register");
  }

  {
    absl::MutexLock lock(&mu_);
    acked_ = false;
    connection_done_ = true;
  }
  if (writer.joinable()) writer.join();
  {
    // What this connection wrote without an acknowledgement may never have
    // reached the store: it goes first on the next connection (the
    // scheduler keeps each chunk once, by its end_offset).
    absl::MutexLock lock(&mu_);
    while (!unacked_.empty()) {
      unacked_.back().clear_seq();
      outbox_.PushFront(std::move(unacked_.back()));
      unacked_.pop_back();
    }
    unacked_bytes_ = 0;
  }
  grpc::Status finish = stream->Finish();
  redirect_ = LeaderHint(context);
  replica_refused_ =
      context.GetServerTrailingMetadata().count(kTermMetadataKey) != 0;
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    if (shutdown_ || closing_) return absl::OkStatus();
    if (lease_ended_connection_) {
      return absl::DeadlineExceededError(
          "ended by the agent: the lease expired");
    }
  }
  // A refused deposed leader: the refusal, not the cancel it caused.
  if (!finish.ok() && !absl::IsFailedPrecondition(result)) {
    return FromGrpcStatus(finish);
  }
  return result;
}

void Session::WriterLoop(Stream* stream, grpc::ClientContext* context) {
  const Clock& clock = *options_.clock;
  const absl::Time ack_deadline =
      clock.MonotonicNow() + options_.register_timeout;
  absl::Time next_heartbeat = absl::InfinitePast();
  mu_.Lock();
  while (true) {
    // Wait for the ack, then for something to send or a heartbeat to be due.
    const bool was_acked = acked_;
    // Output waiting for acknowledgements past the buffer bound holds the
    // queue back (heartbeats still go); the outbox then drops the oldest
    // output with a marker, as when the scheduler is away.
    auto can_send = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return acked_ && !outbox_.empty() &&
             unacked_bytes_ <= options_.max_buffered_log_bytes;
    };
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return connection_done_ || closing_ || acked_ != was_acked ||
             can_send();
    };
    const absl::Time wake = acked_ ? next_heartbeat : ack_deadline;
    AwaitUntil(absl::Condition(&ready), wake);
    if (connection_done_) break;
    if (closing_) {
      mu_.Unlock();
      stream->WritesDone();
      mu_.Lock();
      break;
    }
    if (!acked_) {
      if (clock.MonotonicNow() >= ack_deadline) {
        LogLine(absl::StrCat(
            "no RegisterAck from ", addresses_[current_], " within ",
            absl::FormatDuration(options_.register_timeout), "; reconnecting"));
        context->TryCancel();
        break;
      }
      continue;
    }
    v1::AgentMessage message;
    // Read before the write: an early reading only makes the lease shorter.
    const absl::Time now = clock.MonotonicNow();
    if (now >= next_heartbeat) {
      message.mutable_heartbeat()->set_seq(++heartbeat_seq_);
      message.mutable_heartbeat()->set_supervisor_stalled_ms(
          static_cast<uint32_t>(std::min<int64_t>(
              absl::ToInt64Milliseconds(controller_->Stalled()), UINT32_MAX)));
      lease_.HeartbeatSent(heartbeat_seq_, now);
      next_heartbeat = now + heartbeat_interval_;
    } else if (!can_send() || !outbox_.Pop(&message)) {
      continue;
    }
    if (message.has_log() && log_acks_) {
      message.set_seq(++next_log_seq_);
      unacked_bytes_ += message.log().data().size();
      unacked_.push_back(message);
    }
    // The supervisor left output in the spools for want of room: drained
    // to half, it reads on.
    bool room_freed = false;
    if (message.has_log() && room_wanted_ &&
        outbox_.log_bytes() <= options_.max_buffered_log_bytes / 2) {
      room_wanted_ = false;
      room_freed = controller_ != nullptr;
    }
    write_in_flight_ = true;
    mu_.Unlock();
    if (room_freed) controller_->LogRoomFreed();
    bool ok = stream->Write(message);
    mu_.Lock();
    write_in_flight_ = false;
    if (!ok) {
      // A log message stays in unacked_ and is sent again.
      context->TryCancel();  // Ends the reader's Read().
      break;
    }
  }
  mu_.Unlock();
}

void Session::Dispatch(const v1::SchedulerMessage& message) {
  switch (message.msg_case()) {
    case v1::SchedulerMessage::kStartRanks: {
      {
        absl::MutexLock lock(&mu_);
        if (Fenced(message.start_ranks().leader_term(),
                   absl::StrCat("StartRanks of job ",
                                message.start_ranks().job_id()))) {
          break;
        }
      }
      LogLine(Describe(message.start_ranks()));
      if (!options_.rank_tls_ca.empty()) {
        v1::StartRanks start = message.start_ranks();
        (*start.mutable_env())["XL_TLS_CA"] = options_.rank_tls_ca;
        for (auto& launch : *start.mutable_ranks()) {
          (*launch.mutable_env())["XL_TLS_CA"] = options_.rank_tls_ca;
        }
        controller_->StartRanks(start);
      } else {
        controller_->StartRanks(message.start_ranks());
      }
      break;
    }
    case v1::SchedulerMessage::kStopJob: {
      const v1::StopJob& stop = message.stop_job();
      {
        absl::MutexLock lock(&mu_);
        if (Fenced(stop.leader_term(),
                   absl::StrCat("StopJob of job ", stop.job_id()))) {
          break;
        }
      }
      LogLine(absl::StrCat("job ", stop.job_id(),
                           ": stop attempts <= ", stop.attempt(), " (grace ",
                           absl::FormatDuration(FromProto(stop.grace_period())),
                           "): ", stop.reason()));
      controller_->StopJob(stop);
      break;
    }
    case v1::SchedulerMessage::kLogAck: {
      absl::MutexLock lock(&mu_);
      const uint64_t seq = message.log_ack().seq();
      // Acks come in order but need not: find the one acknowledged.
      for (auto it = unacked_.begin(); it != unacked_.end(); ++it) {
        if (it->seq() == seq) {
          // Stored: a restarted agent ships this rank's output from here.
          if (controller_ != nullptr) controller_->LogStored(it->log());
          unacked_bytes_ -= it->log().data().size();
          unacked_.erase(it);
          break;
        }
      }
      break;
    }
    case v1::SchedulerMessage::kHeartbeatAck: {
      absl::MutexLock lock(&mu_);
      if (lease_.HeartbeatAcked(message.heartbeat_ack().seq()) &&
          controller_ != nullptr) {
        controller_->SetLease(lease_.valid_until());
      }
      break;
    }
    case v1::SchedulerMessage::kRegisterAck: {
      const v1::RegisterAck& ack = message.register_ack();
      absl::MutexLock lock(&mu_);
      if (ack.has_heartbeat_interval() || ack.has_lease()) {
        heartbeat_interval_ =
            HeartbeatInterval(options_.heartbeat_interval, ack);
      }
      break;
    }
    default:
      LogLine(
          "ignoring an unknown message from the scheduler (a newer "
          "scheduler?)");
  }
}

void Session::WatchLease() {
  // Sleeps are relative (CLOCK_MONOTONIC): no wall-clock step can keep a
  // cut-off agent's ranks running past its lease. Each pass also ticks the
  // session's other timed waits, for the same reason.
  while (true) {
    absl::Duration sleep = kTickPeriod;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return;
      ++ticks_;
      const absl::Time now = options_.clock->MonotonicNow();
      if (lease_.ExpiredAt(now)) {
        ExpireLease(now);
        continue;
      }
      // An injected clock may jump past the end: looked at again next tick.
      sleep = std::min(sleep, lease_.valid_until() - now);
    }
    if (!lease_sleeper_.SleepFor(sleep)) return;
  }
}

void Session::ExpireLease(absl::Time now) {
  const absl::Duration silent = now - lease_.renewed_from();
  const absl::Duration lease = lease_.duration();
  const uint64_t serial = connection_serial_;
  lease_.Release();
  // Ranks whose agent dies from here on stop themselves at once.
  if (controller_ != nullptr) controller_->SetLease(now);
  ++lease_expirations_;
  const std::string silent_for =
      absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100)));
  const std::string reason =
      absl::StrCat("the agent's lease expired (no heartbeat acknowledged for ",
                   silent_for, ", lease ", absl::FormatDuration(lease), ")");
  mu_.Unlock();
  // By now the scheduler counts this node lost and its ranks' attempts as
  // ended: none may go on running here. The exits go up as usual.
  const std::string what = DescribeStop(controller_->Snapshot());
  controller_->StopAllRanks(reason);
  LogLine(absl::StrCat("lease expired: no heartbeat acknowledged for ",
                       silent_for, " (lease ", absl::FormatDuration(lease),
                       "); ", what, "; registering again"));
  mu_.Lock();
  // A stream that carries no acknowledgements is of no use; the next
  // Register tells the scheduler what ran and what ended.
  if (connection_serial_ == serial && context_ != nullptr) {
    lease_ended_connection_ = true;
    context_->TryCancel();
  }
}

}  // namespace xl::agent
