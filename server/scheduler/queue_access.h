// Who may submit to a queue, and how high a priority they may ask for: the
// queue's users and groups ("*": everyone; none: everyone) and its
// max_priority (0 where unset) bind everyone but admins. Pure: data in, a
// status out; thread-compatible.
#ifndef XL_SERVER_SCHEDULER_QUEUE_ACCESS_H_
#define XL_SERVER_SCHEDULER_QUEUE_ACCESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "xl/v1/queue.pb.h"

namespace xl::scheduler {

// Who submits: the user, the groups their token names, and whether they
// are an admin (every caller is one on a scheduler without auth).
struct Submitter {
  std::string user;
  std::vector<std::string> groups;
  bool admin = false;
};

// The highest priority a user who is not an admin may ask for in `q`.
int32_t UserPriorityCap(const v1::QueueSpec& q);

// Whether `who` is admitted to `q` (admins always are).
bool Admits(const v1::QueueSpec& q, const Submitter& who);

// "everyone", or "users alice, bob and groups ml" (for messages and
// `xlctl queue list`).
std::string DescribeAdmission(const v1::QueueSpec& q);

// OK when `who` may submit a job of `priority` to `q`; PERMISSION_DENIED
// naming the queue, who it admits or its cap, and the fix.
absl::Status CheckQueueAccess(const v1::QueueSpec& q, const Submitter& who,
                              int32_t priority);

// Checks QueueSpec.users and .groups: at most 1000 entries each, each "*"
// or 1-64 of [A-Za-z0-9._@-], none twice. INVALID_ARGUMENT names the field.
absl::Status ValidateQueueAdmission(const v1::QueueSpec& q);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_QUEUE_ACCESS_H_
