#include "server/scheduler/pass/policy_gate.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/scheduler/pass/preemptor.h"

namespace xl::scheduler {

PolicyGate::PolicyGate(const ClusterSnapshot& snapshot, const FleetIndex& fleet)
    : snapshot_(snapshot) {
  if (snapshot.policies.empty()) return;
  std::map<std::string, std::map<std::string, int64_t>> by_model, by_user;
  for (const auto& [name, usage] : snapshot.queues) {
    if (snapshot.policies.count(name) == 0) continue;
    by_model[name] = usage.gpus_by_model;
    by_user[name] = usage.user_gpus;
  }
  book_ = std::make_unique<QuotaBook>(&snapshot.policies, by_model, by_user);
  // What the running gangs hold, before this pass starts anything.
  if (snapshot.policy_frees) before_ = std::make_unique<QuotaBook>(*book_);
  std::set<std::string> models;
  for (const NodeInfo* layout : fleet.layouts()) {
    for (const NodeInfo::Gpu& gpu : layout->gpus) models.insert(gpu.model);
  }
  models_.assign(models.begin(), models.end());
}

bool PolicyGate::governs(const JobRequest& job) const {
  return book_ != nullptr && job.resources != nullptr &&
         job.resources->gpus_per_node() > 0 &&
         snapshot_.policies.count(job.queue) > 0;
}

bool PolicyGate::Admit(JobRequest* job, bool* narrowed,
                       std::shared_ptr<const std::string>* why,
                       bool* reclaimable) {
  const v1::ResourceRequest& req = *job->resources;
  const int64_t gpus = int64_t{req.nodes()} * req.gpus_per_node();
  // What failed stays failed for the pass while usage only grows (a
  // reclaim, which gives some back, forgets these).
  const Key key{job->queue, job->user, gpus, job->resources.get()};
  if (auto f = failed_.find(key); f != failed_.end()) {
    *why = f->second.first;
    *reclaimable = f->second.second;
    return false;
  }
  std::string reason;
  if (!AdmitWith(*book_, job, narrowed, &reason, reclaimable)) {
    *why = std::make_shared<const std::string>(reason);
    failed_[key] = {*why, *reclaimable};
    return false;
  }
  return true;
}

bool PolicyGate::Reclaim(JobRequest* job,
                         const std::vector<RunningGang>& running,
                         const std::unordered_set<std::string>& preempted,
                         std::vector<const RunningGang*>* victims,
                         bool* narrowed) {
  const QueuePolicy& own = snapshot_.policies.at(job->queue);
  if (own.cohort.empty() || !own.reclaim) return false;
  const std::vector<std::string> usable = UsableModels(*job->resources);
  // Only gangs that hold GPUs the job could use, of a queue that holds
  // more of that model's quota than its nominal: what was lent.
  std::vector<const RunningGang*> candidates;
  for (const RunningGang& g : running) {
    auto p = snapshot_.policies.find(g.queue);
    if (!g.preemptible || g.shares.empty() || g.queue == job->queue ||
        preempted.count(g.job_id) > 0 || p == snapshot_.policies.end() ||
        p->second.cohort != own.cohort) {
      continue;
    }
    bool borrowed = false;
    for (const auto& [model, n] : ModelsOf(g.shares)) {
      const std::string* key = p->second.KeyFor(model);
      if (key == nullptr ||
          std::find(usable.begin(), usable.end(), model) == usable.end()) {
        continue;
      }
      auto quota = p->second.quotas.find(*key);
      borrowed |= quota != p->second.quotas.end() &&
                  book_->Used(g.queue, *key) > quota->second.nominal;
    }
    if (borrowed) candidates.push_back(&g);
  }
  SortVictims(&candidates);
  trial_ = std::make_unique<QuotaBook>(*book_);
  victims->clear();
  std::string reason;
  bool reclaimable = false;
  auto charge = [&](const RunningGang* g, int sign) {
    std::map<std::string, int64_t> held = ModelsOf(g->shares);
    for (auto& [model, n] : held) n *= sign;
    trial_->Charge(g->queue, g->user, held);
  };
  auto admits = [&](JobRequest* attempt, bool* narrow) {
    *attempt = *job;
    *narrow = false;
    return AdmitWith(*trial_, attempt, narrow, &reason, &reclaimable);
  };
  JobRequest attempt;
  bool narrow = false;
  for (const RunningGang* g : candidates) {
    charge(g, -1);
    victims->push_back(g);
    if (!admits(&attempt, &narrow)) continue;
    // Those not needed after all go back (the last added is needed).
    for (size_t k = victims->size() - 1; k-- > 0;) {
      charge((*victims)[k], +1);
      JobRequest without;
      bool n = false;
      if (admits(&without, &n)) {
        victims->erase(victims->begin() + k);
      } else {
        charge((*victims)[k], -1);
      }
    }
    admits(&attempt, &narrow);
    *job = std::move(attempt);
    *narrowed = narrow;
    return true;
  }
  return false;
}

void PolicyGate::CommitReclaim() {
  book_ = std::move(trial_);
  failed_.clear();
}

absl::Time PolicyGate::FreesAt(const JobRequest& job,
                               const std::vector<RunningGang>& running) {
  const Key key{
      job.queue, job.user,
      int64_t{job.resources->nodes()} * job.resources->gpus_per_node(),
      job.resources.get()};
  if (auto f = frees_.find(key); f != frees_.end()) return f->second;
  const QueuePolicy& own = snapshot_.policies.at(job.queue);
  std::vector<const RunningGang*> ending;
  for (const RunningGang& g : running) {
    if (g.shares.empty() || g.expected_end == absl::InfiniteFuture()) {
      continue;
    }
    if (g.queue != job.queue) {
      auto p = snapshot_.policies.find(g.queue);
      if (own.cohort.empty() || p == snapshot_.policies.end() ||
          p->second.cohort != own.cohort) {
        continue;
      }
    }
    ending.push_back(&g);
  }
  std::sort(ending.begin(), ending.end(),
            [](const RunningGang* a, const RunningGang* b) {
              return a->expected_end < b->expected_end;
            });
  QuotaBook trial(*before_);
  absl::Time at = absl::InfiniteFuture();
  for (size_t i = 0; i < ending.size(); ++i) {
    std::map<std::string, int64_t> held = ModelsOf(ending[i]->shares);
    for (auto& [model, n] : held) n = -n;
    trial.Charge(ending[i]->queue, ending[i]->user, held);
    // Gangs ending at the same time free their GPUs together.
    if (i + 1 < ending.size() &&
        ending[i + 1]->expected_end == ending[i]->expected_end) {
      continue;
    }
    JobRequest attempt = job;
    bool narrowed = false, reclaimable = false;
    std::string reason;
    if (AdmitWith(trial, &attempt, &narrowed, &reason, &reclaimable)) {
      at = ending[i]->expected_end;
      break;
    }
  }
  frees_[key] = at;
  return at;
}

void PolicyGate::ChargeReserved(
    const JobRequest& job, const std::map<std::string, int64_t>& by_model) {
  if (!by_model.empty()) {
    book_->Charge(job.queue, job.user, by_model);
    return;
  }
  const v1::ResourceRequest& req = *job.resources;
  const std::vector<std::string> usable = UsableModels(req);
  if (usable.empty()) return;
  book_->Charge(job.queue, job.user,
                {{usable.front(), int64_t{req.nodes()} * req.gpus_per_node()}});
}

void PolicyGate::ChargeHold(const Reservation& r) {
  if (book_ == nullptr || snapshot_.policies.count(r.queue) == 0) return;
  book_->Charge(r.queue, r.user, r.gpus_by_model);
}

std::map<std::string, int64_t> PolicyGate::ModelsOf(
    const std::vector<NodeShare>& shares) {
  if (infos_.empty()) {
    for (const NodeCapacity& n : snapshot_.nodes) {
      infos_[n.name()] = n.info.get();
    }
  }
  std::map<std::string, int64_t> by_model;
  for (const NodeShare& share : shares) {
    auto it = infos_.find(share.node);
    if (it != infos_.end()) {
      AddGpuModels(*it->second, share.gpu_indices, &by_model);
    }
  }
  return by_model;
}

std::string PolicyGate::NarrowedWhy(const JobRequest& job) const {
  return absl::StrCat("queue ", job.queue, "'s quota has room only for ",
                      absl::StrJoin(job.resources->gpu_models(), ", "),
                      " now: ");
}

void PolicyGate::Charge(const JobRequest& job, const Placement& placement) {
  book_->Charge(job.queue, job.user, ModelsOf(placement.shares));
}

std::vector<std::string> PolicyGate::UsableModels(
    const v1::ResourceRequest& req) const {
  std::vector<std::string> usable;
  for (const std::string& m : models_) {
    if (req.gpu_models_size() == 0 ||
        std::find(req.gpu_models().begin(), req.gpu_models().end(), m) !=
            req.gpu_models().end()) {
      usable.push_back(m);
    }
  }
  return usable;
}

bool PolicyGate::AdmitWith(const QuotaBook& book, JobRequest* job,
                           bool* narrowed, std::string* reason,
                           bool* reclaimable) {
  const v1::ResourceRequest& req = *job->resources;
  const int64_t gpus = int64_t{req.nodes()} * req.gpus_per_node();
  const std::vector<std::string> usable = UsableModels(req);
  // No GPU of the fleet is what it asks for: its class says so.
  if (usable.empty()) return true;
  std::vector<std::string> allowed;
  if (!book.Admit(job->queue, job->user, gpus, usable, &allowed, reason,
                  reclaimable)) {
    return false;
  }
  if (allowed.size() < usable.size()) {
    std::shared_ptr<const v1::ResourceRequest>& n =
        narrowed_[{job->resources.get(), absl::StrJoin(allowed, "\n")}];
    if (n == nullptr) {
      auto copy = std::make_shared<v1::ResourceRequest>(req);
      copy->clear_gpu_models();
      for (const std::string& m : allowed) copy->add_gpu_models(m);
      n = std::move(copy);
    }
    job->resources = n;
    *narrowed = true;
  }
  return true;
}

}  // namespace xl::scheduler
