#include "common/grpc_status.h"
#include "common/status.h"
#include "server/service/services.h"

namespace xl::service {
namespace {

// Identifies the caller and checks the rule; finishes the call and returns
// false when it may not go on.
bool Allowed(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* r,
             const auth::Authenticator* auth, bool admin, const char* what,
             auth::Principal* who) {
  auto id = auth->Identify(ctx);
  absl::Status ok = id.status();
  if (ok.ok()) {
    ok = admin ? auth::RequireAdmin(*id, what) : auth::RequireUser(*id, what);
  }
  if (!ok.ok()) {
    r->Finish(ToGrpcStatus(ok));
    return false;
  }
  *who = *id;
  return true;
}

template <typename T>
void Reply(grpc::ServerUnaryReactor* r, absl::StatusOr<T> result,
           T* response) {
  if (result.ok()) *response = std::move(*result);
  r->Finish(ToGrpcStatus(result.status()));
}

}  // namespace

grpc::ServerUnaryReactor* QueueServiceImpl::ListQueues(
    grpc::CallbackServerContext* ctx, const v1::ListQueuesRequest*,
    v1::ListQueuesResponse* response) {
  auto* r = ctx->DefaultReactor();
  auth::Principal who;
  if (!Allowed(ctx, r, auth_, false, "queues", &who)) return r;
  Reply(r, controller_->ListQueues(), response);
  return r;
}

grpc::ServerUnaryReactor* QueueServiceImpl::GetQueueSpec(
    grpc::CallbackServerContext* ctx, const v1::GetQueueSpecRequest* request,
    v1::Queue* response) {
  auto* r = ctx->DefaultReactor();
  auth::Principal who;
  if (!Allowed(ctx, r, auth_, false, "queue", &who)) return r;
  Reply(r, controller_->GetQueueSpec(request->name()), response);
  return r;
}

grpc::ServerUnaryReactor* QueueServiceImpl::PutQueue(
    grpc::CallbackServerContext* ctx, const v1::PutQueueRequest* request,
    v1::Queue* response) {
  auto* r = ctx->DefaultReactor();
  auth::Principal who;
  if (!Allowed(ctx, r, auth_, true, "change queues", &who)) return r;
  controller_->PutQueue(who.name, *request,
                        [r, response](absl::StatusOr<v1::Queue> q) {
                          Reply(r, std::move(q), response);
                        });
  return r;
}

grpc::ServerUnaryReactor* QueueServiceImpl::DeleteQueue(
    grpc::CallbackServerContext* ctx, const v1::DeleteQueueRequest* request,
    v1::DeleteQueueResponse*) {
  auto* r = ctx->DefaultReactor();
  auth::Principal who;
  if (!Allowed(ctx, r, auth_, true, "delete queues", &who)) return r;
  controller_->DeleteQueue(who.name, request->name(), [r](absl::Status st) {
    r->Finish(ToGrpcStatus(st));
  });
  return r;
}

grpc::ServerUnaryReactor* QueueServiceImpl::ListQueueChanges(
    grpc::CallbackServerContext* ctx,
    const v1::ListQueueChangesRequest* request,
    v1::ListQueueChangesResponse* response) {
  auto* r = ctx->DefaultReactor();
  auth::Principal who;
  if (!Allowed(ctx, r, auth_, false, "queue history", &who)) return r;
  Reply(r, controller_->ListQueueChanges(*request), response);
  return r;
}

grpc::ServerUnaryReactor* QueueServiceImpl::GetShares(
    grpc::CallbackServerContext* ctx, const v1::GetSharesRequest*,
    v1::GetSharesResponse* response) {
  auto* r = ctx->DefaultReactor();
  auth::Principal who;
  if (!Allowed(ctx, r, auth_, false, "shares", &who)) return r;
  *response = controller_->GetShares();
  r->Finish(grpc::Status::OK);
  return r;
}

}  // namespace xl::service
