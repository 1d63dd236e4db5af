// Rank exits in the controller: an exit is acted on once the output its
// agent says the rank wrote before exiting is stored (or after
// --log-settle), and only for ranks that ran on the node that reports it.
#include <algorithm>
#include <cstdio>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "common/status.h"
#include "common/text.h"
#include "server/control/controller.h"
#include "server/state/node_life.h"

namespace xl::control {
namespace {

void Log(const std::string& line) {
  fprintf(stderr, "xl-scheduler: %s\n", line.c_str());
}

}  // namespace

void Controller::SettleExits(int64_t job_id, bool now,
                             const std::string& lost_node) {
  const absl::Time mono_now = clock_->MonotonicNow();
  // Exits of lost_node still parked (counted once: a 10,000-rank job's
  // queue is walked once).
  int64_t lost_left = -1;
  while (true) {
    JobRecord* rec = model_.jobs.Find(job_id);
    if (rec == nullptr || rec->parked_exits.empty()) {
      parked_jobs_.erase(job_id);
      return;
    }
    const JobRecord::ParkedExit& p = rec->parked_exits.front();
    const bool current = rec->job.attempt() == p.status.attempt() &&
                         state::JobTable::IsActive(rec->job.state()) &&
                         !rec->stopping;
    // A lost node's output never comes: its exits, and those that came
    // before them, are acted on now; exits after its last one wait on.
    if (lost_left < 0) {
      lost_left = lost_node.empty()
                      ? 0
                      : std::count_if(rec->parked_exits.begin(),
                                      rec->parked_exits.end(),
                                      [&](const JobRecord::ParkedExit& e) {
                                        return e.node == lost_node;
                                      });
    }
    const bool lost_ahead = lost_left > 0;
    if (p.node == lost_node && lost_left > 0) --lost_left;
    const bool behind = current && state::OutputBehind(*rec, p.status);
    const bool waited = mono_now >= p.until;
    if (behind && !now && !lost_ahead && !waited) return;
    JobRecord::ParkedExit ready = std::move(rec->parked_exits.front());
    rec->parked_exits.pop_front();
    if (behind) {
      Log(absl::StrCat(
          "job ", ready.status.job_id(), " attempt ", ready.status.attempt(),
          " rank ", ready.status.rank(),
          ": acting on its exit without all of its output (",
          now ? std::string("the job is being ended")
          : lost_ahead
              ? absl::StrCat("node ", lost_node, " was lost")
              : absl::StrCat("waited ", absl::FormatDuration(opts_.log_settle),
                             " for it"),
          ")"));
    }
    // The node may have gone meanwhile: its loss settled the attempt.
    if (NodeRecord* node = model_.nodes.Find(ready.node)) {
      HandleRankStatus(node, ready.status, /*settled=*/true);
    }
  }
}

void Controller::SettleExitsOfLostNode(const std::string& node) {
  std::vector<int64_t> from;
  for (int64_t id : parked_jobs_) {
    const JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr) continue;
    for (const auto& p : rec->parked_exits) {
      if (p.node == node) {
        from.push_back(id);
        break;
      }
    }
  }
  for (int64_t id : from) SettleExits(id, /*now=*/false, node);
}

void Controller::CheckParkedExits() {
  if (parked_jobs_.empty()) return;
  const absl::Time now = clock_->MonotonicNow();
  std::vector<int64_t> due;
  for (int64_t id : parked_jobs_) {
    const JobRecord* rec = model_.jobs.Find(id);
    // Only the first of a job's parked exits can be due: the rest wait
    // behind it.
    if (rec == nullptr || rec->parked_exits.empty() ||
        now >= rec->parked_exits.front().until) {
      due.push_back(id);
    }
  }
  for (int64_t id : due) SettleExits(id);
}

}  // namespace xl::control
