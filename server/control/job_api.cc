// The JobService side of the controller: submit, get, cancel and priority
// (reads are in job_reads.cc, sizing from a model in sizing.cc, dry runs
// in dry_run.cc, after_ok in dependencies.cc). Readers see committed state only.
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

v1::Job Controller::Visible(const JobRecord& rec) const {
  v1::Job job = rec.committed ? *rec.committed : rec.job;
  // What a pending job waits for and a training's latest metrics change
  // without a write; they are shown live.
  if (job.state() == v1::PENDING && rec.job.state() == v1::PENDING) {
    auto reason = class_reasons_.find(rec.request.get());
    if (rec.relaxed != nullptr && SwitchLimitRelaxed(rec, clock_->Now())) {
      // Past its max_switches_wait, it is placed by its relaxed request.
      auto relaxed = class_reasons_.find(rec.relaxed.get());
      if (relaxed != class_reasons_.end()) reason = relaxed;
    }
    const bool fenced = rec.eligible_mono > clock_->MonotonicNow();
    job.set_reason(reason != class_reasons_.end() && !fenced
                       ? *reason->second.second
                       : rec.job.reason());
    if (auto own = job_reasons_.find(rec.job.id());
        own != job_reasons_.end() && !fenced && own->second != nullptr) {
      job.set_reason(*own->second);
    }
    if (rec.job.spec().after_ok_size() > 0) {
      std::string waits = DependencyWait(rec, nullptr);
      if (!waits.empty()) job.set_reason(waits);
    }
    auto reserved = reservations_.find(rec.job.id());
    if (reserved == reservations_.end()) {
      // A preemptor waiting for its victims says so until it starts.
      auto held = preempt_holds_.find(rec.id);
      if (held != preempt_holds_.end()) {
        reserved = reservations_.end();
        if (!fenced && held->second.reason != nullptr) {
          job.set_reason(*held->second.reason);
          *job.mutable_estimated_start_time() =
              ToProtoTime(held->second.reservation.start);
        }
      }
    }
    if (reserved != reservations_.end() && !fenced) {
      if (reserved->second.reason != nullptr) {
        job.set_reason(*reserved->second.reason);
      }
      *job.mutable_estimated_start_time() =
          ToProtoTime(reserved->second.reservation.start);
    }
    // Jobs without a reservation of their own: the last estimate, never
    // before now.
    if (!job.has_estimated_start_time()) {
      auto estimate = estimates_.find(rec.id);
      if (estimate != estimates_.end()) {
        *job.mutable_estimated_start_time() =
            ToProtoTime(std::max(estimate->second, clock_->Now()));
      }
    }
  }
  if (rec.job.has_metrics()) *job.mutable_metrics() = rec.job.metrics();
  return job;
}

