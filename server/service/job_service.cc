#include "common/status.h"
#include "server/service/feed_reactor.h"
#include "server/service/identity.h"
#include "server/service/services.h"

namespace xl::service {
namespace {

template <typename T>
void FinishWith(grpc::ServerUnaryReactor* reactor, absl::StatusOr<T> result,
                T* response) {
  if (result.ok()) *response = std::move(*result);
  reactor->Finish(ToGrpcStatus(result.status()));
}

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(
    grpc::CallbackServerContext* ctx, const v1::SubmitJobRequest* request,
    v1::SubmitJobResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  if (!request->has_spec()) {
    reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(
        "spec: required; send the job's JobSpec")));
    return reactor;
  }
  controller_->Submit(
      CallerUser(ctx), *request,
      [reactor, response](absl::StatusOr<v1::SubmitJobResponse> result) {
        FinishWith(reactor, std::move(result), response);
      });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(
    grpc::CallbackServerContext* ctx, const v1::GetJobRequest* request,
    v1::Job* response) {
  auto* reactor = ctx->DefaultReactor();
  FinishWith(reactor, controller_->GetJob(request->job_id()), response);
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(
    grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* request,
    v1::ListJobsResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  FinishWith(reactor, controller_->ListJobs(*request), response);
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(
    grpc::CallbackServerContext* ctx, const v1::CancelJobRequest* request,
    v1::CancelJobResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  controller_->Cancel(CallerUser(ctx), *request,
                      [reactor, response](absl::StatusOr<v1::Job> job) {
                        if (job.ok()) *response->mutable_job() = *job;
                        reactor->Finish(ToGrpcStatus(job.status()));
                      });
  return reactor;
}

grpc::ServerWriteReactor<v1::JobEvent>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* request) {
  (void)ctx;
  Controller* c = controller_;
  std::string id = request->job_id();
  return FeedReactor<v1::JobEvent>::Start(
      c, id, request->after_seq(), /*follow=*/true,
      [c, id](int64_t after, std::vector<v1::JobEvent>* out, bool* finished) {
        if (id.empty()) {
          return absl::InvalidArgumentError("job_id: required; see xlctl list");
        }
        return c->ReadEvents(id, after, out, finished);
      });
}

grpc::ServerWriteReactor<v1::LogChunk>* JobServiceImpl::StreamLogs(
    grpc::CallbackServerContext* ctx, const v1::StreamLogsRequest* request) {
  (void)ctx;
  Controller* c = controller_;
  std::string id = request->job_id();
  int rank = request->all_ranks() ? -1 : request->rank();
  int64_t job_num = 0;
  bool numeric = absl::SimpleAtoi(id, &job_num);
  return FeedReactor<v1::LogChunk>::Start(
      c, id, request->after_seq(), request->follow(),
      [c, id, rank, job_num, numeric](int64_t after,
                                      std::vector<v1::LogChunk>* out,
                                      bool* finished) -> absl::Status {
        if (id.empty()) {
          return absl::InvalidArgumentError("job_id: required; see xlctl list");
        }
        // Whether the job had ended is read before the logs, so a job that
        // has ended has all its logs in what follows.
        RETURN_IF_ERROR(c->JobFinished(id, finished));
        if (!numeric) return absl::OkStatus();
        ASSIGN_OR_RETURN(*out, c->store()->ReadLogs(job_num, after, rank, 256));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetQueue(
    grpc::CallbackServerContext* ctx, const v1::GetQueueRequest* request,
    v1::GetQueueResponse* response) {
  (void)request;
  auto* reactor = ctx->DefaultReactor();
  *response = controller_->GetQueue();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJobMetrics(
    grpc::CallbackServerContext* ctx, const v1::GetJobMetricsRequest* request,
    v1::GetJobMetricsResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  FinishWith(reactor, controller_->GetJobMetrics(*request), response);
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::PlanResources(
    grpc::CallbackServerContext* ctx, const v1::PlanResourcesRequest* request,
    v1::Plan* response) {
  auto* reactor = ctx->DefaultReactor();
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
  controller_->rendezvous()->Get(
      *request,
      [reactor, response](absl::StatusOr<std::vector<std::string>> values) {
        if (values.ok()) {
          for (auto& v : *values) response->add_values(std::move(v));
        }
        reactor->Finish(ToGrpcStatus(values.status()));
      });
  return reactor;
}

}  // namespace xl::service
