// Sizes the scheduler and the agents agree on, so that nothing the
// scheduler accepts can become a message an agent refuses (a job whose
// StartRanks an agent cannot take would be requeued for ever).
#ifndef XL_COMMON_LIMITS_H_
#define XL_COMMON_LIMITS_H_

#include <cstdint>

namespace xl {

// The most a message from the scheduler to an agent may weigh: the
// agent's receive limit, and the scheduler's send limit.
inline constexpr int kMaxSchedulerToAgentBytes = 16 << 20;

// What a job spec's command, env and secret_env may hold together: all of
// it goes to every node in StartRanks, with the scheduler's variables for
// up to 1,024 ranks beside it, well within kMaxSchedulerToAgentBytes.
inline constexpr int64_t kMaxLaunchBytes = int64_t{1} << 20;

// The most keys one rendezvous Get may wait on: the scheduler refuses more,
// and workers ask for larger sets in pieces of this size.
inline constexpr int kMaxRendezvousKeysPerGet = 1024;

// What one stored row of a job's logs or metrics costs the database beyond
// its data (the row, its key, two index entries), counted against the job's
// output budget: a rank that writes "x\n" every millisecond stores a row
// per chunk, and counted by its data alone would weigh 2 bytes a row.
inline constexpr int64_t kStoredRowOverheadBytes = 96;

}  // namespace xl

#endif  // XL_COMMON_LIMITS_H_
