// Fair share in the controller: GPU time counted into each queue's and user's
// decayed usage, stored about once a minute, and turned into each pending
// job's effective priority; GetShares shows it.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "common/status.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/control/controller.h"

namespace xl::control {
namespace {

// GPUs the job's attempt holds.
int64_t GpusOf(const v1::Job& job) {
  int64_t n = 0;
  for (const v1::Allocation& a : job.allocations()) n += a.gpu_indices_size();
  return n;
}

}  // namespace

void Controller::AccrueUsage() {
  const absl::Time mono = clock_->MonotonicNow();
  if (last_accrual_mono_ == absl::InfinitePast()) {
    last_accrual_mono_ = mono;
    next_usage_store_mono_ = mono + opts_.usage_store_interval;
    return;
  }
  const absl::Duration dt = mono - last_accrual_mono_;
  if (dt < opts_.usage_interval) return;
  last_accrual_mono_ = mono;
  // GPU time on the monotonic clock; the decay, which must survive a
  // restart, on the wall clock (a step back decays nothing).
  const absl::Time wall = clock_->Now();
  const double seconds = absl::ToDoubleSeconds(dt);
  const absl::Duration half_life = opts_.priority_weights.half_life;
  std::map<std::pair<std::string, std::string>, int64_t> gpus;
  for (int64_t id : model_.jobs.active()) {
    const JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr) continue;
    const int64_t n = GpusOf(rec->job);
    if (n > 0) gpus[{rec->job.spec().queue(), rec->job.user()}] += n;
  }
  for (auto& [queue, u] : model_.queue_usage) u.Decay(dt, half_life, wall);
  for (auto& [key, u] : model_.user_usage) u.Decay(dt, half_life, wall);
  for (const auto& [key, n] : gpus) {
    scheduler::DecayedUsage& q = model_.queue_usage[key.first];
    scheduler::DecayedUsage& u = model_.user_usage[key];
    q.value += n * seconds;
    q.as_of = wall;
    u.value += n * seconds;
    u.as_of = wall;
  }
  if (mono >= next_usage_store_mono_) {
    next_usage_store_mono_ = mono + opts_.usage_store_interval;
    StoreUsage();
  }
}

void Controller::StoreUsage() {
  if (model_.queue_usage.empty()) return;
  // Usage decayed below a GPU-second is forgotten (in memory and on disk),
  // so rows of users and queues long gone do not pile up.
  constexpr double kForgotten = 1.0;
  std::vector<store::StoredUsage> rows;
  // A queue being deleted: its delete forgets its usage on disk, and its
  // `then` in memory; a row written between them would outlive both.
  auto deleting = [&](const std::string& queue) {
    auto w = queue_writing_.find(queue);
    return w != queue_writing_.end() && !w->second;
  };
  for (auto it = model_.queue_usage.begin(); it != model_.queue_usage.end();) {
    if (deleting(it->first)) {
      ++it;
      continue;
    }
    const bool gone = it->second.value < kForgotten;
    rows.push_back(
        {it->first, "", gone ? 0 : it->second.value, it->second.as_of});
    it = gone ? model_.queue_usage.erase(it) : std::next(it);
  }
  for (auto it = model_.user_usage.begin(); it != model_.user_usage.end();) {
    if (deleting(it->first.first)) {
      ++it;
      continue;
    }
    const bool gone = it->second.value < kForgotten;
    rows.push_back({it->first.first, it->first.second,
                    gone ? 0 : it->second.value, it->second.as_of});
    it = gone ? model_.user_usage.erase(it) : std::next(it);
  }
  Effects effects;
  for (auto& row : rows) {
    effects.changes.push_back(store::change::PutUsage{std::move(row)});
  }
  Apply(std::move(effects));
}

const Controller::ShareInputs& Controller::Shares() {
  const absl::Time now = clock_->MonotonicNow();
  if (shares_cache_mono_ == absl::InfinitePast() ||
      now - shares_cache_mono_ >= opts_.usage_interval ||
      now < shares_cache_mono_) {
    shares_cache_ = CollectShares();
    shares_cache_mono_ = now;
  }
  return shares_cache_;
}

Controller::ShareInputs Controller::CollectShares() const {
  ShareInputs in;
  for (const auto& [name, queue] : model_.queues) {
    in.weights[name] = queue.spec().weight() > 0 ? queue.spec().weight() : 1;
  }
  if (in.weights.count(scheduler::kDefaultQueue) == 0) {
    in.weights[scheduler::kDefaultQueue] = 1;
  }
  const absl::Time wall = clock_->Now();
  const absl::Duration half_life = opts_.priority_weights.half_life;
  for (const auto& [queue, u] : model_.queue_usage) {
    if (in.weights.count(queue) == 0) continue;
    in.queue_usage[queue] = u.At(wall, half_life);
  }
  for (const auto& [key, u] : model_.user_usage) {
    if (in.weights.count(key.first) == 0) continue;
    in.user_usage[key] = u.At(wall, half_life);
  }
  std::set<std::pair<std::string, std::string>> active;
  for (const auto& [key, n] : model_.jobs.pending_by_queue_user()) {
    active.insert(key);
    in.user_pending[key] = n;
  }
  for (int64_t id : model_.jobs.active()) {
    const JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr) continue;
    const std::pair<std::string, std::string> key(rec->job.spec().queue(),
                                                  rec->job.user());
    active.insert(key);
    const int64_t n = GpusOf(rec->job);
    in.running_gpus[key.first] += n;
    in.user_running_gpus[key] += n;
  }
  for (const auto& key : active) ++in.active_users[key.first];
  // Jobs of a queue nobody defined (from before queues were objects) are
  // ranked as a queue of weight 1, not as one that used nothing.
  bool added = false;
  for (const auto& [queue, users] : in.active_users) {
    added |= in.weights.emplace(queue, 1.0).second;
  }
  if (added) {
    for (const auto& [queue, u] : model_.queue_usage) {
      if (in.weights.count(queue) > 0 && in.queue_usage.count(queue) == 0) {
        in.queue_usage[queue] = u.At(wall, half_life);
      }
    }
    for (const auto& [key, u] : model_.user_usage) {
      if (in.weights.count(key.first) > 0 && in.user_usage.count(key) == 0) {
        in.user_usage[key] = u.At(wall, half_life);
      }
    }
  }
  return in;
}

