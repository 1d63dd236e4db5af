#include "common/status.h"
#include "server/service/identity.h"
#include "server/service/services.h"

#include "absl/strings/str_cat.h"

namespace xl::service {

grpc::ServerUnaryReactor* NodeServiceImpl::ListNodes(
    grpc::CallbackServerContext* ctx, const v1::ListNodesRequest* request,
    v1::ListNodesResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto nodes = controller_->ListNodes(*request);
  if (nodes.ok()) *response = std::move(*nodes);
  reactor->Finish(ToGrpcStatus(nodes.status()));
  return reactor;
}

grpc::ServerUnaryReactor* NodeServiceImpl::GetNode(
    grpc::CallbackServerContext* ctx, const v1::GetNodeRequest* request,
    v1::Node* response) {
  auto* reactor = ctx->DefaultReactor();
  auto node = controller_->GetNode(request->name());
  if (node.ok()) *response = *node;
  reactor->Finish(ToGrpcStatus(node.status()));
  return reactor;
}

grpc::ServerUnaryReactor* NodeServiceImpl::DrainNode(
    grpc::CallbackServerContext* ctx, const v1::DrainNodeRequest* request,
    v1::Node* response) {
  auto* reactor = ctx->DefaultReactor();
  std::string reason = absl::StrCat("by ", CallerUser(ctx));
  if (!request->reason().empty()) absl::StrAppend(&reason, ": ", request->reason());
  controller_->SetDrained(request->name(), true, reason,
                          [reactor, response](absl::StatusOr<v1::Node> node) {
                            if (node.ok()) *response = *node;
                            reactor->Finish(ToGrpcStatus(node.status()));
                          });
  return reactor;
}

grpc::ServerUnaryReactor* NodeServiceImpl::ResumeNode(
    grpc::CallbackServerContext* ctx, const v1::ResumeNodeRequest* request,
    v1::Node* response) {
  auto* reactor = ctx->DefaultReactor();
  controller_->SetDrained(request->name(), false, "",
                          [reactor, response](absl::StatusOr<v1::Node> node) {
                            if (node.ok()) *response = *node;
                            reactor->Finish(ToGrpcStatus(node.status()));
                          });
  return reactor;
}

}  // namespace xl::service
