// A job attempt's life in the control loop: start it on its placement, end
// it (success, failure, cancel, time limit), requeue it. Each change is
// written first; StartRanks and StopJob go out only after the commit.
#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/crypto/openssl.h"
#include "common/duration.h"
#include "common/status.h"
#include "server/control/controller.h"
#include "server/control/telemetry.h"
#include "server/control/launch.h"

namespace xl::control {
namespace {

// XL_RENDEZVOUS_TOKEN: 128 bits from the operating system's generator (it
// is the only secret a rank shows the rendezvous).
std::string RandomToken() {
  auto bytes = crypto::RandomBytes(16);
  if (bytes.ok()) return crypto::HexEncode(*bytes);
  absl::BitGen gen;  // RAND_bytes failing is not expected; still random
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

void Log(const std::string& line) {
  fprintf(stderr, "xl-scheduler: %s\n", line.c_str());
}

}  // namespace

absl::StatusOr<v1::JobEvent> Controller::Transition(JobRecord* rec,
                                                    v1::JobState to,
                                                    const std::string& reason) {
  auto e = model_.jobs.Transition(rec, to, reason, clock_->Now());
  if (!e.ok()) {
    Log(e.status().ToString());
  } else if (opts_.telemetry != nullptr) {
    opts_.telemetry->ObserveTransition(to);
  }
  return e;
}

void Controller::CloseAttempt(JobRecord* rec) {
  v1::Job& job = rec->job;
  if (job.master_port() > 0) model_.ports.Release(job.master_addr(), job.master_port());
  rendezvous_.Close(job.id());
}

void Controller::StartJob(JobRecord* rec, scheduler::Placement placement) {
  v1::Job& job = rec->job;
  const auto& res = job.spec().resources();
  const int rpn = res.ranks_per_node();
  // Rank 0 stays on the node it was on where that node is in the new
  // placement (the ring rotated): a checkpoint rank 0 wrote to the node's
  // scratch is found again after a requeue or an elastic resize.
  if (!rec->last_first_node.empty()) {
    auto first = std::find_if(
        placement.shares.begin(), placement.shares.end(),
        [&](const scheduler::NodeShare& s) {
          return s.node == rec->last_first_node;
        });
    std::rotate(placement.shares.begin(), first, placement.shares.end());
  }
  rec->restart_request.reset();
  // An elastic job's world is the nodes it got.
  job.set_world_size(static_cast<int32_t>(placement.shares.size()) * rpn);
  job.clear_allocations();
  job.clear_rank_exits();
  std::vector<std::string> names;
  std::vector<store::StoredHold> holds;
  for (size_t g = 0; g < placement.shares.size(); ++g) {
    const auto& share = placement.shares[g];
    NodeRecord* node = model_.nodes.Find(share.node);
    names.push_back(share.node);
    v1::Allocation* a = job.add_allocations();
    a->set_node(share.node);
    for (int32_t gpu : share.gpu_indices) a->add_gpu_indices(gpu);
    a->set_group_rank(static_cast<int32_t>(g));
    a->set_address(node != nullptr ? node->address : "");
    a->set_cpus(share.cpus);
    a->set_memory_bytes(share.memory_bytes);
    a->set_nvme_bytes(share.nvme_bytes);
    a->set_nic_gbps(share.nic_gbps);
    state::Hold hold;
    hold.job_id = rec->id;
    hold.attempt = job.attempt();
    hold.share = share;
    for (int l = 0; l < rpn; ++l) {
      int rank = static_cast<int>(g) * rpn + l;
      a->add_ranks(rank);
      hold.live_ranks.insert(rank);
      hold.all_ranks.push_back(rank);
    }
    model_.ledger.AddHold(share.node, std::move(hold));
    holds.push_back({rec->id, job.attempt(), *a});
  }
  job.set_master_addr(job.allocations(0).address());
  job.set_master_port(model_.ports.Allocate(job.master_addr()));
  *job.mutable_start_time() = ToProtoTime(clock_->Now());
  rec->start_mono = clock_->MonotonicNow();
  job.clear_end_time();
  job.set_exit_code(0);
  rec->ranks.clear();
  rec->ranks_succeeded = 0;
  rec->stopping = false;
  rec->token = RandomToken();

  auto e = Transition(rec, v1::SCHEDULED,
                      absl::StrCat("placed on ", absl::StrJoin(names, ", ")));
  if (!e.ok()) return;
  const int64_t id = rec->id;
  const int32_t attempt = job.attempt();
  const std::string token = rec->token;
  Effects effects = JobEffects(
      rec, {*e},
      [this, id, attempt, token, holds] {
        // Decisions go to the agents only once they are durable.
        absl::MutexLock lock(&mu_);
        JobRecord* rec = model_.jobs.Find(id);
        if (rec == nullptr || rec->job.attempt() != attempt ||
            !state::JobTable::IsActive(rec->job.state()) || rec->stopping) {
          // The attempt ended before its start was recorded: no StartRanks
          // went out (they go only from here), so nothing runs and no agent
          // will report an exit; give the resources back now.
          for (const auto& h : holds) {
            NodeRecord* node = model_.nodes.Find(h.allocation.node());
            if (node == nullptr) continue;
            for (int r : h.allocation.ranks()) ReleaseRank(node, id, attempt, r);
          }
          return;
        }
        rendezvous_.Open(rec->job.id(), attempt, token,
                         rec->job.world_size());
        std::vector<std::string> undelivered;
        for (const auto& a : rec->job.allocations()) {
          NodeRecord* node = model_.nodes.Find(a.node());
          LaunchContext context;
          context.scheduler_address = opts_.advertise_address;
          context.token = token;
          context.shared_env = node != nullptr && node->shared_env;
          if (const v1::QueueSpec* q = QueueSpecOf(rec->job.spec().queue())) {
            context.max_processes = q->max_processes_per_node();
          }
          bool sent = false;
          if (node != nullptr && node->conn) {
            sent = node->conn->Send(
                BuildStartRanks(rec->job, a, node->inventory, context));
          }
          if (!sent) undelivered.push_back(a.node());
        }
        if (!undelivered.empty()) {
          // Nothing ran on those nodes: give the attempt back without
          // spending a retry.
          for (const std::string& name : undelivered) {
            const state::Hold* hold = model_.ledger.FindHold(name, id, attempt);
            if (hold == nullptr) continue;
            std::vector<int> ranks(hold->live_ranks.begin(),
                                   hold->live_ranks.end());
            NodeRecord* node = model_.nodes.Find(name);
            if (node == nullptr) continue;
            for (int r : ranks) ReleaseRank(node, id, attempt, r);
          }
          FailAttempt(rec,
                      absl::StrCat("the assignment could not be delivered to ",
                                   absl::StrJoin(undelivered, ", "),
                                   " (agent not connected)"),
                      /*spend_retry=*/false);
        }
      });
  effects.changes.push_back(store::change::PutToken{id, token});
  for (const auto& h : holds) {
    effects.changes.push_back(store::change::PutHold{h});
  }
  Apply(std::move(effects));
}

absl::Duration Controller::GraceOf(const JobRecord& rec) {
  const absl::Duration grace = FromProto(rec.job.spec().grace_period());
  return grace > absl::ZeroDuration() ? grace : absl::Seconds(10);
}

absl::Duration Controller::LostNodeFence(const JobRecord& rec) const {
  return std::max(absl::ZeroDuration(),
                  opts_.lease - opts_.heartbeat_timeout) +
         GraceOf(rec) + opts_.heartbeat_interval;
}

Sends Controller::StopMessages(const JobRecord& rec,
                                           const std::string& why) {
  Sends sends;
  for (const auto& a : rec.job.allocations()) {
    NodeRecord* node = model_.nodes.Find(a.node());
    if (node == nullptr || !node->conn) continue;
    v1::SchedulerMessage msg;
    v1::StopJob* stop = msg.mutable_stop_job();
    stop->set_job_id(rec.job.id());
    stop->set_attempt(rec.job.attempt());
    *stop->mutable_grace_period() = rec.job.spec().grace_period();
    stop->set_reason(why);
    sends.emplace_back(node->conn, std::move(msg));
  }
  return sends;
}

void Controller::EndJob(JobRecord* rec, v1::JobState to,
                        const std::string& reason,
                        std::function<void(absl::Status)> answer) {
  const bool was_active = state::JobTable::IsActive(rec->job.state());
  // The training's last point is kept.
  StoreMetrics(rec);
  Sends stops;
  if (was_active && to != v1::SUCCEEDED) stops = StopMessages(*rec, reason);
  auto e = Transition(rec, to, reason);
  if (!e.ok()) {
    if (answer) answer(e.status());
    return;
  }
  if (was_active) {
    rec->stopping = true;
    CloseAttempt(rec);
  }
  Effects effects = JobEffects(rec, {*e}, nullptr, std::move(answer));
  effects.sends = std::move(stops);
  Apply(std::move(effects));
  WakeDependents(*rec);
}

void Controller::FailAttempt(JobRecord* rec, const std::string& why,
                             bool spend_retry, absl::Duration fence,
                             bool preempted) {
  StoreMetrics(rec);  // the attempt's last point is kept
  v1::Job& job = rec->job;
  const int used = job.retries_used();
  if (spend_retry && used >= job.spec().max_retries()) {
    std::string reason = why;
    if (job.spec().max_retries() > 0) {
      absl::StrAppend(&reason, "; no retries left (max_retries ",
                      job.spec().max_retries(), ")");
    }
    EndJob(rec, v1::FAILED, reason);
    return;
  }
  Sends stops = StopMessages(*rec, why);
  std::vector<v1::JobEvent> events;
  if (preempted) {
    auto ended = Transition(rec, v1::PREEMPTED, why);
    if (!ended.ok()) return;
    events.push_back(*ended);
    job.set_preemptions(job.preemptions() + 1);
  }
  std::string reason =
      spend_retry
          ? absl::StrCat(why, "; requeued as attempt ", job.attempt() + 1,
                         " (retry ", used + 1, " of ",
                         job.spec().max_retries(), ")")
          : absl::StrCat(why, "; requeued as attempt ", job.attempt() + 1,
                         " without spending a retry");
  CloseAttempt(rec);
  if (job.allocations_size() > 0) {
    rec->last_first_node = job.allocations(0).node();
  }
  if (spend_retry) job.set_retries_used(used + 1);
  job.set_attempt(job.attempt() + 1);
  job.clear_allocations();
  job.clear_master_addr();
  job.set_master_port(0);
  job.clear_start_time();
  job.clear_rank_exits();
  rec->ranks.clear();
  rec->ranks_succeeded = 0;
  rec->stopping = false;
  rec->token.clear();
  if (fence > absl::ZeroDuration()) {
    rec->eligible_mono = clock_->MonotonicNow() + fence;
    absl::StrAppend(&reason, "; it starts again no sooner than ",
                    HumanDuration(fence),
                    " from now, once the lost node's agent has surely "
                    "stopped its ranks (its lease ran out)");
  }
  auto e = Transition(rec, v1::PENDING, reason);
  if (!e.ok()) return;
  events.push_back(*e);
  new_pending_.push_back(rec->id);
  pass_needed_ = true;
  wake_ = true;
  Effects effects = JobEffects(rec, std::move(events));
  effects.sends = std::move(stops);
  Apply(std::move(effects));
}

}  // namespace xl::control
