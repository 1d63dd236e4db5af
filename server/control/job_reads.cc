// The JobService's reads: explain, list, the queue summary, events, whether a
// job finished, metrics. Readers see committed state only.
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/duration.h"
#include "common/planner/planner.h"
#include "common/status.h"
#include "common/text.h"
#include "server/control/controller.h"
#include "server/control/telemetry.h"
#include "server/scheduler/job_spec.h"

namespace xl::control {

absl::StatusOr<v1::ExplainJobResponse> Controller::ExplainJob(
    const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const JobRecord* rec, FindJob(job_id));
  v1::ExplainJobResponse out;
  *out.mutable_job() = Visible(*rec);
  const ShareInputs& shares = Shares();
  const scheduler::FairShare fs(shares.weights, shares.queue_usage,
                                shares.user_usage, shares.active_users);
  v1::PriorityBreakdown* p = out.mutable_priority();
  const absl::Time wall_now = clock_->Now();
  const double fs_factor = fs.Factor(rec->job.spec().queue(), rec->job.user());
  double age_factor = 0;
  const double effective = EffectiveOf(*rec, fs_factor, wall_now, &age_factor);
  const scheduler::PriorityWeights& w = opts_.priority_weights;
  p->set_priority(rec->job.spec().priority());
  p->set_submit_order(rec->id);
  p->set_effective(effective);
  p->set_fair_share_factor(fs_factor);
  p->set_fair_share_weight(w.fair_share);
  p->set_age_factor(age_factor);
  p->set_age_weight(w.age);
  p->set_note(absl::StrFormat(
      "effective priority %.2f = priority %d + fair share %.3f x %g + age "
      "%.3f x %g (higher first; equal ones in submit order). The fair-share "
      "factor is queue %s's 2^-(usage/share) times %s's within it (xlctl "
      "share); age counts from when it last became pending, up to %s",
      effective, rec->job.spec().priority(), fs_factor, w.fair_share,
      age_factor, w.age, rec->job.spec().queue(), rec->job.user(),
      HumanDuration(w.max_age)));
  if (rec->job.state() != v1::PENDING) return out;
  // The queue the scheduler sees, in its order (-effective priority, id):
  // pending jobs that are neither fenced (a retry's back-off) nor waiting
  // for their after_ok. A job that is one of those has no place in it yet.
  const absl::Time now = clock_->MonotonicNow();
  auto in_queue = [&](const JobRecord& r) {
    return r.eligible_mono <= now && (r.job.spec().after_ok_size() == 0 ||
                                      DependencyWait(r, nullptr).empty());
  };
  const bool queued = in_queue(*rec);
  std::vector<std::pair<double, const JobRecord*>> ahead;
  int64_t position = 0, pending = 0, gpus = 0;
  std::map<std::pair<std::string, std::string>, double> factors;
  for (const auto& [key, other] : model_.jobs.pending()) {
    if (!in_queue(*other)) continue;
    ++pending;
    if (other == rec) continue;
    auto [f, added] = factors.emplace(
        std::make_pair(other->job.spec().queue(), other->job.user()), 0.0);
    if (added) f->second = fs.Factor(f->first.first, f->first.second);
    const double e = EffectiveOf(*other, f->second, wall_now);
    if (e < effective || (e == effective && other->id > rec->id)) continue;
    ++position;
    const auto& r = other->job.spec().resources();
    gpus += static_cast<int64_t>(r.nodes()) * r.gpus_per_node();
    ahead.emplace_back(e, other);
  }
  out.set_pending(pending);
  if (!queued) return out;
  out.set_position(position + 1);
  out.set_gpus_ahead(gpus);
  std::sort(ahead.begin(), ahead.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second->id < b.second->id;
  });
  // Those holding reservations first (they hold nodes), then the nearest.
  constexpr size_t kShown = 10;
  std::vector<std::pair<double, const JobRecord*>> shown;
  for (const auto& other : ahead) {
    if (shown.size() < kShown &&
        reservations_.count(other.second->job.id()) > 0) {
      shown.push_back(other);
    }
  }
  for (size_t i = ahead.size(); i-- > 0 && shown.size() < kShown;) {
    if (reservations_.count(ahead[i].second->job.id()) == 0) {
      shown.push_back(ahead[i]);
    }
  }
  std::sort(shown.begin(), shown.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second->id < b.second->id;
  });
  for (const auto& [e, other] : shown) {
    v1::QueuedJob* q = out.add_ahead();
    q->set_effective_priority(e);
    q->set_queue(other->job.spec().queue());
    q->set_job_id(other->job.id());
    q->set_user(other->job.user());
    q->set_priority(other->job.spec().priority());
    q->set_nodes(other->job.spec().resources().nodes());
    q->set_gpus_per_node(other->job.spec().resources().gpus_per_node());
    auto reserved = reservations_.find(other->job.id());
    if (reserved != reservations_.end()) {
      *q->mutable_estimated_start_time() =
          ToProtoTime(reserved->second.reservation.start);
    }
  }
  return out;
}

