// The TCP transport of canonical raft 0.15 (raft_uv_tcp), made fit for the
// scheduler's replicas:
// - Nagle's algorithm off on every connection it makes or accepts (raft
//   0.15 leaves it on: a small append waits for the peer's delayed ACK,
//   about 40 ms);
// - replicas by name: raft 0.15 takes IPv4 numbers only, so a name is
//   looked up at every connect (a replica back at another address, a
//   rescheduled pod, is found).
// Runs on raft's loop thread, as the transport it wraps.
#ifndef XL_SERVER_REPLICA_RAFT_TRANSPORT_H_
#define XL_SERVER_REPLICA_RAFT_TRANSPORT_H_

#include <string>
#include <type_traits>

// raft.h declares no extern "C" of its own.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

namespace xl::replica {

// raft_uv_tcp_init(&t, ...) first, then WrapTransport(): `t` comes first,
// so a pointer to it is one to the whole (raft_uv keeps t.data for
// itself).
struct ReplicaTransport {
  struct raft_uv_transport t {};
  int (*listen)(struct raft_uv_transport*, raft_uv_accept_cb) = nullptr;
  int (*connect)(struct raft_uv_transport*, struct raft_uv_connect*, raft_id,
                 const char*, raft_uv_connect_cb) = nullptr;
  raft_uv_accept_cb accept = nullptr;
};

static_assert(std::is_standard_layout_v<ReplicaTransport>,
              "a pointer to t must be one to the whole");

// Wraps the transport initialized in w->t (see above).
void WrapTransport(ReplicaTransport* w);

// "host:port" with host a name as "a.b.c.d:port", looked up now; unchanged
// when it is a number or cannot be looked up.
std::string Resolved(const char* address);

}  // namespace xl::replica

#endif  // XL_SERVER_REPLICA_RAFT_TRANSPORT_H_
