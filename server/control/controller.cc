// The loop: ticks (liveness, time limits, retention), running scheduling
// passes on a snapshot outside the lock (the snapshot and applying the
// decisions are in pass.cc), commits and degraded mode, recovery.
#include "server/control/controller.h"
#include "server/control/telemetry.h"

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/duration.h"
#include "common/status.h"
#include "server/scheduler/schedule.h"

namespace xl::control {
namespace {

void Log(const std::string& line) {
  fprintf(stderr, "xl-scheduler: %s\n", line.c_str());
}

}  // namespace

Controller::Controller(store::Store* store, const Clock* clock,
                       ControllerOptions opts)
    : store_(store),
      clock_(clock),
      opts_(std::move(opts)),
      quota_(opts_.submit_limits),
      rendezvous_(clock),
      model_(opts_.master_port_base, opts_.master_port_count) {}

Controller::~Controller() { Stop(); }

absl::Status Controller::Recover() {
  ASSIGN_OR_RETURN(store::StoredState state, store_->Load());
  absl::MutexLock lock(&mu_);
  LoadModel(std::move(state));
  return absl::OkStatus();
}

void Controller::LoadModel(store::StoredState state) {
  const absl::Time now_wall = clock_->Now();
  const absl::Time now_mono = clock_->MonotonicNow();
  state::Model::LoadClock load_clock;
  load_clock.now_wall = now_wall;
  load_clock.now_mono = now_mono;
  load_clock.reconnect_grace = opts_.reconnect_grace;
  load_clock.usage_half_life = opts_.priority_weights.half_life;
  model_.Load(&state, load_clock);
  // What the control layer derives from the model, and keeps beside it.
  uncommitted_.clear();
  new_pending_.clear();
  class_reasons_.clear();
  job_reasons_.clear();
  dependents_.clear();
  std::set<std::string> open_scopes;
  for (auto& [id, rec] : model_.jobs.all()) {
    if (!state::JobTable::IsTerminal(rec.job.state())) NoteDependencies(rec);
    if (state::JobTable::IsActive(rec.job.state()) && !rec.token.empty()) {
      open_scopes.insert(rec.job.id());
      rendezvous_.Open(rec.job.id(), rec.job.attempt(), rec.token,
                       rec.job.world_size());
    }
  }
  // Scopes of attempts that still run keep their keys (ranks in the middle
  // of meeting go on); the others close.
  rendezvous_.RetainOnly(open_scopes);
  // A requeued job whose older attempt still holds resources may have been
  // requeued because that node was lost: its start waits as if the node
  // had just been lost (the wait is not stored; this errs long).
  for (const auto& h : state.holds) {
    if (JobRecord* rec = model_.jobs.Find(h.job_id);
        rec != nullptr && rec->job.state() == v1::PENDING &&
        rec->job.attempt() > h.attempt) {
      rec->eligible_mono =
          std::max(rec->eligible_mono, now_mono + LostNodeFence(*rec));
    }
  }
  // A preemptor whose victims still hold what they had (their old
  // attempts' holds) waits for them again rather than preempting more.
  preempting_.clear();
  preempt_holds_.clear();
  for (const auto& h : state.holds) {
    const JobRecord* victim = model_.jobs.Find(h.job_id);
    if (victim == nullptr || victim->job.preempted_by().empty() ||
        victim->job.attempt() <= h.attempt) {
      continue;
    }
    const int64_t by = state::JobTable::ParseId(victim->job.preempted_by());
    const JobRecord* preemptor = model_.jobs.Find(by);
    if (preemptor == nullptr || preemptor->job.state() != v1::PENDING) continue;
    absl::Time& until = preempting_[by];
    until = std::max(until,
                     now_mono + GraceOf(*victim) + opts_.heartbeat_timeout);
  }
  policies_.clear();
  for (const auto& [name, q] : model_.queues) SetPolicy(q.spec());
  last_accrual_mono_ = absl::InfinitePast();
  shares_cache_mono_ = absl::InfinitePast();
  capacity_freed_ = true;
  pass_needed_ = true;
  next_eligible_mono_ = absl::InfiniteFuture();
}

void Controller::SetAdvertiseAddressIfEmpty(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (opts_.advertise_address.empty()) opts_.advertise_address = address;
}

void Controller::Start() {
  loop_ = std::thread([this] { RunLoop(); });
  ticker_ = std::thread([this] {
    while (true) {
      absl::SleepFor(opts_.tick);  // relative: immune to wall-clock steps
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      wake_ = true;
    }
  });
  if (opts_.estimate_jobs > 0 &&
      opts_.estimate_interval < absl::InfiniteDuration()) {
    estimator_ = std::thread([this] {
      absl::Duration slept = absl::ZeroDuration();
      while (true) {
        // Short relative sleeps: Stop is prompt, a clock step harmless.
        constexpr absl::Duration kStep = absl::Milliseconds(100);
        absl::SleepFor(kStep);
        slept += kStep;
        {
          absl::MutexLock lock(&mu_);
          if (stop_) return;
        }
        if (slept < opts_.estimate_interval) continue;
        slept = absl::ZeroDuration();
        EstimateStarts();
      }
    });
  }
}

void Controller::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (loop_.joinable()) loop_.join();
  if (ticker_.joinable()) ticker_.join();
  if (estimator_.joinable()) estimator_.join();
  rendezvous_.CloseAll();
}

