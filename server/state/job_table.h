// JobTable: every job the scheduler keeps in memory, the transitions a job's
// state may take, and the indexes the control loop needs (pending in policy
// order, active, idempotency keys, equal resource requests shared). A record
// holds the working state, which runs ahead of the disk while its write is in
// flight, and the last committed version, which is all that readers see.
// In-memory model: no threads, no I/O; thread-compatible (the controller's
// mutex guards it).
#ifndef XL_SERVER_STATE_JOB_TABLE_H_
#define XL_SERVER_STATE_JOB_TABLE_H_

#include <cstdint>
#include <algorithm>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/scheduler/placement.h"
#include "xl/v1/agent.pb.h"
#include "xl/v1/job.pb.h"

namespace xl::state {

struct JobRecord {
  int64_t id = 0;
  v1::Job job;  // working state
  // The last version known to be on disk; what GetJob and ListJobs show.
  std::shared_ptr<const v1::Job> committed;
  std::vector<v1::JobEvent> events;
  int64_t committed_event_seq = 0;
  // The request, shared with every job whose request is equal.
  std::shared_ptr<const v1::ResourceRequest> request;
  // Statuses of the current attempt's ranks seen so far, and how many of
  // them exited 0.
  std::map<int, v1::RankStatus> ranks;
  int ranks_succeeded = 0;
  // The current attempt is being stopped; its rank exits change nothing.
  bool stopping = false;
  // XL_RENDEZVOUS_TOKEN of the current attempt.
  std::string token;
  // Monotonic: when the attempt started (time limits), when the job may
  // next start (after a lost node's lease has run out), when metrics were
  // last stored.
  absl::Time start_mono = absl::InfinitePast();
  absl::Time eligible_mono = absl::InfinitePast();
  absl::Time metrics_stored_mono = absl::InfinitePast();
  // Output stored for the job (its budget, retention by size), and whether
  // it went past its budget (said once in its events).
  int64_t log_bytes = 0;
  int64_t metrics_bytes = 0;
  bool output_trimmed = false;
  // Bytes asked of trims not yet committed (counted as gone already).
  int64_t trim_in_flight = 0;
  // Rank 0's latest metrics point not stored yet (at most one is stored a
  // second; the latest is stored when its second is up or the job ends).
  std::shared_ptr<const v1::TrainMetrics> metrics_unstored;
  // Output of attempt log_ends_attempt stored so far: (rank, stream) -> the
  // highest LogChunk.end_offset.
  int32_t log_ends_attempt = 0;
  std::map<std::pair<int32_t, int32_t>, int64_t> log_ends;
  // Exit statuses of the current attempt waiting for the output they say
  // was written before them (RankStatus.stdout_bytes, stderr_bytes) to be
  // stored, in arrival order (acted on in that order, so the rank that
  // failed first is the one blamed): the node they came from, and until
  // when (monotonic) they wait.
  struct ParkedExit {
    std::string node;
    v1::RankStatus status;
    absl::Time until;
  };
  // A list: a deque allocates on construction, for every job (and they
  // are rare).
  std::list<ParkedExit> parked_exits;
  // The job as the scheduling core sees it, built once (what it asks for
  // never changes); a pass copies it.
  scheduler::JobRequest as_request;
  // After an attempt failed on a node, the next avoids it for a while (its
  // request with that node excluded), then may go anywhere again.
  std::shared_ptr<const v1::ResourceRequest> avoiding;
  // Its request without max_switches, used once it has waited
  // max_switches_wait.
  std::shared_ptr<const v1::ResourceRequest> relaxed;
  absl::Time avoid_until_mono = absl::InfinitePast();
  // Where rank 0 of its last attempt ran (kept there again if it can be).
  std::string last_first_node;
  // An elastic job restarting after a resize: its request with min_nodes
  // raised to the nodes it holds, while it waits for its own old ranks.
  std::shared_ptr<const v1::ResourceRequest> restart_request;
};

class JobTable {
 public:
  // May a job go from `from` to `to`? (PENDING -> SCHEDULED -> RUNNING ->
  // SUCCEEDED | FAILED | CANCELLED, requeue back to PENDING, cancel and fail
  // from any live state; nothing leaves a final state.)
  static bool Allowed(v1::JobState from, v1::JobState to);
  static bool IsActive(v1::JobState s) {
    return s == v1::SCHEDULED || s == v1::RUNNING;
  }
  static bool IsTerminal(v1::JobState s) {
    return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
  }
  static int64_t ParseId(const std::string& id);

