// The gRPC faces of the Controller: JobService, NodeService, AgentService,
// RendezvousService and AuthService, all on the callback API. Each method
// identifies the caller (auth::Authenticator), applies the permission rules
// (auth/authenticator.h), converts, calls the Controller, and converts back;
// no state lives here. Thread-safe.
#ifndef XL_SERVER_SERVICE_SERVICES_H_
#define XL_SERVER_SERVICE_SERVICES_H_

#include "server/auth/authenticator.h"
#include "server/control/controller.h"
#include "server/service/stream_limits.h"
#include "xl/v1/auth.grpc.pb.h"
#include "xl/v1/agent.grpc.pb.h"
#include "xl/v1/rendezvous.grpc.pb.h"
#include "xl/v1/queue.grpc.pb.h"
#include "xl/v1/scheduler.grpc.pb.h"

namespace xl::service {

using control::Controller;

class JobServiceImpl : public v1::JobService::CallbackService {
 public:
  // `streams` bounds WatchJob and StreamLogs; all three outlive this.
  JobServiceImpl(Controller* controller, const auth::Authenticator* auth,
                 StreamLimits* streams)
      : controller_(controller), auth_(auth), streams_(streams) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* request,
                                      v1::SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* request,
                                   v1::Job* response) override;
  grpc::ServerUnaryReactor* ExplainJob(grpc::CallbackServerContext* ctx,
                                       const v1::ExplainJobRequest* request,
                                       v1::ExplainJobResponse* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const v1::CancelJobRequest* request,
                                      v1::CancelJobResponse* response) override;
  grpc::ServerUnaryReactor* SetJobPriority(
      grpc::CallbackServerContext* ctx,
      const v1::SetJobPriorityRequest* request, v1::Job* response) override;
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
  // A slot for one of `user`'s streams and the call that gives it back.
  absl::Status TakeStream(const std::string& user,
                          std::function<void()>* release);

  Controller* const controller_;
  const auth::Authenticator* const auth_;
  StreamLimits* const streams_;
};

class NodeServiceImpl : public v1::NodeService::CallbackService {
 public:
  NodeServiceImpl(Controller* controller, const auth::Authenticator* auth)
      : controller_(controller), auth_(auth) {}

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
  const auth::Authenticator* const auth_;
};

// Reads for every user; changes for admins.
class QueueServiceImpl : public v1::QueueService::CallbackService {
 public:
  QueueServiceImpl(Controller* controller, const auth::Authenticator* auth)
      : controller_(controller), auth_(auth) {}

  grpc::ServerUnaryReactor* ListQueues(grpc::CallbackServerContext* ctx,
                                       const v1::ListQueuesRequest* request,
                                       v1::ListQueuesResponse* response) override;
  grpc::ServerUnaryReactor* GetQueueSpec(grpc::CallbackServerContext* ctx,
                                         const v1::GetQueueSpecRequest* request,
                                         v1::Queue* response) override;
  grpc::ServerUnaryReactor* PutQueue(grpc::CallbackServerContext* ctx,
                                     const v1::PutQueueRequest* request,
                                     v1::Queue* response) override;
  grpc::ServerUnaryReactor* DeleteQueue(
      grpc::CallbackServerContext* ctx, const v1::DeleteQueueRequest* request,
      v1::DeleteQueueResponse* response) override;
  grpc::ServerUnaryReactor* ListQueueChanges(
      grpc::CallbackServerContext* ctx,
      const v1::ListQueueChangesRequest* request,
      v1::ListQueueChangesResponse* response) override;
  grpc::ServerUnaryReactor* GetShares(grpc::CallbackServerContext* ctx,
                                      const v1::GetSharesRequest* request,
                                      v1::GetSharesResponse* response) override;

 private:
  Controller* const controller_;
  const auth::Authenticator* const auth_;
};

class AgentServiceImpl : public v1::AgentService::CallbackService {
 public:
  // `leader_term`: the Raft term this replica leads in (0: a scheduler
  // that is not replicated), on every RegisterAck, StartRanks and StopJob.
  AgentServiceImpl(Controller* controller, const auth::Authenticator* auth,
                   uint64_t leader_term = 0)
      : controller_(controller), auth_(auth), term_(leader_term) {}

  grpc::ServerBidiReactor<v1::AgentMessage, v1::SchedulerMessage>* Connect(
      grpc::CallbackServerContext* ctx) override;

 private:
  Controller* const controller_;
  const auth::Authenticator* const auth_;
  const uint64_t term_;
};

class RendezvousServiceImpl : public v1::RendezvousService::CallbackService {
 public:
  // Needs no caller identity: every call carries the attempt's token.
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

// Identity and credentials. Token management is for admins; JoinNode signs
// node certificates with the CA given (none: join tokens are refused).
struct NodeCa {
  std::string cert_pem;
  std::string key_pem;
  absl::Duration validity = absl::Hours(24 * 365);
};

class AuthServiceImpl : public v1::AuthService::CallbackService {
 public:
  AuthServiceImpl(Controller* controller, const auth::Authenticator* auth,
                  NodeCa ca)
      : controller_(controller), auth_(auth), ca_(std::move(ca)) {}

  grpc::ServerUnaryReactor* WhoAmI(grpc::CallbackServerContext* ctx,
                                   const v1::WhoAmIRequest* request,
                                   v1::WhoAmIResponse* response) override;
  grpc::ServerUnaryReactor* CreateToken(
      grpc::CallbackServerContext* ctx, const v1::CreateTokenRequest* request,
      v1::CreateTokenResponse* response) override;
  grpc::ServerUnaryReactor* ListTokens(
      grpc::CallbackServerContext* ctx, const v1::ListTokensRequest* request,
      v1::ListTokensResponse* response) override;
  grpc::ServerUnaryReactor* RevokeToken(
      grpc::CallbackServerContext* ctx, const v1::RevokeTokenRequest* request,
      v1::RevokeTokenResponse* response) override;
  grpc::ServerUnaryReactor* JoinNode(grpc::CallbackServerContext* ctx,
                                     const v1::JoinNodeRequest* request,
                                     v1::JoinNodeResponse* response) override;

 private:
  Controller* const controller_;
  const auth::Authenticator* const auth_;
  const NodeCa ca_;
};

}  // namespace xl::service

#endif  // XL_SERVER_SERVICE_SERVICES_H_