absl::Status Controller::Writable() {
  absl::MutexLock lock(&mu_);
  if (!degraded_) return absl::OkStatus();
  return absl::UnavailableError(degraded_reason_);
}

void Controller::RunLoop() {
  while (true) {
    // Passes come at most every kMinPass, so a burst of submits is
    // scheduled together rather than one wake-up each.
    constexpr absl::Duration kMinPass = absl::Milliseconds(2);
    absl::SleepFor(kMinPass);
    {
      absl::MutexLock lock(&mu_);
      // The ticker sets wake_ every tick, so this wait ends in time even
      // when a wall-clock step moves Abseil's deadline.
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return wake_ || stop_;
      };
      absl::Duration wait = opts_.tick;
      if (pass_needed_ && capacity_freed_) {
        wait = std::min(wait, std::max(absl::ZeroDuration(),
                                       next_full_pass_mono_ -
                                           clock_->MonotonicNow()));
      }
      mu_.AwaitWithTimeout(absl::Condition(&woken), wait);
      if (stop_) return;
      wake_ = false;
    }
    Tick();
  }
}

void Controller::Tick() {
  scheduler::ClusterSnapshot snapshot;
  std::vector<scheduler::JobRequest> queue;
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!TickLocked(&snapshot, &queue)) {
      rendezvous_.Expire();
      return;
    }
    generation = generation_;
  }
  rendezvous_.Expire();
  // The pass: pure, and without the lock, so heartbeats and API calls go on.
  const absl::Time started = clock_->MonotonicNow();
  scheduler::Decisions decisions =
      scheduler::Schedule(std::move(snapshot), std::move(queue));
  // Timed before the lock: the pass, not the wait for the lock.
  const absl::Duration took = clock_->MonotonicNow() - started;
  absl::MutexLock lock(&mu_);
  if (opts_.telemetry != nullptr) opts_.telemetry->ObservePass(full_pass_, took);
  ApplyDecisions(std::move(decisions), generation);
  if (full_pass_) {
    const absl::Time now = clock_->MonotonicNow();
    next_full_pass_mono_ = now + 2 * (now - started);
  }
}

bool Controller::TickLocked(scheduler::ClusterSnapshot* snapshot,
                            std::vector<scheduler::JobRequest>* queue) {
  if (degraded_) {
    Probe();
    return false;
  }
  ProcessDisconnects();
  CheckLiveness();
  CheckTimeLimits();
  CheckParkedExits();
  StoreDueMetrics();
  AccrueUsage();
  const absl::Time now = clock_->MonotonicNow();
  if (now >= next_retention_mono_) {
    next_retention_mono_ = now + opts_.retention_interval;
    RunRetention();
  }
  if (now >= next_periodic_pass_mono_) {
    next_periodic_pass_mono_ = now + opts_.periodic_pass;
    if (!model_.jobs.pending().empty() || AnyElasticShort()) {
      capacity_freed_ = true;
      pass_needed_ = true;
    }
  }
  if (now >= next_eligible_mono_) {
    next_eligible_mono_ = absl::InfiniteFuture();
    capacity_freed_ = true;
    pass_needed_ = true;
  }
  if (!pass_needed_) return false;
  // Freed capacity goes to the queue in policy order, so a pass over only
  // the new jobs would jump it: wait for the next full pass instead.
  if (capacity_freed_ && now < next_full_pass_mono_) return false;
  pass_needed_ = false;
  return BuildSnapshot(snapshot, queue);
}

