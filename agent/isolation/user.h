// The account a rank runs as: looked up in the node's user database
// (getpwnam_r, getgrouplist), so the same name may have different ids on
// different nodes. Stateless; safe from any thread.
#ifndef XL_AGENT_ISOLATION_USER_H_
#define XL_AGENT_ISOLATION_USER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace xl::agent {

// Whose account the ranks run as (xl-agent --run-as).
enum class RunAs {
  // The submitter's (StartRanks.user): each job's files and processes are
  // its own user's.
  kSubmitter,
  // The agent's own, for single-user development clusters.
  kAgent,
};

struct RankUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  // Supplementary groups, the primary one included.
  std::vector<gid_t> groups;
  std::string home;
  std::string shell;
};

// Looks up `name` in the node's user database. NOT_FOUND with a message that
// names the user and says to create the account or submit as an existing
// user; INVALID_ARGUMENT for an empty name; INTERNAL when the database
// cannot be read.
absl::StatusOr<RankUser> LookUpUser(const std::string& name);

// The account of the agent process itself (its effective uid and gid).
absl::StatusOr<RankUser> AgentUser();

// "submitter" or "agent".
const char* RunAsName(RunAs run_as);

}  // namespace xl::agent

#endif  // XL_AGENT_ISOLATION_USER_H_
