// The gRPC faces of the Controller: JobService, NodeService and
// AgentService, all on the callback API. Each method converts, calls the
// Controller, and converts back; no state lives here. Thread-safe.
#ifndef XL_SERVER_SERVICE_SERVICES_H_
#define XL_SERVER_SERVICE_SERVICES_H_

#include "server/control/controller.h"
#include "xl/v1/agent.grpc.pb.h"
#include "xl/v1/rendezvous.grpc.pb.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace xl::service {

using control::Controller;

class JobServiceImpl : public v1::JobService::CallbackService {
 public:
  explicit JobServiceImpl(Controller* controller) : controller_(controller) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* request,
                                      v1::SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* request,
                                   v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const v1::CancelJobRequest* request,
                                      v1::CancelJobResponse* response) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(
      grpc::CallbackServerContext* ctx,
      const v1::WatchJobRequest* request) override;
  grpc::ServerWriteReactor<v1::LogChunk>* StreamLogs(
      grpc::CallbackServerContext* ctx,
      const v1::StreamLogsRequest* request) override;
  grpc::ServerUnaryReactor* GetQueue(grpc::CallbackServerContext* ctx,
                                     const v1::GetQueueRequest* request,
                                     v1::GetQueueResponse* response) override;
  grpc::ServerUnaryReactor* PlanResources(
      grpc::CallbackServerContext* ctx, const v1::PlanResourcesRequest* request,
      v1::Plan* response) override;
  grpc::ServerUnaryReactor* GetJobMetrics(
      grpc::CallbackServerContext* ctx, const v1::GetJobMetricsRequest* request,
      v1::GetJobMetricsResponse* response) override;

 private:
  Controller* const controller_;
};

class NodeServiceImpl : public v1::NodeService::CallbackService {
 public:
  explicit NodeServiceImpl(Controller* controller) : controller_(controller) {}

  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx,
                                      const v1::ListNodesRequest* request,
                                      v1::ListNodesResponse* response) override;
  grpc::ServerUnaryReactor* GetNode(grpc::CallbackServerContext* ctx,
                                    const v1::GetNodeRequest* request,
                                    v1::Node* response) override;
  grpc::ServerUnaryReactor* DrainNode(grpc::CallbackServerContext* ctx,
                                      const v1::DrainNodeRequest* request,
                                      v1::Node* response) override;
  grpc::ServerUnaryReactor* ResumeNode(grpc::CallbackServerContext* ctx,
                                       const v1::ResumeNodeRequest* request,
                                       v1::Node* response) override;

 private:
  Controller* const controller_;
};

class AgentServiceImpl : public v1::AgentService::CallbackService {
 public:
  explicit AgentServiceImpl(Controller* controller) : controller_(controller) {}

  grpc::ServerBidiReactor<v1::AgentMessage, v1::SchedulerMessage>* Connect(
      grpc::CallbackServerContext* ctx) override;

 private:
  Controller* const controller_;
};

class RendezvousServiceImpl : public v1::RendezvousService::CallbackService {
 public:
  explicit RendezvousServiceImpl(Controller* controller)
      : controller_(controller) {}

  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* ctx,
                                const v1::RendezvousPutRequest* request,
                                v1::RendezvousPutResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const v1::RendezvousGetRequest* request,
                                v1::RendezvousGetResponse* response) override;

 private:
  Controller* const controller_;
};

}  // namespace xl::service

#endif  // XL_SERVER_SERVICE_SERVICES_H_