absl::StatusOr<v1::ListJobsResponse> Controller::ListJobs(
    const v1::ListJobsRequest& request) {
  int limit = request.page_size();
  if (limit < 0) {
    return absl::InvalidArgumentError("page_size: must not be negative");
  }
  if (limit == 0) limit = 100;
  limit = std::min(limit, 1000);
  int64_t below = INT64_MAX;
  if (!request.page_token().empty() &&
      !absl::SimpleAtoi(request.page_token(), &below)) {
    return absl::InvalidArgumentError(
        "page_token: not a token this server gave; pass next_page_token of "
        "the previous page");
  }
  std::set<int> states(request.states().begin(), request.states().end());
  v1::ListJobsResponse resp;
  absl::MutexLock lock(&mu_);
  auto& all = model_.jobs.all();
  auto it = all.lower_bound(below);
  while (it != all.begin()) {
    --it;
    const JobRecord& rec = it->second;
    const v1::Job& job = rec.committed ? *rec.committed : rec.job;
    if (!states.empty() && states.count(job.state()) == 0) continue;
    if (!request.user().empty() && job.user() != request.user()) continue;
    if (!request.queue().empty() && job.spec().queue() != request.queue()) {
      continue;
    }
    if (resp.jobs_size() == limit) {
      resp.set_next_page_token(absl::StrCat(it->first + 1));
      break;
    }
    *resp.add_jobs() = Visible(rec);
  }
  return resp;
}

v1::GetQueueResponse Controller::GetQueue() {
  v1::GetQueueResponse resp;
  absl::MutexLock lock(&mu_);
  std::map<std::string, v1::QueueSummary> queues;
  for (const auto& [id, rec] : model_.jobs.all()) {
    const v1::Job& job = rec.job;
    if (state::JobTable::IsTerminal(job.state())) continue;
    v1::QueueSummary& q = queues[job.spec().queue()];
    q.set_queue(job.spec().queue());
    const auto& r = job.spec().resources();
    if (job.state() == v1::PENDING) {
      q.set_pending_jobs(q.pending_jobs() + 1);
      q.set_gpus_requested_pending(q.gpus_requested_pending() +
                                   r.nodes() * r.gpus_per_node());
    } else {
      q.set_running_jobs(q.running_jobs() + 1);
      int gpus = 0;
      for (const auto& a : job.allocations()) gpus += a.gpu_indices_size();
      q.set_gpus_in_use(q.gpus_in_use() + gpus);
    }
  }
  for (auto& [name, q] : queues) *resp.add_queues() = q;
  int total = 0, used = 0;
  for (const auto& [name, node] : model_.nodes.all()) {
    if (node.lost) {
      resp.set_nodes_lost(resp.nodes_lost() + 1);
      continue;
    }
    if (node.drained) {
      resp.set_nodes_drained(resp.nodes_drained() + 1);
    } else {
      resp.set_nodes_ready(resp.nodes_ready() + 1);
    }
    total += node.inventory.gpus_size();
    for (const auto& h : model_.ledger.Holds(name)) {
      used += static_cast<int>(h.share.gpu_indices.size());
    }
  }
  resp.set_total_gpus(total);
  resp.set_gpus_in_use(used);
  resp.set_gpus_free(total - used);
  resp.set_gpus_fragmented(
      static_cast<int32_t>(std::min<int64_t>(fragmented_gpus_, total - used)));
  return resp;
}

absl::Status Controller::ReadEvents(const std::string& job_id,
                                    int64_t after_seq,
                                    std::vector<v1::JobEvent>* out,
                                    bool* finished) {
  absl::MutexLock lock(&mu_);
  JobRecord* rec = model_.jobs.Find(job_id);
  if (rec == nullptr) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " does not exist"));
  }
  for (const auto& e : rec->events) {
    if (e.seq() > after_seq && e.seq() <= rec->committed_event_seq) {
      out->push_back(e);
    }
  }
  int64_t last = out->empty() ? after_seq : out->back().seq();
  const int64_t newest = rec->events.empty() ? 0 : rec->events.back().seq();
  *finished = state::JobTable::IsTerminal(rec->job.state()) &&
              last >= rec->committed_event_seq &&
              rec->committed_event_seq == newest;
  return absl::OkStatus();
}

absl::Status Controller::JobFinished(const std::string& job_id,
                                     bool* finished) {
  absl::MutexLock lock(&mu_);
  JobRecord* rec = model_.jobs.Find(job_id);
  if (rec == nullptr) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " does not exist"));
  }
  const int64_t newest = rec->events.empty() ? 0 : rec->events.back().seq();
  *finished = state::JobTable::IsTerminal(rec->job.state()) &&
              rec->committed_event_seq == newest;
  return absl::OkStatus();
}

absl::StatusOr<v1::GetJobMetricsResponse> Controller::GetJobMetrics(
    const v1::GetJobMetricsRequest& request) {
  constexpr int kMaxPage = 10000;
  int limit = request.page_size();
  if (limit < 0) {
    return absl::InvalidArgumentError("page_size: must not be negative");
  }
  if (limit == 0 || limit > kMaxPage) limit = kMaxPage;
  int64_t after = 0;
  if (!request.page_token().empty() &&
      (!absl::SimpleAtoi(request.page_token(), &after) || after < 0)) {
    return absl::InvalidArgumentError(
        "page_token: not a token this server gave; pass next_page_token of "
        "the previous page");
  }
  int64_t id;
  {
    absl::MutexLock lock(&mu_);
    JobRecord* rec = model_.jobs.Find(request.job_id());
    if (rec == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("job ", request.job_id(), " does not exist"));
    }
    id = rec->id;
  }
  ASSIGN_OR_RETURN(auto points, store_->ReadMetrics(id, after, limit));
  v1::GetJobMetricsResponse resp;
  for (auto& [seq, p] : points) *resp.add_points() = std::move(p);
  if (static_cast<int>(points.size()) == limit) {
    resp.set_next_page_token(absl::StrCat(points.back().first));
  }
  return resp;
}

}  // namespace xl::control
