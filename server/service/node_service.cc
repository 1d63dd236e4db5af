#include "common/grpc_status.h"
#include "common/status.h"
#include "server/service/services.h"

#include "absl/strings/str_cat.h"

namespace xl::service {

grpc::ServerUnaryReactor* NodeServiceImpl::ListNodes(
    grpc::CallbackServerContext* ctx, const v1::ListNodesRequest* request,
    v1::ListNodesResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = auth_->Identify(ctx);
  absl::Status allowed = who.status();
  if (allowed.ok()) allowed = auth::RequireUser(*who, "nodes");
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  auto nodes = controller_->ListNodes(*request);
  if (nodes.ok()) {
    *response = std::move(*nodes);
    response->set_security_warning(auth_->warning());
  }
  reactor->Finish(ToGrpcStatus(nodes.status()));
  return reactor;
}

grpc::ServerUnaryReactor* NodeServiceImpl::GetNode(
    grpc::CallbackServerContext* ctx, const v1::GetNodeRequest* request,
    v1::Node* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = auth_->Identify(ctx);
  absl::Status allowed = who.status();
  if (allowed.ok()) allowed = auth::RequireUser(*who, "node");
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  auto node = controller_->GetNode(request->name());
  if (node.ok()) *response = *node;
  reactor->Finish(ToGrpcStatus(node.status()));
  return reactor;
}

grpc::ServerUnaryReactor* NodeServiceImpl::DrainNode(
    grpc::CallbackServerContext* ctx, const v1::DrainNodeRequest* request,
    v1::Node* response) {
  auto* reactor = ctx->DefaultReactor();
  auto who = auth_->Identify(ctx);
  absl::Status allowed = who.status();
  if (allowed.ok()) allowed = auth::RequireAdmin(*who, "drain");
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  std::string reason = absl::StrCat("by ", who->name);
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
  auto who = auth_->Identify(ctx);
  absl::Status allowed = who.status();
  if (allowed.ok()) allowed = auth::RequireAdmin(*who, "resume");
  if (!allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  controller_->SetDrained(request->name(), false, "",
                          [reactor, response](absl::StatusOr<v1::Node> node) {
                            if (node.ok()) *response = *node;
                            reactor->Finish(ToGrpcStatus(node.status()));
                          });
  return reactor;
}

}  // namespace xl::service
