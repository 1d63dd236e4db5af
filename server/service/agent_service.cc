// AgentService: one bidirectional stream per agent. The reactor reads agent
// messages and hands them to the Controller; an AgentStream (shared with the
// Controller) queues messages down, one write in flight. No lock is held
// across StartWrite or Finish, since gRPC may run OnWriteDone inline.
#include <deque>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "server/service/services.h"

namespace xl::service {
namespace {

using Reactor = grpc::ServerBidiReactor<v1::AgentMessage, v1::SchedulerMessage>;

// "ipv4:127.0.0.1:5000" -> "127.0.0.1"; "ipv6:[::1]:5000" -> "::1".
std::string PeerIp(const std::string& peer) {
  std::string s = peer;
  if (absl::StartsWith(s, "ipv4:")) {
    s = s.substr(5);
    return s.substr(0, s.rfind(':'));
  }
  if (absl::StartsWith(s, "ipv6:")) {
    s = s.substr(5);
    if (!s.empty() && s[0] == '[') return s.substr(1, s.find(']') - 1);
    return s.substr(0, s.rfind(':'));
  }
  return "127.0.0.1";
}

class AgentStream : public state::AgentConnection {
 public:
  // Messages queued for one agent at most (an agent reads them as they
  // come; thousands waiting means it stopped reading).
  static constexpr size_t kMaxQueued = 10000;

  AgentStream(Reactor* reactor, std::string peer, uint64_t leader_term)
      : reactor_(reactor), peer_(std::move(peer)), term_(leader_term) {}

  bool Send(const v1::SchedulerMessage& msg) override {
    const v1::SchedulerMessage* next = nullptr;
    bool overflow = false;
    {
      absl::MutexLock lock(&mu_);
      if (done_ || finishing_) return false;
      if (queue_.size() >= kMaxQueued) {
        overflow = true;
      } else {
        queue_.push_back(msg);
        // Fencing: the agent refuses what a deposed leader sends.
        v1::SchedulerMessage& m = queue_.back();
        if (m.has_register_ack()) {
          m.mutable_register_ack()->set_leader_term(term_);
        } else if (m.has_start_ranks()) {
          m.mutable_start_ranks()->set_leader_term(term_);
        } else if (m.has_stop_job()) {
          m.mutable_stop_job()->set_leader_term(term_);
        }
        if (writing_) return true;
        writing_ = true;
        next = &queue_.front();
      }
    }
    if (overflow) {
      // An agent that does not read its stream would grow this queue
      // without bound: its session ends, and it registers again.
      Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("the agent left ", kMaxQueued,
                       " messages unread; session closed; restart the agent "
                       "if it does not reconnect")));
      return false;
    }
    reactor_->StartWrite(next);
    return true;
  }

  void Close(const std::string& why) override {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("session closed by the scheduler: ", why)));
  }

  std::string PeerAddress() const override { return PeerIp(peer_); }

  // Finishes the RPC once, after the write in flight (if any).
  void Finish(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (done_ || finishing_) return;
      finishing_ = true;
      finish_status_ = status;
      if (writing_) return;  // OnWriteDone finishes
      finish_started_ = true;
    }
    reactor_->Finish(status);
  }

  void OnWriteDone(bool ok) {
    const v1::SchedulerMessage* next = nullptr;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      queue_.pop_front();
      if (!ok) queue_.clear();
      if (!queue_.empty() && !finishing_) {
        next = &queue_.front();
      } else {
        writing_ = false;
        if (!ok && !finishing_) {
          finishing_ = true;
          finish_status_ = grpc::Status::CANCELLED;
        }
        if (finishing_ && !finish_started_) {
          finish_started_ = true;
          finish = true;
          status = finish_status_;
        }
      }
    }
    if (next != nullptr) {
      reactor_->StartWrite(next);
    } else if (finish) {
      reactor_->Finish(status);
    }
  }

  void MarkDone() {
    absl::MutexLock lock(&mu_);
    done_ = true;
    queue_.clear();
  }

 private:
  Reactor* const reactor_;
  const std::string peer_;
  const uint64_t term_;
  absl::Mutex mu_;
  std::deque<v1::SchedulerMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

class AgentStreamReactor : public Reactor {
 public:
  AgentStreamReactor(Controller* controller, const auth::Authenticator* auth,
                     grpc::CallbackServerContext* ctx, uint64_t leader_term)
      : controller_(controller),
        auth_enabled_(auth->enabled()),
        stream_(std::make_shared<AgentStream>(this, ctx->peer(),
                                              leader_term)) {
    // With auth on, only an agent's certificate opens a session, and the
    // node it names is the only one the session may speak for.
    auto who = auth->Identify(ctx);
    if (!who.ok()) {
      identity_ = who.status();
    } else if (auth_enabled_ && !who->is_node()) {
      identity_ = absl::PermissionDeniedError(absl::StrCat(
          "agent session: only an agent with a node certificate may connect, "
          "and ", who->name, " is a user"));
    } else {
      certified_node_ = who->name;
    }
    if (!identity_.ok()) {
      // Refused now, not at a first message that may never come: a caller
      // without a node's certificate holds no stream open.
      stream_->Finish(ToGrpcStatus(identity_));
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      stream_->Finish(grpc::Status::OK);
      return;
    }
    if (node_.empty()) {
      if (!in_.has_register_()) {
        stream_->Finish(ToGrpcStatus(absl::InvalidArgumentError(
            "register: the first message of a session must be Register")));
        return;
      }
      if (auth_enabled_ && in_.register_().instance_id().empty()) {
        stream_->Finish(ToGrpcStatus(absl::InvalidArgumentError(
            "register: instance_id is required by a scheduler with TLS (it "
            "tells a restarted agent from a second one); upgrade the "
            "agent")));
        return;
      }
      if (auth_enabled_ && in_.register_().name() != certified_node_) {
        stream_->Finish(ToGrpcStatus(absl::PermissionDeniedError(absl::StrCat(
            "register: the agent calls itself \"", in_.register_().name(),
            "\" but its certificate is for node \"", certified_node_,
            "\"; start it with --name ", certified_node_,
            " or give it that node's certificate"))));
        return;
      }
      auto name = controller_->AgentRegister(in_.register_(), stream_);
      if (!name.ok()) {
        stream_->Finish(ToGrpcStatus(name.status()));
        return;
      }
      node_ = *name;
    } else {
      controller_->AgentMessage(node_, stream_.get(), in_);
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override { stream_->OnWriteDone(ok); }

  void OnDone() override {
    stream_->MarkDone();
    if (!node_.empty()) controller_->AgentDisconnected(node_, stream_);
    delete this;
  }

 private:
  Controller* const controller_;
  const bool auth_enabled_;
  // The caller's identity; an error ended the session at once.
  absl::Status identity_;
  std::string certified_node_;
  std::shared_ptr<AgentStream> stream_;
  v1::AgentMessage in_;
  std::string node_;  // set once registered; read only by reactions
};

}  // namespace

grpc::ServerBidiReactor<v1::AgentMessage, v1::SchedulerMessage>*
AgentServiceImpl::Connect(grpc::CallbackServerContext* ctx) {
  return new AgentStreamReactor(controller_, auth_, ctx, term_);
}

}  // namespace xl::service
