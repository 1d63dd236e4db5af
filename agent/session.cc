#include "agent/session.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/log.h"
#include "common/duration.h"
#include "common/status.h"

namespace xl::agent {
namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const SessionOptions& options) {
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
  return grpc::CreateCustomChannel(options.scheduler,
                                   grpc::InsecureChannelCredentials(), args);
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
      channel_(MakeChannel(options_)),
      stub_(v1::AgentService::NewStub(channel_)),
      outbox_(options_.max_buffered_log_bytes),
      heartbeat_interval_(options_.heartbeat_interval) {}

Session::~Session() { Shutdown(absl::ZeroDuration()); }

void Session::Start(RankController* controller) {
  absl::MutexLock lock(&mu_);
  if (started_ || shutdown_) return;
  started_ = true;
  controller_ = controller;
  thread_ = std::thread([this] { Run(); });
}

void Session::Shutdown(absl::Duration flush_timeout) {
  const absl::Time deadline = absl::Now() + flush_timeout;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    if (acked_ && flush_timeout > absl::ZeroDuration()) {
      // Everything queued is written...
      auto flushed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return (outbox_.empty() && !write_in_flight_ && unacked_.empty()) ||
               !acked_;
      };
      mu_.AwaitWithDeadline(absl::Condition(&flushed), deadline);
      // ...then the writer half-closes and the scheduler ends the stream,
      // which delivers what was written (a cancel could drop it).
      closing_ = true;
      auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return context_ == nullptr;
      };
      mu_.AwaitWithDeadline(absl::Condition(&ended), deadline);
    }
    shutdown_ = true;
    closing_ = true;
    connection_done_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

void Session::OnRankStatus(const v1::RankStatus& status) {
  absl::MutexLock lock(&mu_);
  outbox_.PushStatus(status);
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
      LogLine(absl::StrCat("lost the scheduler at ", options_.scheduler, " (",
                           status.ToString(), "); reconnecting"));
    }
    // Jitter: uniform in [backoff/2, backoff], so agents that lost the same
    // scheduler do not come back in lockstep.
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    absl::Duration wait = backoff * jitter(rng);
    if (!registered) {
      LogLine(absl::StrCat(
          "cannot reach the scheduler at ", options_.scheduler, " (",
          status.ToString(), "); retrying in ",
          absl::FormatDuration(absl::Trunc(wait, absl::Milliseconds(1))),
          "; check --scheduler and that xl-scheduler runs"));
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutdown_ || closing_;
    };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping), wait)) return;
  }
}

absl::Status Session::RunConnection(bool* registered) {
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_ || closing_) return absl::OkStatus();
    context_ = &context;
    acked_ = false;
    connection_done_ = false;
    // The snapshot below carries every status queued so far.
    outbox_.DropStatuses();
  }
  std::unique_ptr<Stream> stream = stub_->Connect(&context);

  v1::AgentMessage hello;
  v1::Register* reg = hello.mutable_register_();
  reg->set_name(options_.name);
  *reg->mutable_inventory() = options_.inventory;
  for (const v1::RankStatus& status : controller_->Snapshot()) {
    *reg->add_ranks() = status;
  }
  reg->set_agent_version(options_.agent_version);

  std::thread writer;
  absl::Status result;
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
      absl::Duration interval = options_.heartbeat_interval;
      absl::Duration asked = FromProto(ack.heartbeat_interval());
      if (asked > absl::ZeroDuration()) interval = std::min(interval, asked);
      {
        absl::MutexLock lock(&mu_);
        acked_ = true;
        log_acks_ = ack.log_acks();
        heartbeat_interval_ = interval;
        node_ = ack.node();
        ++registrations_;
        logged_drop_ = false;
      }
      *registered = true;
      LogLine(absl::StrCat("registered with the scheduler at ",
                           options_.scheduler, " as node ", ack.node(),
                           " (heartbeat every ", absl::FormatDuration(interval),
                           ")"));
      while (stream->Read(&message)) Dispatch(message);
      result = absl::UnavailableError("the stream ended");
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
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    if (shutdown_ || closing_) return absl::OkStatus();
  }
  if (!finish.ok()) return FromGrpcStatus(finish);
  return result;
}

void Session::WriterLoop(Stream* stream, grpc::ClientContext* context) {
  const absl::Time ack_deadline = absl::Now() + options_.register_timeout;
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
    absl::Time wake = acked_ ? next_heartbeat : ack_deadline;
    mu_.AwaitWithDeadline(absl::Condition(&ready), wake);
    if (connection_done_) break;
    if (closing_) {
      mu_.Unlock();
      stream->WritesDone();
      mu_.Lock();
      break;
    }
    if (!acked_) {
      if (absl::Now() >= ack_deadline) {
        LogLine(absl::StrCat(
            "no RegisterAck from ", options_.scheduler, " within ",
            absl::FormatDuration(options_.register_timeout), "; reconnecting"));
        context->TryCancel();
        break;
      }
      continue;
    }
    v1::AgentMessage message;
    const absl::Time now = absl::Now();
    if (now >= next_heartbeat) {
      message.mutable_heartbeat();
      next_heartbeat = now + heartbeat_interval_;
    } else if (!can_send() || !outbox_.Pop(&message)) {
      continue;
    }
    if (message.has_log() && log_acks_) {
      message.set_seq(++next_log_seq_);
      unacked_bytes_ += message.log().data().size();
      unacked_.push_back(message);
    }
    write_in_flight_ = true;
    mu_.Unlock();
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
    case v1::SchedulerMessage::kStartRanks:
      LogLine(Describe(message.start_ranks()));
      controller_->StartRanks(message.start_ranks());
      break;
    case v1::SchedulerMessage::kStopJob: {
      const v1::StopJob& stop = message.stop_job();
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
          unacked_bytes_ -= it->log().data().size();
          unacked_.erase(it);
          break;
        }
      }
      break;
    }
    case v1::SchedulerMessage::kRegisterAck: {
      absl::Duration asked =
          FromProto(message.register_ack().heartbeat_interval());
      absl::MutexLock lock(&mu_);
      if (asked > absl::ZeroDuration()) {
        heartbeat_interval_ = std::min(options_.heartbeat_interval, asked);
      }
      break;
    }
    default:
      LogLine(
          "ignoring an unknown message from the scheduler (a newer "
          "scheduler?)");
  }
}

}  // namespace xl::agent
