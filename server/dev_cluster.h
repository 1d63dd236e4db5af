// DevCluster: the one-machine cluster of `xl-scheduler --dev`: a throw-away
// directory for the database and the agents' work, and N local xl-agent
// processes started with posix_spawn (an argv list, no shell). Not
// thread-safe; owned by main.
#ifndef XL_SERVER_DEV_CLUSTER_H_
#define XL_SERVER_DEV_CLUSTER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace xl::server {

class DevCluster {
 public:
  // Makes a fresh directory under $TMPDIR (or /tmp).
  static absl::StatusOr<DevCluster> Create(bool keep);
  DevCluster(DevCluster&&) = default;
  ~DevCluster();

  const std::string& dir() const { return dir_; }
  std::string db_path() const { return dir_ + "/xl.db"; }

  // Makes the throw-away credentials of a secure dev cluster under dir():
  // a CA (ca.crt, ca.key), a server certificate for 127.0.0.1 and
  // localhost, a node certificate for each of `agents` agents (dev-<i>),
  // and an admin token for `user` in the database. StartAgents then gives
  // the agents their certificates. Returns the token.
  absl::StatusOr<std::string> MakeCredentials(int agents,
                                              const std::string& user);
  std::string ca_cert() const { return dir_ + "/tls/ca.crt"; }
  std::string ca_key() const { return dir_ + "/tls/ca.key"; }
  std::string server_cert() const { return dir_ + "/tls/server.crt"; }
  std::string server_key() const { return dir_ + "/tls/server.key"; }
  // Writes `path` (mode 0600) with the shell lines that point xlctl at this
  // cluster: XL_SERVER, and with credentials XL_TLS_CA and XL_TOKEN.
  absl::Status WriteClientEnv(const std::string& path,
                              const std::string& server,
                              const std::string& token) const;

  // Starts `count` agents named dev-0.. that connect to `scheduler`. The
  // i-th agent uses inventories[i] when given (else real discovery).
  absl::Status StartAgents(const std::string& agent_binary,
                           const std::string& scheduler, int count,
                           const std::vector<std::string>& inventories);
  // SIGTERM to every agent, SIGKILL to those still there after `grace_s`.
  void StopAgents(int grace_s);

  // `xl-scheduler --dev --replicas N`: starts N replicas of `scheduler`
  // (this binary) on `host`, each with a copy of db_path() (so that the
  // admin token is in every one), this cluster's certificates, and `extra`
  // flags; API ports from `first_port` up (0: free ones), Raft ports free
  // ones. Returns every replica's API address, comma-separated (what
  // XL_SERVER and the agents take).
  absl::StatusOr<std::string> StartReplicas(const std::string& scheduler,
                                            int count, const std::string& host,
                                            int first_port,
                                            const std::vector<std::string>& extra);
  // Starts again (after a second) a replica whose process ended: one
  // killed to try failover rejoins as a follower. Call it now and then.
  void SuperviseReplicas();
  // SIGTERM to every replica, SIGKILL after `grace_s`.
  void StopReplicas(int grace_s);

 private:
  DevCluster() = default;
  std::string dir_;
  bool keep_ = false;
  bool tls_ = false;
  std::vector<pid_t> agents_;
  struct Replica {
    std::vector<std::string> argv;
    pid_t pid = -1;
    absl::Time ended = absl::InfinitePast();
  };
  std::vector<Replica> replicas_;
  absl::Status Spawn(Replica* r);
};

// Finds xl-agent: next to this binary, in ../agent (the build tree), or in
// PATH. NOT_FOUND says how to point at it.
absl::StatusOr<std::string> FindAgentBinary();

}  // namespace xl::server

#endif  // XL_SERVER_DEV_CLUSTER_H_