void Controller::ProcessDisconnects() {
  std::vector<std::pair<std::string, std::shared_ptr<AgentConnection>>> gone;
  {
    absl::MutexLock lock(&disconnect_mu_);
    gone.swap(disconnects_);
  }
  for (const auto& [name, conn] : gone) {
    NodeRecord* node = model_.nodes.Find(name);
    if (node == nullptr || node->conn != conn) continue;
    node->conn.reset();
    pass_needed_ = true;
    Log(absl::StrCat("node ", name, ": agent disconnected; lost in ",
                     HumanDuration(opts_.heartbeat_timeout),
                     " unless it reconnects"));
  }
}

void Controller::CheckLiveness() {
  const absl::Time now = clock_->MonotonicNow();
  const absl::Duration gap = now - last_tick_mono_;
  if (last_tick_mono_ != absl::InfinitePast() && gap > opts_.self_pause) {
    Log(absl::StrCat("the scheduler itself did not run for ",
                     HumanDuration(gap),
                     "; no node is counted silent for that time"));
    for (auto& [name, node] : model_.nodes.all()) node.last_heartbeat_mono += gap;
  }
  last_tick_mono_ = now;
  const std::vector<NodeRecord*> silent =
      model_.nodes.Silent(now, opts_.heartbeat_timeout);
  if (silent.empty()) {
    if (brake_since_ != absl::InfinitePast()) {
      Log("the silent nodes are back; nodes are counted lost again when "
          "they stay silent");
      brake_since_ = absl::InfinitePast();
      brake_reason_.clear();
    }
    return;
  }
  // Most of the fleet silent at once: more likely the scheduler's network
  // than that many nodes. Requeueing their jobs would pile them onto the
  // few nodes left and spend their retries; the brake holds for a while.
  // "At once": nodes a heartbeat apart pass the timeout a tick apart, so
  // those silent for half of it count with the silent ones.
  size_t fleet = 0, quiet = 0;
  for (const auto& [name, node] : model_.nodes.all()) {
    if (node.lost) continue;
    ++fleet;
    quiet += now - node.last_heartbeat_mono > opts_.heartbeat_timeout / 2;
  }
  if (quiet >= 2 && static_cast<double>(quiet) >
                        opts_.lost_brake_fraction * static_cast<double>(fleet)) {
    if (brake_since_ == absl::InfinitePast()) {
      brake_since_ = now;
      brake_reason_ = absl::StrCat(
          quiet, " of ", fleet, " nodes went silent at once; the "
          "scheduler's own network is the likely cause, so none is counted "
          "lost and their jobs stay put for up to ",
          HumanDuration(opts_.lost_brake_max),
          " (check the scheduler host's network; xl-scheduler "
          "--lost-brake-fraction)");
      Log(absl::StrCat("requeueing paused: ", brake_reason_));
    }
    if (now - brake_since_ < opts_.lost_brake_max) return;
    Log(absl::StrCat("the nodes stayed silent for ",
                     HumanDuration(now - brake_since_),
                     " under the brake; counting them lost"));
  }
  brake_since_ = absl::InfinitePast();
  brake_reason_.clear();
  for (NodeRecord* node : silent) {
    absl::Duration silent = now - node->last_heartbeat_mono;
    NodeLost(node, absl::StrCat("no heartbeat for ", HumanDuration(silent),
                                " (timeout ",
                                HumanDuration(opts_.heartbeat_timeout), ")"));
  }
}

void Controller::CheckTimeLimits() {
  const absl::Time now = clock_->MonotonicNow();
  std::vector<int64_t> active(model_.jobs.active().begin(), model_.jobs.active().end());
  for (int64_t id : active) {
    JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr || rec->stopping) continue;
    absl::Duration limit = FromProto(rec->job.spec().time_limit());
    if (limit <= absl::ZeroDuration()) continue;
    if (now - rec->start_mono >= limit) {
      // Ranks that exited before the limit count, output or not.
      if (!rec->parked_exits.empty()) {
        SettleExits(id, /*now=*/true);
        rec = model_.jobs.Find(id);
        if (rec == nullptr || rec->stopping ||
            !state::JobTable::IsActive(rec->job.state())) {
          continue;
        }
      }
      EndJob(rec, v1::FAILED,
             absl::StrCat("time limit of ", HumanDuration(limit),
                          " reached; the ranks were stopped (raise "
                          "time_limit to give it longer)"));
    }
  }
}

