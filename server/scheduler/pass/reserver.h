// The reserve phase of a pass (EASY backfill) and the node side of
// preemption: when blocked jobs can start and on which nodes, holding those
// nodes for them; small jobs that end before a hold begins may use its nodes
// meanwhile. Private to the scheduling core: one object per pass, not
// thread-safe, pure (time is the snapshot's).
#ifndef XL_SERVER_SCHEDULER_PASS_RESERVER_H_
#define XL_SERVER_SCHEDULER_PASS_RESERVER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/time/time.h"
#include "server/scheduler/fleet_index.h"
#include "server/scheduler/placement.h"

namespace xl::scheduler {

// Reservations for blocked jobs (EASY backfill). Keeps what the pass has
// left on every node (`current`) and when running jobs give back what they
// hold; for a blocked job, replays those ends in time order on a copy until
// the gang fits, and holds the nodes it would get.
//
// Cost per reservation: one copy of the nodes, one fit check per node and
// per share given back (the GPUs a request may use are matched once per
// GPU layout), and a placement over the fitting nodes each time enough fit
// (at most kMaxPlacements times): about nodes + running shares. With 8
// reservations, 10,000 nodes x 10,000 pending: +17 ms (schedule_bench).
class Reserver {
 public:
  Reserver(const ClusterSnapshot& snapshot, FleetIndex* fleet);

  // Holds the nodes of a reservation an earlier pass made. False when one of
  // them is gone or unavailable, or a job ranked before it
  // took from one in this pass: the reservation no longer stands. What is
  // left of it is held all the same for the rest of the pass, so jobs
  // ranked after it do not take what it will most likely get again.
  bool Hold(const Reservation& r);

  // Backfill on held nodes: a job that ends (by its time limit) before the
  // reservations holding some nodes begin may run on them meanwhile, as in
  // Slurm. Tries `job` over the nodes that are free or held past its end;
  // on success takes what it gets (from the fleet, for nodes not held) and
  // fills `placement`. At most kMaxBackfills tries a pass.
  bool BackfillOnHeld(const JobRequest& job, Placement* placement);

  // A job this pass starts: its shares leave `current`, and come back at
  // now + time_limit for later reservations.
  void Started(const JobRequest& job, const Placement& placement);

  // Finds the earliest time `job` fits, from the current state and the
  // ends of running jobs, and holds those nodes. False when it never fits
  // on what running jobs with time limits give back.
  bool Reserve(const JobRequest& job, Reservation* out);

  // Preemption: finds the gangs among `candidates` (in the order they
  // should go) whose resources let `job` start now: whole gangs, in order
  // until the job fits, then every one found not needed put back (the last
  // added is needed). Holds the nodes it would start on. False when even
  // all of them do not make room.
  // With `minimize` false every candidate up to the one that made room
  // stays a victim (a reclaim needs them all for the quota).
  bool PreemptFor(const JobRequest& job,
                  const std::vector<const RunningGang*>& candidates,
                  std::vector<const RunningGang*>* victims,
                  Placement* placement, bool minimize = true);

 private:
  bool ReserveOnce(const JobRequest& job, Reservation* out);

  // What the pass has left, copied, on which shares are given back (or
  // taken again), keeping which nodes take one share of `req` and how many:
  // a gang is placed over those only, so a placement costs about them,
  // not the fleet.
  class Future;

  // Each placement runs over nodes that all fit, so the first succeeds
  // unless the request constrains topology; this bounds the rest.
  static constexpr int kMaxPlacements = 8;
  static constexpr int kMaxBackfills = 32;
  static constexpr int kMaxReserveTries = 64;
  // kMaxReserveTries, or twice the reservations asked for (an estimating
  // pass asks for many).
  const int max_reserve_tries_;
  struct End {
    absl::Time at;
    std::string job_id;
    std::vector<NodeShare> shares;
    // A reservation's end: these nodes (indices) are no longer held.
    std::vector<int32_t> unhold;
  };

  // Holds node n for a reservation from `until` on, to `ends` (its time
  // limit after its start; InfiniteFuture: unknown). A node held twice is
  // held from the earlier start to the later end.
  void HoldNode(int32_t n, const std::string& job_id, absl::Time until,
                absl::Time ends = absl::InfiniteFuture());

  const absl::Time now_;
  FleetIndex* const fleet_;
  std::vector<NodeCapacity> current_;
  // When the reservation holding each node begins; InfinitePast: not held.
  std::vector<absl::Time> held_until_;
  // When the last reservation holding each node ends (by its time limit).
  std::vector<absl::Time> free_from_;
  bool any_held_ = false;
  // Nodes a job started on in this pass.
  std::vector<bool> touched_;
  // The reasons held slots point to (a deque: stable addresses).
  std::deque<std::string> held_why_;
  int reserve_tries_ = 0;
  std::unordered_set<const v1::ResourceRequest*> unreservable_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<End> ends_;
  size_t sorted_ = 0;  // ends_[0, sorted_) is in time order
  int backfills_ = 0;
  std::unordered_map<const v1::ResourceRequest*, absl::Duration> failed_limit_;
};

// Why a reserved job waits, in words: "reserved: expected to start by
// 2026-12-02 14:05:09 UTC (in 2h) on n1, n2, when jobs 42, 43 end at the
// latest (time limits); other jobs start only elsewhere meanwhile".
std::string ReservationText(const Reservation& r, absl::Time now);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PASS_RESERVER_H_
