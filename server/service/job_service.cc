#include "common/grpc_status.h"
#include "common/status.h"
#include "server/service/feed_reactor.h"
#include "server/service/services.h"

namespace xl::service {
namespace {

template <typename T>
void FinishWith(grpc::ServerUnaryReactor* reactor, absl::StatusOr<T> result,
                T* response) {
  if (result.ok()) *response = std::move(*result);
  reactor->Finish(ToGrpcStatus(result.status()));
}

// The calling user, or the error to finish the call with.
absl::StatusOr<auth::Principal> User(const auth::Authenticator* auth,
                                     const grpc::CallbackServerContext* ctx,
                                     absl::string_view what) {
  ASSIGN_OR_RETURN(auth::Principal p, auth->Identify(ctx));
  RETURN_IF_ERROR(auth::RequireUser(p, what));
  return p;
}

// OK when `p` may read the logs of (or cancel) job `id`; NOT_FOUND passes
// through for the caller to report.
absl::Status CheckOwner(Controller* controller, const auth::Principal& p,
                        const std::string& id, absl::string_view what) {
  if (id.empty()) {
    return absl::InvalidArgumentError("job_id: required; see xlctl list");
  }
  ASSIGN_OR_RETURN(v1::Job job, controller->GetJob(id));
  return auth::RequireOwner(p, job, what);
}

}  // namespace

absl::Status JobServiceImpl::TakeStream(const std::string& user,
                                        std::function<void()>* release) {
  RETURN_IF_ERROR(streams_->Acquire(user));
  StreamLimits* streams = streams_;
  *release = [streams, user] { streams->Release(user); };
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(
    grpc::CallbackServerContext* ctx, const v1::SubmitJobRequest* request,
    v1::SubmitJobResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = User(auth_, ctx, "submit");
  if (!who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  if (!request->has_spec()) {
    reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(
        "spec: required; send the job's JobSpec")));
    return reactor;
  }
  controller_->Submit(
      scheduler::Submitter{who->name, who->groups, who->admin}, *request,
      [reactor, response](absl::StatusOr<v1::SubmitJobResponse> result) {
        FinishWith(reactor, std::move(result), response);
      });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(
    grpc::CallbackServerContext* ctx, const v1::GetJobRequest* request,
    v1::Job* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = User(auth_, ctx, "get job");
  if (!who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  auto job = controller_->GetJob(request->job_id());
  if (job.ok()) auth::RedactJobFor(*who, &*job);
  FinishWith(reactor, std::move(job), response);
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::ExplainJob(
    grpc::CallbackServerContext* ctx, const v1::ExplainJobRequest* request,
    v1::ExplainJobResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = User(auth_, ctx, "explain job");
  if (!who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  auto explained = controller_->ExplainJob(request->job_id());
  if (explained.ok()) auth::RedactJobFor(*who, explained->mutable_job());
  FinishWith(reactor, std::move(explained), response);
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(
    grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* request,
    v1::ListJobsResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = User(auth_, ctx, "list jobs");
  if (!who.ok()) {
    reactor->Finish(ToGrpcStatus(who.status()));
    return reactor;
  }
  auto jobs = controller_->ListJobs(*request);
  if (jobs.ok()) {
    for (v1::Job& job : *jobs->mutable_jobs()) auth::RedactJobFor(*who, &job);
  }
  FinishWith(reactor, std::move(jobs), response);
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(
    grpc::CallbackServerContext* ctx, const v1::CancelJobRequest* request,
    v1::CancelJobResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = User(auth_, ctx, "cancel");
  absl::Status allowed = who.status();
  if (allowed.ok()) {
    allowed = CheckOwner(controller_, *who, request->job_id(), "cancel");
  }
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  auth::Principal p = *who;
  controller_->Cancel(p.name, *request,
                      [reactor, response, p](absl::StatusOr<v1::Job> job) {
                        if (job.ok()) {
                          *response->mutable_job() = *job;
                          auth::RedactJobFor(p, response->mutable_job());
                        }
                        reactor->Finish(ToGrpcStatus(job.status()));
                      });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::SetJobPriority(
    grpc::CallbackServerContext* ctx, const v1::SetJobPriorityRequest* request,
    v1::Job* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = User(auth_, ctx, "set priority");
  absl::Status allowed = who.status();
  if (allowed.ok()) {
    allowed = auth::RequireAdmin(
        *who, absl::StrCat("set the priority of job ", request->job_id(),
                           " (users may lower theirs only by resubmitting)"));
  }
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  controller_->SetPriority(who->name, *request,
                           [reactor, response](absl::StatusOr<v1::Job> job) {
                             if (job.ok()) *response = *job;
                             reactor->Finish(ToGrpcStatus(job.status()));
                           });
  return reactor;
}

grpc::ServerWriteReactor<v1::JobEvent>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* request) {
  Controller* c = controller_;
  std::string id = request->job_id();
  // Anyone may follow a job's events; others see the reasons of its
  // pending states only (auth::RedactReason).
  auto who = User(auth_, ctx, "watch");
  absl::Status allowed = who.status();
  std::function<void()> release;
  if (allowed.ok()) allowed = TakeStream(who->name, &release);
  bool full = false;
  if (allowed.ok() && !id.empty()) {
    absl::StatusOr<v1::Job> job = c->GetJob(id);
    full = job.ok() && auth::OwnsOrAdmin(*who, job->user());
  }
  return FeedReactor<v1::JobEvent>::Start(
      c, id, request->after_seq(), /*follow=*/true,
      [c, id, allowed, full](int64_t after, std::vector<v1::JobEvent>* out,
                             bool* finished) {
        RETURN_IF_ERROR(allowed);
        if (id.empty()) {
          return absl::InvalidArgumentError("job_id: required; see xlctl list");
        }
        const size_t before = out->size();
        RETURN_IF_ERROR(c->ReadEvents(id, after, out, finished));
        if (!full) {
          for (size_t i = before; i < out->size(); ++i) {
            v1::JobEvent& e = (*out)[i];
            // Into PENDING from another state: a requeue, whose reason
            // quotes the ranks.
            auth::RedactReason(
                e.to_state(),
                e.from_state() != v1::PENDING &&
                    e.from_state() != v1::JOB_STATE_UNSPECIFIED,
                e.mutable_reason());
          }
        }
        return absl::OkStatus();
      },
      std::move(release));
}

grpc::ServerWriteReactor<v1::LogChunk>* JobServiceImpl::StreamLogs(
    grpc::CallbackServerContext* ctx, const v1::StreamLogsRequest* request) {
  Controller* c = controller_;
  std::string id = request->job_id();
  // Only the owner and admins read a job's output.
  auto who = User(auth_, ctx, "logs");
  absl::Status allowed = who.status();
  if (allowed.ok()) allowed = CheckOwner(c, *who, id, "logs");
  std::function<void()> release;
  if (allowed.ok()) allowed = TakeStream(who->name, &release);
  int rank = request->all_ranks() ? -1 : request->rank();
  int64_t job_num = 0;
  bool numeric = absl::SimpleAtoi(id, &job_num);
  return FeedReactor<v1::LogChunk>::Start(
      c, id, request->after_seq(), request->follow(),
      [c, id, rank, job_num, numeric, allowed](
          int64_t after, std::vector<v1::LogChunk>* out,
          bool* finished) -> absl::Status {
        RETURN_IF_ERROR(allowed);
        if (id.empty()) {
          return absl::InvalidArgumentError("job_id: required; see xlctl list");
        }
        // Whether the job had ended is read before the logs, so a job that
        // has ended has all its logs in what follows.
        RETURN_IF_ERROR(c->JobFinished(id, finished));
        if (!numeric) return absl::OkStatus();
        // A few chunks at a time: a reader that does not read holds at most
        // these here (agents send chunks of 64 KiB) plus gRPC's
        // flow-control window, however much output the job has.
        ASSIGN_OR_RETURN(*out, c->store()->ReadLogs(job_num, after, rank, 2));
        return absl::OkStatus();
      },
      std::move(release));
}

grpc::ServerUnaryReactor* JobServiceImpl::GetQueue(
    grpc::CallbackServerContext* ctx, const v1::GetQueueRequest* request,
    v1::GetQueueResponse* response) {
  (void)request;
  auto* reactor = ctx->DefaultReactor();
  absl::Status allowed = User(auth_, ctx, "queue").status();
  if (allowed.ok()) *response = controller_->GetQueue();
  reactor->Finish(ToGrpcStatus(allowed));
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJobMetrics(
    grpc::CallbackServerContext* ctx, const v1::GetJobMetricsRequest* request,
    v1::GetJobMetricsResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  // Training output, like logs: the owner's and admins' only.
  auto who = User(auth_, ctx, "metrics");
  absl::Status allowed = who.status();
  if (allowed.ok()) {
    allowed = CheckOwner(controller_, *who, request->job_id(), "metrics");
  }
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  FinishWith(reactor, controller_->GetJobMetrics(*request), response);
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::PlanResources(
    grpc::CallbackServerContext* ctx, const v1::PlanResourcesRequest* request,
    v1::Plan* response) {
  auto* reactor = ctx->DefaultReactor();
  absl::Status allowed = User(auth_, ctx, "plan").status();
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  FinishWith(reactor, controller_->PlanResources(request->model()), response);
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousServiceImpl::Put(
    grpc::CallbackServerContext* ctx, const v1::RendezvousPutRequest* request,
    v1::RendezvousPutResponse* response) {
  (void)response;
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(controller_->rendezvous()->Put(*request)));
  return reactor;
}

grpc::ServerUnaryReactor* RendezvousServiceImpl::Get(
    grpc::CallbackServerContext* ctx, const v1::RendezvousGetRequest* request,
    v1::RendezvousGetResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  // The call's deadline bounds the wait (a client that gave up holds no
  // waiter's place past it); none: infinite.
  const auto deadline = ctx->deadline();
  const absl::Duration left =
      deadline == std::chrono::system_clock::time_point::max()
          ? absl::InfiniteDuration()
          : absl::FromChrono(deadline - std::chrono::system_clock::now());
  controller_->rendezvous()->Get(
      *request,
      [reactor, response](absl::StatusOr<std::vector<std::string>> values) {
        if (values.ok()) {
          for (auto& v : *values) response->add_values(std::move(v));
        }
        reactor->Finish(ToGrpcStatus(values.status()));
      },
      left);
  return reactor;
}

}  // namespace xl::service
