#include "server/scheduler/queue_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "common/text.h"
#include "server/scheduler/job_spec.h"
#include "server/scheduler/queue_access.h"

namespace xl::scheduler {
namespace {

absl::Status Bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

constexpr int64_t kMaxGpus = int64_t{1} << 40;
constexpr int kMaxQuotas = 64;

int64_t Get(const std::map<std::string, int64_t>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}

std::string Gpus(int64_t n) {
  return absl::StrCat(n, n == 1 ? " GPU" : " GPUs");
}

}  // namespace

QueuePolicy QueuePolicy::FromSpec(const v1::QueueSpec& spec) {
  QueuePolicy p;
  p.name = spec.name();
  p.weight = spec.weight() > 0 ? spec.weight() : 1;
  p.cohort = spec.cohort();
  for (const v1::GpuQuota& q : spec.quotas()) {
    Quota& quota = p.quotas[q.gpu_model()];
    quota.nominal = q.nominal_gpus();
    quota.borrowing_limit =
        q.has_borrowing_limit_gpus() ? q.borrowing_limit_gpus().value() : -1;
    quota.lending_limit =
        q.has_lending_limit_gpus() ? q.lending_limit_gpus().value() : -1;
  }
  p.max_running_gpus_per_user = spec.max_running_gpus_per_user();
  p.reclaim = spec.reclaim_lent_quota();
  return p;
}

const std::string* QueuePolicy::KeyFor(const std::string& model) const {
  static const std::string kAny(kAnyModel);
  if (quotas.empty()) return &kAny;
  auto it = quotas.find(model);
  if (it != quotas.end()) return &it->first;
  it = quotas.find(kAnyModel);
  return it == quotas.end() ? nullptr : &it->first;
}

absl::Status ValidateQueueSpec(v1::QueueSpec* spec) {
  if (!ValidQueueName(spec->name())) {
    return Bad("name", absl::StrCat("'", Shown(spec->name()),
                                    "' is not a queue name; use 1-64 "
                                    "letters, digits, '-', '_' or '.'"));
  }
  if (spec->weight() == 0) spec->set_weight(1);
  if (!std::isfinite(spec->weight()) || spec->weight() < 0 ||
      spec->weight() > 1e6) {
    return Bad("weight", absl::StrCat(spec->weight(),
                                      " is not a weight; give a number "
                                      "above 0 and at most 1000000 "
                                      "(default 1)"));
  }
  if (!spec->cohort().empty() && !ValidQueueName(spec->cohort())) {
    return Bad("cohort", absl::StrCat("'", Shown(spec->cohort()),
                                      "' is not a cohort name; use 1-64 "
                                      "letters, digits, '-', '_' or '.'"));
  }
  if (spec->quotas_size() > kMaxQuotas) {
    return Bad("quotas", absl::StrCat(spec->quotas_size(),
                                      " quotas; at most ", kMaxQuotas));
  }
  std::set<std::string> models;
  for (int i = 0; i < spec->quotas_size(); ++i) {
    const v1::GpuQuota& q = spec->quotas(i);
    const std::string field = absl::StrCat("quotas[", i, "]");
    if (q.gpu_model().empty() || q.gpu_model().size() > 256 ||
        FindControlCharacter(q.gpu_model()) != std::string::npos) {
      return Bad(field + ".gpu_model",
                 "give an exact GPU model as xlctl nodes shows it (for "
                 "example \"NVIDIA H100 80GB HBM3\"), or \"*\" for any "
                 "other model; at most 256 printable characters");
    }
    if (!models.insert(q.gpu_model()).second) {
      return Bad(field + ".gpu_model",
                 absl::StrCat("'", Shown(q.gpu_model()),
                              "' has a quota already; give each model once"));
    }
    auto count = [&](const char* name, int64_t v) -> absl::Status {
      if (v < 0 || v > kMaxGpus) {
        return Bad(absl::StrCat(field, ".", name),
                   absl::StrCat(v, " is not a GPU count; give 0 or more"));
      }
      return absl::OkStatus();
    };
    if (absl::Status s = count("nominal_gpus", q.nominal_gpus()); !s.ok()) {
      return s;
    }
    if (q.has_borrowing_limit_gpus()) {
      if (absl::Status s = count("borrowing_limit_gpus",
                                 q.borrowing_limit_gpus().value());
          !s.ok()) {
        return s;
      }
      if (spec->cohort().empty() && q.borrowing_limit_gpus().value() > 0) {
        return Bad(field + ".borrowing_limit_gpus",
                   "a queue borrows only from its cohort; set cohort, or "
                   "drop the borrowing limit");
      }
    }
    if (q.has_lending_limit_gpus()) {
      if (absl::Status s = count("lending_limit_gpus", q.lending_limit_gpus().value());
          !s.ok()) {
        return s;
      }
      if (q.lending_limit_gpus().value() > q.nominal_gpus()) {
        return Bad(field + ".lending_limit_gpus",
                   absl::StrCat(q.lending_limit_gpus().value(),
                                " is more than the nominal ",
                                q.nominal_gpus(),
                                "; a queue lends only its own quota"));
      }
    }
  }
  // One order, so a spec that lists the same quotas differently is the
  // same spec.
  std::sort(spec->mutable_quotas()->begin(), spec->mutable_quotas()->end(),
            [](const v1::GpuQuota& a, const v1::GpuQuota& b) {
              return a.gpu_model() < b.gpu_model();
            });
  auto duration = [&](const char* name,
                      const google::protobuf::Duration& d) -> absl::Status {
    if (d.seconds() < 0 || d.nanos() < 0 ||
        d.seconds() > int64_t{366} * 24 * 3600) {
      return Bad(name, "give a duration from 0 (none) to 366 days, as 4h");
    }
    return absl::OkStatus();
  };
  if (absl::Status s = duration("default_time_limit",
                                spec->default_time_limit());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = duration("max_time_limit", spec->max_time_limit());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = duration("min_runtime", spec->min_runtime()); !s.ok()) {
    return s;
  }
  const absl::Duration def = FromProto(spec->default_time_limit());
  const absl::Duration max = FromProto(spec->max_time_limit());
  if (max > absl::ZeroDuration() && def > max) {
    return Bad("default_time_limit",
               absl::StrCat(HumanDuration(def), " is more than max_time_limit ",
                            HumanDuration(max), "; lower it or raise the "
                            "maximum"));
  }
  if (absl::Status s = ValidateCheckpointDir("default_checkpoint_dir",
                                             spec->default_checkpoint_dir());
      !s.ok()) {
    return s;
  }
  if (spec->max_running_gpus_per_user() < 0) {
    return Bad("max_running_gpus_per_user", "give 0 (no limit) or more");
  }
  if (spec->max_pending_jobs_per_user() < 0) {
    return Bad("max_pending_jobs_per_user", "give 0 (no limit) or more");
  }
  if (spec->max_processes_per_node() < 0 ||
      (spec->max_processes_per_node() > 0 &&
       spec->max_processes_per_node() < 16)) {
    return Bad("max_processes_per_node",
               "give 0 (the node's default) or at least 16: a training "
               "job's ranks, data loaders and their threads all count");
  }
  if (absl::Status s = ValidateQueueAdmission(*spec); !s.ok()) return s;
  return CheckNoControlCharacters(*spec, "queue");
}

QuotaBook::QuotaBook(
    const std::map<std::string, QueuePolicy>* policies,
    const std::map<std::string, std::map<std::string, int64_t>>& by_model,
    const std::map<std::string, std::map<std::string, int64_t>>& by_user)
    : policies_(policies), user_gpus_(by_user) {
  for (const auto& [queue, models] : by_model) {
    auto p = policies_->find(queue);
    if (p == policies_->end()) continue;
    for (const auto& [model, gpus] : models) {
      const std::string* key = p->second.KeyFor(model);
      // GPUs of a model the quotas do not cover (the queue changed while
      // they ran) count nowhere.
      if (key != nullptr) used_[queue][*key] += gpus;
    }
  }
  for (const auto& [name, policy] : *policies_) {
    if (!policy.cohort.empty()) cohorts_[policy.cohort].push_back(&policy);
  }
}

int64_t QuotaBook::Used(const std::string& queue,
                        const std::string& key) const {
  auto it = used_.find(queue);
  return it == used_.end() ? 0 : Get(it->second, key);
}

int64_t QuotaBook::Borrowed(const std::string& queue) const {
  auto p = policies_->find(queue);
  if (p == policies_->end()) return 0;
  int64_t borrowed = 0;
  for (const auto& [key, quota] : p->second.quotas) {
    borrowed += std::max<int64_t>(0, Used(queue, key) - quota.nominal);
  }
  return borrowed;
}

std::string QuotaBook::CheckKey(const QueuePolicy& q, const std::string& key,
                                int64_t gpus, bool* lent) const {
  if (lent != nullptr) *lent = false;
  const Quota& quota = q.quotas.at(key);
  const int64_t used = Used(q.name, key);
  const int64_t after = used + gpus;
  const std::string what =
      key == kAnyModel ? std::string("GPUs of other models")
                       : absl::StrCat(key, " GPUs");
  // What it never lends is its own whatever the cohort does.
  if (quota.lending_limit >= 0 &&
      after <= quota.nominal - quota.lending_limit) {
    return "";
  }
  if (q.cohort.empty()) {
    if (after <= quota.nominal) return "";
    return absl::StrCat("queue ", q.name, "'s quota of ", quota.nominal, " ",
                        what, " is used up (", used, " in use, the job needs ",
                        gpus, "); it waits for the queue's jobs to end");
  }
  if (quota.borrowing_limit >= 0 &&
      after > quota.nominal + quota.borrowing_limit) {
    return absl::StrCat("queue ", q.name, " would hold ", after, " ", what,
                        ", past its nominal ", quota.nominal,
                        " plus borrowing limit ", quota.borrowing_limit,
                        " (", used, " in use); it waits for the queue's jobs "
                        "to end");
  }
  // The cohort: what its queues hold beyond their nominal never exceeds
  // what they leave unused of theirs, within each one's lending limit (as
  // Kueue: the cohort's total is the bound, also for a queue within its
  // own nominal whose unused part others borrowed).
  int64_t borrowed = 0, lendable = 0;
  for (const QueuePolicy* member : cohorts_.at(q.cohort)) {
    auto it = member->quotas.find(key);
    if (it == member->quotas.end()) continue;
    const Quota& mq = it->second;
    const int64_t u = Used(member->name, key) + (member == &q ? gpus : 0);
    borrowed += std::max<int64_t>(0, u - mq.nominal);
    const int64_t unused = std::max<int64_t>(0, mq.nominal - u);
    lendable += mq.lending_limit >= 0 ? std::min(unused, mq.lending_limit)
                                      : unused;
  }
  if (borrowed <= lendable) return "";
  if (after <= quota.nominal) {
    if (lent != nullptr) *lent = true;
    return absl::StrCat(
        "queue ", q.name, " is within its nominal ", quota.nominal, " ", what,
        " (", used, " in use, the job needs ", gpus, "), but cohort ",
        q.cohort, "'s other queues borrowed that part; it waits for their "
        "jobs to end or be preempted to give it back (a lending_limit keeps "
        "part of the quota for the queue alone)");
  }
  return absl::StrCat("queue ", q.name, " is at ", used, " of its nominal ",
                      quota.nominal, " ", what, " and the job needs ", gpus,
                      "; cohort ", q.cohort, " would lend ", lendable,
                      " but would be lending ", borrowed,
                      "; it waits for GPUs of the queue or the cohort to free");
}

bool QuotaBook::Admit(const std::string& queue, const std::string& user,
                      int64_t gpus, const std::vector<std::string>& models,
                      std::vector<std::string>* allowed,
                      std::string* reason, bool* reclaimable) const {
  allowed->clear();
  if (reclaimable != nullptr) *reclaimable = false;
  auto p = policies_->find(queue);
  if (p == policies_->end() || gpus <= 0) {
    allowed->assign(models.begin(), models.end());
    return true;
  }
  const QueuePolicy& q = p->second;
  if (q.max_running_gpus_per_user > 0) {
    int64_t held = 0;
    if (auto u = user_gpus_.find(queue); u != user_gpus_.end()) {
      held = Get(u->second, user);
    }
    if (held + gpus > q.max_running_gpus_per_user) {
      *reason = absl::StrCat(
          "user ", user, " holds ", Gpus(held), " in queue ", queue,
          " and the job needs ", gpus, " more; the queue allows ",
          q.max_running_gpus_per_user,
          " per user (max_running_gpus_per_user); it waits for their jobs "
          "there to end");
      return false;
    }
  }
  if (q.quotas.empty()) {
    allowed->assign(models.begin(), models.end());
    return true;
  }
  std::map<std::string, std::string> verdicts;  // key -> "" or why not
  std::string first_why;
  std::vector<std::string> uncovered;
  for (const std::string& model : models) {
    const std::string* key = q.KeyFor(model);
    if (key == nullptr) {
      uncovered.push_back(model);
      continue;
    }
    auto [it, added] = verdicts.emplace(*key, "");
    if (added) {
      bool lent = false;
      it->second = CheckKey(q, *key, gpus, &lent);
      if (lent && reclaimable != nullptr) *reclaimable = true;
    }
    if (it->second.empty()) {
      allowed->push_back(model);
    } else if (first_why.empty()) {
      first_why = it->second;
    }
  }
  if (!allowed->empty()) return true;
  if (!first_why.empty()) {
    *reason = first_why;
  } else {
    *reason = absl::StrCat(
        "queue ", queue, " has no quota for the GPU models the job could use (",
        absl::StrJoin(uncovered, ", "),
        "); an admin adds one with xlctl queue set ", queue,
        " --quota MODEL=GPUS");
  }
  return false;
}

void QuotaBook::Charge(const std::string& queue, const std::string& user,
                       const std::map<std::string, int64_t>& gpus_by_model) {
  auto p = policies_->find(queue);
  if (p == policies_->end()) return;
  for (const auto& [model, gpus] : gpus_by_model) {
    int64_t& held = user_gpus_[queue][user];
    held = std::max<int64_t>(0, held + gpus);
    if (const std::string* key = p->second.KeyFor(model)) {
      int64_t& used = used_[queue][*key];
      used = std::max<int64_t>(0, used + gpus);
    }
  }
}

void DecayedUsage::Add(double amount, absl::Time now,
                       absl::Duration half_life) {
  value = At(now, half_life) + amount;
  if (as_of == absl::InfinitePast() || now > as_of) as_of = now;
}

void DecayedUsage::Decay(absl::Duration elapsed, absl::Duration half_life,
                         absl::Time now) {
  if (elapsed > absl::ZeroDuration() && half_life > absl::ZeroDuration()) {
    value *= std::exp2(-absl::FDivDuration(elapsed, half_life));
  }
  as_of = now;
}

double DecayedUsage::At(absl::Time now, absl::Duration half_life) const {
  if (as_of == absl::InfinitePast() || now <= as_of ||
      half_life <= absl::ZeroDuration()) {
    return value;
  }
  return value * std::exp2(-absl::FDivDuration(now - as_of, half_life));
}

FairShare::FairShare(
    const std::map<std::string, double>& weights,
    const std::map<std::string, double>& queue_usage,
    const std::map<std::pair<std::string, std::string>, double>& user_usage,
    const std::map<std::string, int64_t>& active_users)
    : weights_(weights),
      queue_usage_(queue_usage),
      user_usage_(user_usage),
      active_users_(active_users) {
  for (const auto& [q, w] : weights_) total_weight_ += w;
  for (const auto& [q, u] : queue_usage_) total_usage_ += u;
}

double FairShare::QueueShare(const std::string& queue) const {
  auto it = weights_.find(queue);
  const double w = it == weights_.end() ? 1 : it->second;
  return total_weight_ > 0 ? w / total_weight_ : 1;
}

double FairShare::UserShare(const std::string& queue) const {
  auto it = active_users_.find(queue);
  const int64_t users = it == active_users_.end() ? 1 : std::max<int64_t>(1, it->second);
  return QueueShare(queue) / static_cast<double>(users);
}

double FairShare::QueueUsage(const std::string& queue) const {
  if (total_usage_ <= 0) return 0;
  auto it = queue_usage_.find(queue);
  return it == queue_usage_.end() ? 0 : it->second / total_usage_;
}

double FairShare::UserUsage(const std::string& queue,
                            const std::string& user) const {
  if (total_usage_ <= 0) return 0;
  auto it = user_usage_.find({queue, user});
  return it == user_usage_.end() ? 0 : it->second / total_usage_;
}

double FairShare::FactorOf(double usage, double share) {
  if (usage <= 0) return 1;
  if (share <= 0) return 0;
  return std::exp2(-usage / share);
}

double FairShare::QueueFactor(const std::string& queue) const {
  return FactorOf(QueueUsage(queue), QueueShare(queue));
}

double FairShare::UserFactor(const std::string& queue,
                             const std::string& user) const {
  auto q = queue_usage_.find(queue);
  auto u = user_usage_.find({queue, user});
  if (q == queue_usage_.end() || q->second <= 0 || u == user_usage_.end()) {
    return 1;
  }
  auto it = active_users_.find(queue);
  const int64_t users =
      it == active_users_.end() ? 1 : std::max<int64_t>(1, it->second);
  return FactorOf(u->second / q->second, 1.0 / static_cast<double>(users));
}

double FairShare::Factor(const std::string& queue,
                         const std::string& user) const {
  return QueueFactor(queue) * UserFactor(queue, user);
}

double EffectivePriority(int32_t priority, double fair_share_factor,
                         absl::Duration waited, const PriorityWeights& w,
                         double* age_factor) {
  double age = 0;
  if (w.max_age > absl::ZeroDuration() && waited > absl::ZeroDuration()) {
    age = std::min(1.0, absl::FDivDuration(waited, w.max_age));
  }
  if (age_factor != nullptr) *age_factor = age;
  return priority + w.fair_share * fair_share_factor + w.age * age;
}

}  // namespace xl::scheduler