void Controller::RunRetention() {
  std::vector<FinishedJob> finished;
  int64_t running_bytes = 0;
  for (const auto& [id, rec] : model_.jobs.all()) {
    if (!state::JobTable::IsTerminal(rec.job.state())) {
      running_bytes += rec.log_bytes;
      continue;
    }
    // Only committed endings count: a job whose ending is in flight waits.
    if (!rec.committed || !state::JobTable::IsTerminal(rec.committed->state())) {
      continue;
    }
    // A job that an unfinished job's after_ok names is kept: forgetting it
    // would fail that job (at a pass, or when it is requeued).
    if (auto dep = dependents_.find(id); dep != dependents_.end()) {
      const bool named = std::any_of(
          dep->second.begin(), dep->second.end(), [&](int64_t d) {
            const JobRecord* r = model_.jobs.Find(d);
            return r != nullptr && !state::JobTable::IsTerminal(r->job.state());
          });
      if (named) continue;
      dependents_.erase(dep);
    }
    finished.push_back({id, FromProto(rec.job.end_time()), rec.log_bytes});
  }
  Prunes prunes = ChoosePrunes(std::move(finished), running_bytes,
                               clock_->Now(), opts_.retention);
  if (prunes.delete_jobs.empty() && prunes.delete_logs.empty()) return;
  Log(absl::StrCat("retention: forgetting ", prunes.delete_jobs.size(),
                   " finished jobs and the output of ",
                   prunes.delete_logs.size(), " more"));
  Effects effects;
  for (int64_t id : prunes.delete_jobs) {
    effects.changes.push_back(store::change::DeleteJob{id});
  }
  for (int64_t id : prunes.delete_logs) {
    effects.changes.push_back(store::change::DeleteLogs{id});
  }
  effects.apply = [this, prunes] {
    mu_.AssertHeld();
    for (int64_t id : prunes.delete_jobs) model_.jobs.Erase(id);
    for (int64_t id : prunes.delete_logs) {
      if (JobRecord* rec = model_.jobs.Find(id)) rec->log_bytes = 0;
    }
  };
  Apply(std::move(effects));
}

void SendAll(const Sends& sends) {
  for (const auto& [conn, msg] : sends) conn->Send(msg);
}

void Controller::SendAfterCommits(Sends sends) {
  if (sends.empty()) return;
  Effects effects;
  effects.sends = std::move(sends);
  Apply(std::move(effects));
}

// --- commits and degraded mode ---------------------------------------------

void Controller::Apply(Effects effects) {
  const uint64_t generation = generation_;
  auto batch = std::make_shared<const store::ChangeBatch>(
      store::ChangeBatch{std::move(effects.changes)});
  store_->WriteChanges(
      std::move(batch),
      [this, generation, apply = std::move(effects.apply),
       then = std::move(effects.then), sends = std::move(effects.sends),
       answer = std::move(effects.answer)](absl::Status st) {
        if (!st.ok()) {
          EnterDegraded(st);
          if (answer) {
            // A replicated scheduler's leader deposed mid-write: the next
            // leader may still apply it.
            const bool maybe =
                st.GetPayload("type.xl.dev/replica.may-commit").has_value();
            answer(absl::UnavailableError(absl::StrCat(
                "the scheduler could not record the change (", st.message(),
                maybe ? "); it may still be recorded by the next leader; "
                        "retry (a submit with the same idempotency key "
                        "gives the same job)"
                      : "); nothing was changed; retry once the scheduler "
                        "takes writes again")));
          }
          return;
        }
        bool current;
        {
          absl::MutexLock lock(&mu_);
          current = generation == generation_;
          if (current && apply) apply();
        }
        if (current) {
          if (then) then();
          SendAll(sends);
        }
        if (answer) answer(absl::OkStatus());
      });
}