absl::Time Controller::PendingSince(const JobRecord& rec) const {
  if (!rec.events.empty() && rec.events.back().to_state() == v1::PENDING) {
    return FromProto(rec.events.back().time());
  }
  return FromProto(rec.job.create_time());
}

bool Controller::SwitchLimitRelaxed(const JobRecord& rec,
                                    absl::Time wall_now) const {
  const v1::ResourceRequest& want = rec.job.spec().resources();
  const absl::Duration wait = FromProto(want.max_switches_wait());
  return want.max_switches() > 0 && wait > absl::ZeroDuration() &&
         wall_now - PendingSince(rec) >= wait;
}

scheduler::JobRequest Controller::QueueEntry(const JobRecord& rec,
                                             double fair_share_factor,
                                             absl::Time wall_now,
                                             absl::Time mono_now) const {
  scheduler::JobRequest entry = rec.as_request;
  entry.effective_priority = EffectiveOf(rec, fair_share_factor, wall_now);
  if (auto p = preempting_.find(rec.id);
      p != preempting_.end() && p->second > mono_now) {
    entry.may_preempt = false;
  }
  if (rec.relaxed != nullptr && SwitchLimitRelaxed(rec, wall_now)) {
    entry.resources = rec.relaxed;
  }
  // An elastic job restarting after a resize, while it waits for its own
  // ranks: on at least the nodes it holds.
  if (rec.restart_request != nullptr && !entry.may_preempt) {
    entry.resources = rec.restart_request;
  }
  // The node its last attempt failed on is avoided for a while, where
  // other nodes have room.
  if (rec.avoiding != nullptr && rec.avoid_until_mono > mono_now) {
    entry.preferred = rec.avoiding;
  }
  return entry;
}

double Controller::EffectiveOf(const JobRecord& rec, double fair_share_factor,
                               absl::Time wall_now, double* age_factor) const {
  return scheduler::EffectivePriority(
      rec.job.spec().priority(), fair_share_factor,
      wall_now - PendingSince(rec), opts_.priority_weights, age_factor);
}

v1::GetSharesResponse Controller::GetShares() {
  absl::MutexLock lock(&mu_);
  const ShareInputs& in = Shares();
  const scheduler::FairShare fs(in.weights, in.queue_usage, in.user_usage,
                                in.active_users);
  v1::GetSharesResponse resp;
  auto get = [](const auto& m, const auto& k) {
    auto it = m.find(k);
    return it == m.end() ? decltype(it->second){} : it->second;
  };
  std::set<std::pair<std::string, std::string>> users;
  for (const auto& [key, u] : in.user_usage) users.insert(key);
  for (const auto& [key, n] : in.user_pending) users.insert(key);
  for (const auto& [key, n] : in.user_running_gpus) users.insert(key);
  for (const auto& [queue, weight] : in.weights) {
    v1::ShareRow* row = resp.add_rows();
    row->set_queue(queue);
    row->set_weight(weight);
    row->set_share(fs.QueueShare(queue));
    row->set_gpu_hours(get(in.queue_usage, queue) / 3600);
    row->set_usage(fs.QueueUsage(queue));
    row->set_fair_share_factor(fs.QueueFactor(queue));
    row->set_running_gpus(get(in.running_gpus, queue));
    for (auto it = users.lower_bound({queue, ""});
         it != users.end() && it->first == queue; ++it) {
      v1::ShareRow* u = resp.add_rows();
      u->set_queue(queue);
      u->set_user(it->second);
      u->set_weight(weight);
      u->set_share(fs.UserShare(queue));
      u->set_gpu_hours(get(in.user_usage, *it) / 3600);
      u->set_usage(fs.UserUsage(queue, it->second));
      u->set_fair_share_factor(fs.Factor(queue, it->second));
      u->set_running_gpus(get(in.user_running_gpus, *it));
      u->set_pending_jobs(get(in.user_pending, *it));
      row->set_pending_jobs(row->pending_jobs() + u->pending_jobs());
    }
  }
  *resp.mutable_half_life() = ToProtoDuration(opts_.priority_weights.half_life);
  resp.set_fair_share_weight(opts_.priority_weights.fair_share);
  resp.set_age_weight(opts_.priority_weights.age);
  *resp.mutable_max_age() = ToProtoDuration(opts_.priority_weights.max_age);
  return resp;
}

}  // namespace xl::control
