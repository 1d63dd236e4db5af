#include "server/state/job_table.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/duration.h"

namespace xl::state {

bool JobTable::Allowed(v1::JobState from, v1::JobState to) {
  switch (from) {
    case v1::PENDING:
      return to == v1::SCHEDULED || to == v1::CANCELLED || to == v1::FAILED;
    case v1::SCHEDULED:
    case v1::RUNNING:
      return to == v1::RUNNING || to == v1::PENDING || to == v1::PREEMPTED ||
             IsTerminal(to);
    case v1::PREEMPTED:
      return to == v1::PENDING;
    default:
      return false;
  }
}

int64_t JobTable::ParseId(const std::string& id) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(id, &v) || v <= 0) return -1;
  return v;
}

JobRecord* JobTable::Find(int64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

JobRecord& JobTable::Insert(JobRecord rec) {
  const int64_t id = rec.id;
  next_id_ = std::max(next_id_, id + 1);
  if (!rec.job.idempotency_key().empty()) {
    keys_[ScopedKey(rec.job.user(), rec.job.idempotency_key())] = id;
  }
  if (rec.request == nullptr) rec.request = Intern(rec.job.spec().resources());
  scheduler::JobRequest& req = rec.as_request;
  req.job_id = rec.job.id();
  req.priority = rec.job.spec().priority();
  req.submit_seq = id;
  req.resources = rec.request;
  req.queue = rec.job.spec().queue();
  req.user = rec.job.user();
  if (rec.job.spec().has_time_limit() &&
      FromProto(rec.job.spec().time_limit()) > absl::ZeroDuration()) {
    req.time_limit = FromProto(rec.job.spec().time_limit());
  }
  // Ids come in increasing order: the hint makes the insert O(1) (a walk
  // of a tree of 100,000 jobs from its root was a tenth of a submit).
  auto it = jobs_.try_emplace(jobs_.end(), id);
  JobRecord& stored = it->second = std::move(rec);
  Index(&stored, v1::JOB_STATE_UNSPECIFIED);
  return stored;
}

void JobTable::Erase(int64_t id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  const v1::Job& job = it->second.job;
  if (pending_.erase({-job.spec().priority(), id}) > 0) {
    CountPending(job, -1);
  }
  active_.erase(id);
  auto key = keys_.find(ScopedKey(job.user(), job.idempotency_key()));
  if (key != keys_.end() && key->second == id) keys_.erase(key);
  jobs_.erase(it);
}

void JobTable::CountPending(const v1::Job& job, int delta) {
  int64_t& n = pending_by_user_[job.user()];
  n += delta;
  if (n <= 0) pending_by_user_.erase(job.user());
  int64_t& bytes = pending_bytes_by_user_[job.user()];
  bytes += delta * SpecBytes(job.spec());
  if (bytes <= 0) pending_bytes_by_user_.erase(job.user());
  const std::pair<std::string, std::string> key(job.spec().queue(),
                                                job.user());
  int64_t& q = pending_by_queue_user_[key];
  q += delta;
  if (q <= 0) pending_by_queue_user_.erase(key);
}

void JobTable::Index(JobRecord* rec, v1::JobState from) {
  const int prio = rec->job.spec().priority();
  if (from == v1::PENDING && pending_.erase({-prio, rec->id}) > 0) {
    CountPending(rec->job, -1);
  }
  if (IsActive(from)) active_.erase(rec->id);
  const v1::JobState to = rec->job.state();
  if (to == v1::PENDING) {
    auto [it, added] = pending_.insert({{-prio, rec->id}, rec});
    it->second = rec;
    if (added) CountPending(rec->job, +1);
  }
  if (IsActive(to)) active_.insert(rec->id);
}

absl::StatusOr<v1::JobEvent> JobTable::Transition(JobRecord* rec,
                                                  v1::JobState to,
                                                  const std::string& reason,
                                                  absl::Time now_wall) {
  v1::Job& job = rec->job;
  const v1::JobState from = job.state();
  if (!Allowed(from, to)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), ": ", v1::JobState_Name(from), " -> ",
        v1::JobState_Name(to), " is not a transition a job may take"));
  }
  job.set_state(to);
  job.set_reason(reason);
  if (IsTerminal(to)) *job.mutable_end_time() = ToProtoTime(now_wall);
  Index(rec, from);
  v1::JobEvent e;
  e.set_job_id(job.id());
  e.set_seq(rec->events.empty() ? 1 : rec->events.back().seq() + 1);
  *e.mutable_time() = ToProtoTime(now_wall);
  e.set_from_state(from);
  e.set_to_state(to);
  e.set_attempt(job.attempt());
  e.set_reason(reason);
  rec->events.push_back(e);
  return e;
}

void JobTable::SetPriority(JobRecord* rec, int32_t priority) {
  const bool pending =
      pending_.erase({-rec->job.spec().priority(), rec->id}) > 0;
  if (pending) CountPending(rec->job, -1);
  rec->job.mutable_spec()->set_priority(priority);
  if (pending) {
    pending_[{-priority, rec->id}] = rec;
    CountPending(rec->job, +1);
  }
}

v1::JobEvent JobTable::Note(JobRecord* rec, const std::string& reason,
                            absl::Time now_wall) {
  const v1::Job& job = rec->job;
  v1::JobEvent e;
  e.set_job_id(job.id());
  e.set_seq(rec->events.empty() ? 1 : rec->events.back().seq() + 1);
  *e.mutable_time() = ToProtoTime(now_wall);
  e.set_from_state(job.state());
  e.set_to_state(job.state());
  e.set_attempt(job.attempt());
  e.set_reason(reason);
  rec->events.push_back(e);
  return e;
}

std::shared_ptr<const v1::ResourceRequest> JobTable::Intern(
    const v1::ResourceRequest& request) {
  // Drop what no job shares any more, now and then, so the map stays the
  // size of the live requests.
  if (++interned_ % 4096 == 0) {
    for (auto it = requests_.begin(); it != requests_.end();) {
      it = it->second.expired() ? requests_.erase(it) : std::next(it);
    }
  }
  std::string key = request.SerializeAsString();
  auto& slot = requests_[key];
  if (auto shared = slot.lock()) return shared;
  auto made = std::make_shared<const v1::ResourceRequest>(request);
  slot = made;
  return made;
}

void JobTable::Clear() {
  jobs_.clear();
  next_id_ = 1;
  pending_.clear();
  active_.clear();
  keys_.clear();
  pending_by_user_.clear();
  pending_bytes_by_user_.clear();
  pending_by_queue_user_.clear();
  requests_.clear();
}

}  // namespace xl::state