Effects Controller::JobEffects(JobRecord* rec, std::vector<v1::JobEvent> events,
                               std::function<void()> then,
                               std::function<void(absl::Status)> answer) {
  auto snapshot = std::make_shared<const v1::Job>(rec->job);
  const int64_t last_seq = events.empty() ? 0 : events.back().seq();
  const int64_t id = rec->id;
  Effects effects;
  effects.changes = state::JobChanges(snapshot, std::move(events));
  effects.apply = [this, id, snapshot, last_seq] {
    mu_.AssertHeld();
    JobRecord* rec = model_.jobs.Find(id);
    if (rec != nullptr) {
      rec->committed = snapshot;
      rec->committed_event_seq = std::max(rec->committed_event_seq, last_seq);
    }
  };
  effects.then = [this, snapshot, then = std::move(then)] {
    NotifyListeners(snapshot->id());
    if (then) then();
  };
  effects.answer = std::move(answer);
  return effects;
}

void Controller::EnterDegraded(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (degraded_) return;
    degraded_ = true;
    ++generation_;
    degraded_reason_ = absl::StrCat(
        "the scheduler cannot write its database (", why.message(),
        "); it takes no changes and acts on nothing until a write succeeds "
        "again (tried every ",
        HumanDuration(opts_.probe_interval),
        "); free disk space or fix the device where --db lives");
    next_probe_mono_ = clock_->MonotonicNow() + opts_.probe_interval;
    wake_ = true;
    Log(degraded_reason_);
  }
  // Rendezvous needs no disk: ranks that are meeting go on meeting.
}

void Controller::Probe() {
  const absl::Time now = clock_->MonotonicNow();
  if (probe_in_flight_ || now < next_probe_mono_) return;
  probe_in_flight_ = true;
  next_probe_mono_ = now + opts_.probe_interval;
  store_->Probe([this](absl::Status st) {
                  if (st.ok()) {
                    Reload();
                    return;
                  }
                  absl::MutexLock lock(&mu_);
                  probe_in_flight_ = false;
                });
}

void Controller::Reload() {
  // Runs on the store's completion thread after the probe committed, so
  // every write queued before the probe is settled and on disk or not.
  auto state = store_->Load();
  std::vector<std::shared_ptr<AgentConnection>> conns;
  {
    absl::MutexLock lock(&mu_);
    probe_in_flight_ = false;
    if (!state.ok()) {
      Log(absl::StrCat("reloading after a failed write: ",
                       state.status().ToString()));
      return;
    }
    LoadModel(std::move(*state));
    ++generation_;
    degraded_ = false;
    degraded_reason_.clear();
    for (auto& [name, node] : model_.nodes.all()) {
      if (node.conn) conns.push_back(node.conn);
      node.conn.reset();
    }
    wake_ = true;
    Log("the database takes writes again; state reloaded from it, agents "
        "re-register");
  }
  // Every agent registers again and reports what it runs.
  for (auto& conn : conns) conn->Close("the scheduler reloaded its state");
  NotifyAllListeners();
}

void Controller::NotifyListeners(const std::string& job_id) {
  std::vector<std::function<void()>> calls;
  {
    absl::MutexLock lock(&listeners_mu_);
    auto it = listeners_.find(job_id);
    if (it == listeners_.end()) return;
    for (const auto& [id, fn] : it->second) calls.push_back(fn);
  }
  for (auto& fn : calls) fn();
}

void Controller::NotifyAllListeners() {
  std::vector<std::function<void()>> calls;
  {
    absl::MutexLock lock(&listeners_mu_);
    for (const auto& [job, fns] : listeners_) {
      for (const auto& [id, fn] : fns) calls.push_back(fn);
    }
  }
  for (auto& fn : calls) fn();
}

int64_t Controller::AddListener(const std::string& job_id,
                                std::function<void()> wake) {
  absl::MutexLock lock(&listeners_mu_);
  int64_t id = next_listener_++;
  listeners_[job_id][id] = std::move(wake);
  return id;
}

void Controller::RemoveListener(const std::string& job_id, int64_t id) {
  absl::MutexLock lock(&listeners_mu_);
  auto it = listeners_.find(job_id);
  if (it == listeners_.end()) return;
  it->second.erase(id);
  if (it->second.empty()) listeners_.erase(it);
}

}  // namespace xl::control
