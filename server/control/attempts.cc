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
#include "server/state/lifecycle.h"

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

void Controller::ObserveEvents(const std::vector<v1::JobEvent>& events) {
  if (opts_.telemetry == nullptr) return;
  for (const auto& e : events) {
    if (e.to_state() != e.from_state()) {
      opts_.telemetry->ObserveTransition(e.to_state());
    }
  }
}

absl::Status Controller::Recorded(JobRecord* rec,
                                  absl::StatusOr<state::Step>* step,
                                  std::function<void()> then,
                                  std::function<void(absl::Status)> answer) {
  if (!step->ok()) {
    Log(step->status().ToString());
    if (answer) answer(step->status());
    return step->status();
  }
  state::Step& s = **step;
  ObserveEvents(s.events);
  if (s.attempt_closed) rendezvous_.Close(rec->job.id());
  Effects effects = JobEffects(rec, s.events, std::move(then),
                               std::move(answer));
  for (auto& c : s.extra) effects.changes.push_back(std::move(c));
  effects.sends = std::move(s.stops);
  Apply(std::move(effects));
  return absl::OkStatus();
}

void Controller::StartJob(JobRecord* rec, scheduler::Placement placement) {
  const std::string token = RandomToken();
  auto step = state::Start(&model_, rec, std::move(placement), token, Now());
  if (!step.ok()) {
    Recorded(rec, &step);
    return;
  }
  const std::vector<store::StoredHold> holds = step->holds;
  const int64_t id = rec->id;
  const int32_t attempt = rec->job.attempt();
  Recorded(
      rec, &step,
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

void Controller::EndJob(JobRecord* rec, v1::JobState to,
                        const std::string& reason,
                        std::function<void(absl::Status)> answer) {
  // The training's last point is kept.
  StoreMetrics(rec);
  auto step = state::End(&model_, rec, to, reason, Now());
  if (Recorded(rec, &step, nullptr, std::move(answer)).ok()) {
    WakeDependents(*rec);
  }
}

void Controller::FailAttempt(JobRecord* rec, const std::string& why,
                             bool spend_retry, absl::Duration fence,
                             bool preempted) {
  StoreMetrics(rec);  // the attempt's last point is kept
  state::Requeue requeue;
  requeue.why = why;
  requeue.spend_retry = spend_retry;
  requeue.fence = fence;
  requeue.preempted = preempted;
  auto step = state::EndAttempt(&model_, rec, requeue, Now());
  const bool requeued = step.ok() && step->requeued;
  if (!Recorded(rec, &step).ok()) return;
  if (!requeued) {
    WakeDependents(*rec);
    return;
  }
  new_pending_.push_back(rec->id);
  pass_needed_ = true;
  wake_ = true;
}

}  // namespace xl::control
