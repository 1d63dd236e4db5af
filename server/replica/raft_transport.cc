#include "server/replica/raft_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <uv.h>

#include "absl/strings/str_cat.h"

namespace xl::replica {
namespace {

struct NoDelayConnect {
  struct raft_uv_connect req {};
  struct raft_uv_connect* theirs = nullptr;
  raft_uv_connect_cb cb = nullptr;
};

void NoDelay(struct uv_stream_s* stream) {
  if (stream != nullptr && stream->type == UV_TCP) {
    uv_tcp_nodelay(reinterpret_cast<uv_tcp_t*>(stream), 1);
  }
}

}  // namespace

// "host:port" with host a name (raft 0.15 takes IPv4 numbers only) as
// "a.b.c.d:port", looked up now: a replica's name stays in the log's
// configuration and is looked up again at every connect, so that a replica
// that comes back with another address (a rescheduled pod) is found. The
// address unchanged when it is a number or cannot be looked up.
std::string Resolved(const char* address) {
  const std::string a = address;
  const size_t colon = a.rfind(':');
  if (colon == std::string::npos) return a;
  const std::string host = a.substr(0, colon);
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return a;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 ||
      found == nullptr) {
    return a;
  }
  char ip[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr,
            ip, sizeof(ip));
  freeaddrinfo(found);
  return absl::StrCat(ip, a.substr(colon));
}

void WrapTransport(ReplicaTransport* w) {
  w->listen = w->t.listen;
  w->connect = w->t.connect;
  w->t.listen = [](struct raft_uv_transport* t, raft_uv_accept_cb cb) {
    auto* w = reinterpret_cast<ReplicaTransport*>(t);
    w->accept = cb;
    return w->listen(t, [](struct raft_uv_transport* t, raft_id id,
                           const char* address, struct uv_stream_s* stream) {
      NoDelay(stream);
      reinterpret_cast<ReplicaTransport*>(t)->accept(t, id, address, stream);
    });
  };
  w->t.connect = [](struct raft_uv_transport* t, struct raft_uv_connect* req,
                    raft_id id, const char* address, raft_uv_connect_cb cb) {
    auto* w = reinterpret_cast<ReplicaTransport*>(t);
    auto* c = new NoDelayConnect;
    c->theirs = req;
    c->cb = cb;
    c->req.data = c;
    // A blocking lookup on the loop thread: names of the replicas, which a
    // local resolver (or /etc/hosts) answers at once.
    const std::string ip = Resolved(address);
    const int rv = w->connect(t, &c->req, id, ip.c_str(),
                              [](struct raft_uv_connect* req,
                                 struct uv_stream_s* stream, int status) {
                                auto* c =
                                    static_cast<NoDelayConnect*>(req->data);
                                if (status == 0) NoDelay(stream);
                                c->cb(c->theirs, stream, status);
                                delete c;
                              });
    if (rv != 0) delete c;
    return rv;
  };
}

}  // namespace xl::replica