void Controller::Submit(
    const scheduler::Submitter& who, v1::SubmitJobRequest request,
    std::function<void(absl::StatusOr<v1::SubmitJobResponse>)> done) {
  const std::string& user = who.user;
  if (opts_.telemetry != nullptr && !request.dry_run()) {
    done = [done = std::move(done), telemetry = opts_.telemetry,
            clock = clock_, start = clock_->MonotonicNow()](
               absl::StatusOr<v1::SubmitJobResponse> r) {
      telemetry->ObserveSubmit(clock->MonotonicNow() - start, r.ok());
      done(std::move(r));
    };
  }
  v1::JobSpec spec = std::move(*request.mutable_spec());
  v1::Plan plan;
  const bool memory_asked = spec.resources().memory_bytes_per_node() > 0;
  absl::Status valid = SizeFromModel(&spec, &plan);
  const bool memory_derived =
      !memory_asked && spec.resources().memory_bytes_per_node() > 0;
  if (valid.ok()) valid = scheduler::ValidateJobSpec(&spec);
  if (!valid.ok()) {
    done(valid);
    return;
  }
  if (request.dry_run()) {
    DryRunJob(who, std::move(spec), std::move(done));
    return;
  }
  const std::string key = request.idempotency_key();
  if (key.size() > 256) {
    done(absl::InvalidArgumentError(
        "idempotency_key: longer than 256 characters; use a UUID"));
    return;
  }
  const std::string scoped_key = state::JobTable::ScopedKey(user, key);
  const int64_t spec_bytes = state::JobTable::SpecBytes(spec);
  auto rec = std::make_shared<JobRecord>();
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (degraded_) {
      refused = absl::UnavailableError(degraded_reason_);
    } else if (!key.empty() && model_.jobs.keys().count(scoped_key) > 0) {
      const int64_t id = model_.jobs.keys()[scoped_key];
      v1::SubmitJobResponse resp;
      resp.set_job_id(absl::StrCat(id));
      resp.set_created(false);
      if (uncommitted_.count(id) == 0) {
        mu_.Unlock();
        done(resp);
        mu_.Lock();
        return;
      }
      // The first submit is still committing: answer after it.
      Effects effects;
      effects.answer = [this, id, resp, done](absl::Status st) {
        bool exists;
        {
          absl::MutexLock lock(&mu_);
          exists = model_.jobs.Find(id) != nullptr;
        }
        if (st.ok() && exists) {
          done(resp);
        } else {
          done(absl::UnavailableError(
              "the first submit with this idempotency key failed; retry the "
              "call"));
        }
      };
      Apply(std::move(effects));
      return;
    } else if (absl::Status d = CheckDependencies(spec); !d.ok()) {
      refused = std::move(d);
    } else if (absl::Status q = ApplyQueueToSpec(who, &spec); !q.ok()) {
      refused = std::move(q);
    } else if (absl::Status q = quota_.AdmitBytes(
                   user,
                   model_.jobs.PendingBytesOf(user) + SubmittingBytesOf(user),
                   spec_bytes);
               !q.ok()) {
      refused = std::move(q);
    } else if (absl::Status q = quota_.Admit(
                   user, model_.jobs.PendingOf(user) + SubmittingOf(user),
                   clock_->MonotonicNow());
               !q.ok()) {
      refused = std::move(q);
    } else {
      ++submitting_[user];
      submitting_bytes_[user] += spec_bytes;
      ++submitting_queue_[{spec.queue(), user}];
      state::Submission submission;
      submission.user = user;
      submission.idempotency_key = key;
      submission.spec = std::move(spec);
      submission.plan = std::move(plan);
      submission.memory_derived = memory_derived;
      *rec = state::Submitted(&model_, std::move(submission), Now());
      const int64_t id = rec->id;
      uncommitted_.insert(id);
    }
  }
  if (!refused.ok()) {
    done(refused);
    return;
  }
  const int64_t id = rec->id;
  const std::string queue = rec->job.spec().queue();
  auto snapshot = std::make_shared<const v1::Job>(rec->job);
  // The submit stops counting as in flight exactly once: with the job's
  // entry into the model, or with the answer when it does not enter (a
  // failed write, or a reload that read it from the store).
  auto counted = std::make_shared<bool>(true);
  Effects effects;
  effects.changes = state::JobChanges(snapshot, {rec->events[0]});
  effects.apply = [this, rec, id, queue, user, spec_bytes, snapshot, counted] {
    mu_.AssertHeld();
    uncommitted_.erase(id);
    DoneSubmitting(user, queue, spec_bytes);
    *counted = false;
    // After a reload the store already gave the model this job.
    if (model_.jobs.Find(id) != nullptr) return;
    rec->committed_event_seq = 1;
    rec->committed = snapshot;
    // A user new to the queue changes everyone's share there.
    if (model_.jobs.pending_by_queue_user().count({queue, user}) == 0) {
      shares_cache_mono_ = absl::InfinitePast();
    }
    NoteDependencies(model_.jobs.Insert(std::move(*rec)));
    new_pending_.push_back(id);
    pass_needed_ = true;
    wake_ = true;
  };
  effects.answer = [this, id, queue, key, scoped_key, user, spec_bytes,
                    counted, done](absl::Status st) {
    // `counted` is only touched on the store's completion thread, this one.
    if (*counted || !st.ok()) {
      absl::MutexLock lock(&mu_);
      if (*counted) {
        uncommitted_.erase(id);
        DoneSubmitting(user, queue, spec_bytes);
        *counted = false;
      }
      if (!st.ok() && !key.empty()) {
        auto it = model_.jobs.keys().find(scoped_key);
        if (it != model_.jobs.keys().end() && it->second == id) {
          model_.jobs.keys().erase(it);
        }
      }
    }
    if (!st.ok()) {
      done(st);
      return;
    }
    v1::SubmitJobResponse resp;
    resp.set_job_id(absl::StrCat(id));
    resp.set_created(true);
    done(resp);
  };
  // The job enters the model only once it is on disk: nothing can act on a
  // job that a crash would forget.
  absl::MutexLock lock(&mu_);
  Apply(std::move(effects));
}

int64_t Controller::SubmittingOf(const std::string& user) const {
  auto it = submitting_.find(user);
  return it == submitting_.end() ? 0 : it->second;
}

int64_t Controller::SubmittingBytesOf(const std::string& user) const {
  auto it = submitting_bytes_.find(user);
  return it == submitting_bytes_.end() ? 0 : it->second;
}

