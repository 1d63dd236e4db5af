// Dependencies between jobs (after_ok, as sbatch --dependency=afterok):
// checked at submit, what a waiting job waits for, and waking the jobs
// that wait for one that ended.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/control/controller.h"

namespace xl::control {

absl::Status Controller::CheckDependencies(const v1::JobSpec& spec) {
  for (int i = 0; i < spec.after_ok_size(); ++i) {
    const JobRecord* dep = model_.jobs.Find(spec.after_ok(i));
    if (dep == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "after_ok[", i, "]: job ", spec.after_ok(i),
          " does not exist; give the id of a job xlctl list shows"));
    }
    const v1::JobState st = dep->job.state();
    if (st == v1::FAILED || st == v1::CANCELLED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "after_ok[", i, "]: job ", spec.after_ok(i), " ended ",
          v1::JobState_Name(st), " and can never succeed; drop it from "
          "after_ok or submit again after a new run of it"));
    }
  }
  return absl::OkStatus();
}

void Controller::NoteDependencies(const JobRecord& rec) {
  for (const std::string& id : rec.job.spec().after_ok()) {
    int64_t dep = 0;
    if (absl::SimpleAtoi(id, &dep)) dependents_[dep].push_back(rec.id);
  }
}

void Controller::WakeDependents(const JobRecord& ended) {
  // A worklist, not recursion: EndJob calls back in here, and a chain of
  // 10,000 dependents fails in one go without 10,000 stack frames.
  wake_work_.push_back(ended.id);
  if (waking_) return;
  waking_ = true;
  while (!wake_work_.empty()) {
    const int64_t id = wake_work_.back();
    wake_work_.pop_back();
    auto it = dependents_.find(id);
    if (it == dependents_.end()) continue;
    const JobRecord* done = model_.jobs.Find(id);
    const bool succeeded =
        done != nullptr && done->job.state() == v1::SUCCEEDED;
    // After a success the entry stays (retention keeps the job while a
    // dependent may still look at it); after a failure it goes.
    std::vector<int64_t> waiting = it->second;
    if (!succeeded) dependents_.erase(it);
    for (int64_t dependent : waiting) {
      JobRecord* rec = model_.jobs.Find(dependent);
      if (rec == nullptr || rec->job.state() != v1::PENDING) continue;
      if (succeeded) {
        // Looked at by the next pass (a pass over new jobs suffices).
        new_pending_.push_back(dependent);
        pass_needed_ = true;
        continue;
      }
      std::string failed;
      DependencyWait(*rec, &failed);
      if (!failed.empty()) EndJob(rec, v1::FAILED, failed);
    }
  }
  waking_ = false;
}

std::string Controller::DependencyWait(const JobRecord& rec,
                                       std::string* failed) const {
  // One that can never succeed decides, wherever it is in the list.
  std::string waits;
  for (const std::string& id : rec.job.spec().after_ok()) {
    const JobRecord* dep = model_.jobs.Find(id);
    const v1::JobState st =
        dep == nullptr ? v1::JOB_STATE_UNSPECIFIED : dep->job.state();
    if (st == v1::SUCCEEDED) continue;
    if (dep == nullptr || st == v1::FAILED || st == v1::CANCELLED) {
      if (failed != nullptr) {
        *failed = absl::StrCat(
            "job ", id, dep == nullptr ? " is gone (forgotten after it ended)"
                                       : absl::StrCat(" ended ",
                                                      v1::JobState_Name(st)),
            ", so this job, which waits for it to succeed (after_ok), never "
            "will run; submit it again when its dependency succeeds");
      }
      return "";
    }
    if (waits.empty()) {
      waits = absl::StrCat("waits for job ", id, " (", v1::JobState_Name(st),
                           ") to succeed (after_ok)");
    }
  }
  return waits;
}

}  // namespace xl::control
