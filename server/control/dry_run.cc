// DryRun: what a pass would do with a job that is not submitted (xlctl
// submit --dry-run): placed on a copy of the cluster, nothing stored.
#include <algorithm>
#include <unordered_set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "server/control/controller.h"
#include "server/scheduler/schedule.h"

namespace xl::control {

void Controller::DryRunJob(
    const scheduler::Submitter& who, v1::JobSpec spec,
    std::function<void(absl::StatusOr<v1::SubmitJobResponse>)> done) {
  const std::string& user = who.user;
  scheduler::ClusterSnapshot snapshot;
  std::vector<scheduler::JobRequest> queue;
  const std::string kId = "dry-run";
  {
    absl::MutexLock lock(&mu_);
    absl::Status refused = CheckDependencies(spec);
    if (refused.ok()) refused = ApplyQueueToSpec(who, &spec);
    // Dry runs cost a pass: one at a time, and they count against the
    // submit rate.
    if (refused.ok() && dry_run_in_flight_) {
      refused = absl::ResourceExhaustedError(
          "another dry run is being computed (one at a time: each is a "
          "scheduling pass); retry in a moment");
    }
    if (refused.ok()) {
      refused = quota_.Admit(user, /*pending=*/0, clock_->MonotonicNow());
    }
    if (!refused.ok()) {
      mu_.Unlock();
      done(refused);
      mu_.Lock();
      return;
    }
    const absl::Time now = clock_->MonotonicNow();
    const absl::Time wall_now = clock_->Now();
    const ShareInputs& shares = Shares();
    const scheduler::FairShare fs(shares.weights, shares.queue_usage,
                                  shares.user_usage, shares.active_users);
    // The job's own after_ok: it would wait for them first.
    for (const std::string& dep : spec.after_ok()) {
      const JobRecord* d = model_.jobs.Find(dep);
      if (d != nullptr && d->job.state() != v1::SUCCEEDED) {
        v1::SubmitJobResponse resp;
        resp.mutable_dry_run()->set_reason(absl::StrCat(
            "waits for job ", dep, " (", v1::JobState_Name(d->job.state()),
            ") to succeed (after_ok); where it would go is decided then"));
        *resp.mutable_dry_run()->mutable_spec() = std::move(spec);
        mu_.Unlock();
        done(std::move(resp));
        mu_.Lock();
        return;
      }
    }
    dry_run_in_flight_ = true;
    // The queue a full pass would see, as it sees it, and the job.
    FullPassQueue(fs, &queue);
    scheduler::JobRequest job;
    job.job_id = kId;
    job.priority = spec.priority();
    job.submit_seq = model_.jobs.next_id();
    job.resources =
        std::make_shared<const v1::ResourceRequest>(spec.resources());
    job.queue = spec.queue();
    job.user = user;
    if (FromProto(spec.time_limit()) > absl::ZeroDuration()) {
      job.time_limit = FromProto(spec.time_limit());
    }
    job.effective_priority = scheduler::EffectivePriority(
        spec.priority(), fs.Factor(spec.queue(), user), absl::ZeroDuration(),
        opts_.priority_weights);
    queue.push_back(job);
    FullPassSnapshot(fs, queue, &snapshot);
  }
  v1::SubmitJobResponse resp;
  v1::DryRun* out = resp.mutable_dry_run();
  const double mine = queue.back().effective_priority.value_or(0);
  const int64_t seq = queue.back().submit_seq;
  int64_t ahead = 0;
  for (const auto& req : queue) {
    const double r = scheduler::RankOf(req);
    if (req.job_id != kId &&
        (r > mine || (r == mine && req.submit_seq < seq))) {
      ++ahead;
    }
  }
  out->set_position(ahead + 1);
  out->set_pending(static_cast<int64_t>(queue.size()));
  out->set_effective_priority(mine);
  scheduler::Decisions d =
      scheduler::Schedule(std::move(snapshot), std::move(queue));
  const int rpn = spec.resources().ranks_per_node();
  for (const auto& [id, placement] : d.starts) {
    if (id != kId) continue;
    out->set_starts_now(true);
    for (size_t g = 0; g < placement.shares.size(); ++g) {
      const scheduler::NodeShare& share = placement.shares[g];
      v1::Allocation* a = out->add_allocations();
      a->set_node(share.node);
      for (int32_t gpu : share.gpu_indices) a->add_gpu_indices(gpu);
      a->set_group_rank(static_cast<int32_t>(g));
      a->set_cpus(share.cpus);
      a->set_memory_bytes(share.memory_bytes);
      a->set_nvme_bytes(share.nvme_bytes);
      a->set_nic_gbps(share.nic_gbps);
      for (int l = 0; l < rpn; ++l) {
        a->add_ranks(static_cast<int32_t>(g) * rpn + l);
      }
    }
  }
  for (const auto& [id, reason] : d.waiting) {
    if (id == kId && reason != nullptr) out->set_reason(*reason);
  }
  for (const auto& r : d.reservations) {
    if (r.job_id == kId) {
      *out->mutable_estimated_start_time() = ToProtoTime(r.start);
    }
  }
  for (const auto& p : d.preemptions) {
    if (p.for_job == kId) out->add_would_preempt(p.victim);
  }
  if (out->starts_now()) {
    *out->mutable_estimated_start_time() = ToProtoTime(clock_->Now());
  }
  *out->mutable_spec() = std::move(spec);
  {
    absl::MutexLock lock(&mu_);
    dry_run_in_flight_ = false;
  }
  done(std::move(resp));
}

}  // namespace xl::control