void Controller::DoneSubmitting(const std::string& user,
                                const std::string& queue, int64_t bytes) {
  auto it = submitting_.find(user);
  if (it != submitting_.end() && --it->second <= 0) submitting_.erase(it);
  auto b = submitting_bytes_.find(user);
  if (b != submitting_bytes_.end() && (b->second -= bytes) <= 0) {
    submitting_bytes_.erase(b);
  }
  auto q = submitting_queue_.find({queue, user});
  if (q != submitting_queue_.end() && --q->second <= 0) {
    submitting_queue_.erase(q);
  }
}

absl::StatusOr<const state::JobRecord*> Controller::FindJob(
    const std::string& job_id) const {
  if (job_id.empty()) {
    return absl::InvalidArgumentError("job_id: required; see xlctl list");
  }
  const JobRecord* rec = model_.jobs.Find(job_id);
  if (rec == nullptr) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " does not exist"));
  }
  return rec;
}

absl::StatusOr<v1::Job> Controller::GetJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const JobRecord* rec, FindJob(job_id));
  return Visible(*rec);
}

void Controller::Cancel(const std::string& user,
                        const v1::CancelJobRequest& request,
                        std::function<void(absl::StatusOr<v1::Job>)> done) {
  if (request.job_id().empty()) {
    done(absl::InvalidArgumentError("job_id: required; see xlctl list"));
    return;
  }
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    JobRecord* rec = model_.jobs.Find(request.job_id());
    if (rec == nullptr) {
      error = absl::NotFoundError(
          absl::StrCat("job ", request.job_id(), " does not exist"));
    } else if (degraded_) {
      error = absl::UnavailableError(degraded_reason_);
    } else if (state::JobTable::IsTerminal(rec->job.state())) {
      error = absl::FailedPreconditionError(
          absl::StrCat("job ", request.job_id(), " already ended ",
                       v1::JobState_Name(rec->job.state()),
                       "; there is nothing to cancel"));
    } else {
      std::string reason = absl::StrCat("cancelled by ", user);
      if (!request.reason().empty()) {
        absl::StrAppend(&reason, ": ", request.reason());
      }
      const std::string id = rec->job.id();
      EndJob(rec, v1::CANCELLED, reason, [this, id, done](absl::Status st) {
        if (!st.ok()) {
          done(st);
          return;
        }
        done(GetJob(id));
      });
    }
  }
  if (!error.ok()) done(error);
}

void Controller::SetPriority(const std::string& admin,
                             const v1::SetJobPriorityRequest& request,
                             std::function<void(absl::StatusOr<v1::Job>)> done) {
  if (request.job_id().empty()) {
    done(absl::InvalidArgumentError("job_id: required; see xlctl list"));
    return;
  }
  if (FindControlCharacter(request.reason()) != std::string::npos ||
      request.reason().size() > 1024) {
    done(absl::InvalidArgumentError(
        "reason: at most 1024 printable characters"));
    return;
  }
  absl::Status error;
  bool unchanged = false;
  {
    absl::MutexLock lock(&mu_);
    JobRecord* rec = model_.jobs.Find(request.job_id());
    if (rec == nullptr) {
      error = absl::NotFoundError(
          absl::StrCat("job ", request.job_id(), " does not exist"));
    } else if (degraded_) {
      error = absl::UnavailableError(degraded_reason_);
    } else if (state::JobTable::IsTerminal(rec->job.state())) {
      error = absl::FailedPreconditionError(absl::StrCat(
          "job ", request.job_id(), " already ended ",
          v1::JobState_Name(rec->job.state()),
          "; a priority no longer matters to it"));
    } else if (rec->job.spec().priority() == request.priority()) {
      unchanged = true;  // a retry of a change that went through
    } else {
      std::string reason = absl::StrCat(
          "priority ", rec->job.spec().priority(), " -> ", request.priority(),
          " set by ", admin);
      if (!request.reason().empty()) {
        absl::StrAppend(&reason, ": ", request.reason());
      }
      model_.jobs.SetPriority(rec, request.priority());
      v1::JobEvent e = model_.jobs.Note(rec, reason, clock_->Now());
      // It ranks differently from the next pass on.
      pass_needed_ = true;
      wake_ = true;
      const std::string id = rec->job.id();
      Apply(JobEffects(rec, {e}, nullptr, [this, id, done](absl::Status st) {
        if (!st.ok()) {
          done(st);
          return;
        }
        done(GetJob(id));
      }));
    }
  }
  if (!error.ok()) {
    done(error);
  } else if (unchanged) {
    done(GetJob(request.job_id()));
  }
}

}  // namespace xl::control