  JobRecord* Find(int64_t id);
  JobRecord* Find(const std::string& id) { return Find(ParseId(id)); }
  const JobRecord* Find(int64_t id) const {
    return const_cast<JobTable*>(this)->Find(id);
  }
  const JobRecord* Find(const std::string& id) const {
    return Find(ParseId(id));
  }
  // Adds a record (its id set) and indexes it by state and key.
  JobRecord& Insert(JobRecord rec);
  // Forgets a finished job (retention).
  void Erase(int64_t id);

  // Moves the job to `to`, records the event (returned; not yet committed)
  // and keeps the indexes. FAILED_PRECONDITION for a transition not
  // Allowed (nothing changes then).
  absl::StatusOr<v1::JobEvent> Transition(JobRecord* rec, v1::JobState to,
                                          const std::string& reason,
                                          absl::Time now_wall);
  // Gives the job another priority, keeping the pending order (keyed by
  // priority) right.
  void SetPriority(JobRecord* rec, int32_t priority);
  // Records an event that changes no state (from_state == to_state): a
  // new priority, output dropped past the job's budget. Returned; not yet
  // committed.
  v1::JobEvent Note(JobRecord* rec, const std::string& reason,
                    absl::Time now_wall);

  // One shared object per distinct request.
  std::shared_ptr<const v1::ResourceRequest> Intern(
      const v1::ResourceRequest& request);

  int64_t next_id() const { return next_id_; }
  // Ids up to `id` were given before (and may have been deleted since).
  void ReserveIds(int64_t id) { next_id_ = std::max(next_id_, id + 1); }
  int64_t TakeId() { return next_id_++; }
  std::map<int64_t, JobRecord>& all() { return jobs_; }
  // PENDING jobs in policy order: (-priority, id) -> the job.
  const std::map<std::pair<int, int64_t>, JobRecord*>& pending() const {
    return pending_;
  }
  // SCHEDULED and RUNNING jobs.
  const std::set<int64_t>& active() const { return active_; }
  // Idempotency key -> job id, including submits not yet committed.
  // Idempotency keys are the caller's: the same key from two users names
  // two jobs. ScopedKey(user, key) -> job id.
  static std::string ScopedKey(const std::string& user,
                               const std::string& key) {
    return user + '\x1f' + key;
  }
  std::map<std::string, int64_t>& keys() { return keys_; }
  // PENDING jobs of `user`.
  int64_t PendingOf(const std::string& user) const {
    auto it = pending_by_user_.find(user);
    return it == pending_by_user_.end() ? 0 : it->second;
  }
  // Bytes of the specs of `user`'s PENDING jobs (SpecBytes).
  int64_t PendingBytesOf(const std::string& user) const {
    auto it = pending_bytes_by_user_.find(user);
    return it == pending_bytes_by_user_.end() ? 0 : it->second;
  }
  // What a job's spec weighs in the scheduler's memory and database.
  static int64_t SpecBytes(const v1::JobSpec& spec) {
    return static_cast<int64_t>(spec.ByteSizeLong());
  }
  // (queue, user) -> how many of pending_ are theirs (no zero entries).
  const std::map<std::pair<std::string, std::string>, int64_t>&
  pending_by_queue_user() const {
    return pending_by_queue_user_;
  }
  void Clear();

 private:
  void Index(JobRecord* rec, v1::JobState from);
  void CountPending(const v1::Job& job, int delta);

  std::map<int64_t, JobRecord> jobs_;
  int64_t next_id_ = 1;
  std::map<std::pair<int, int64_t>, JobRecord*> pending_;
  std::set<int64_t> active_;
  std::map<std::string, int64_t> keys_;
  // user -> how many of pending_ are theirs, and their specs' bytes (no
  // zero entries).
  std::map<std::string, int64_t> pending_by_user_;
  std::map<std::string, int64_t> pending_bytes_by_user_;
  std::map<std::pair<std::string, std::string>, int64_t>
      pending_by_queue_user_;
  std::map<std::string, std::weak_ptr<const v1::ResourceRequest>> requests_;
  int64_t interned_ = 0;
};

}  // namespace xl::state

#endif  // XL_SERVER_STATE_JOB_TABLE_H_
