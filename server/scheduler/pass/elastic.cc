#include "server/scheduler/pass/elastic.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/scheduler/pass/share_fit.h"
#include "server/scheduler/request_class.h"

namespace xl::scheduler {

int32_t MinNodes(const JobRequest& job) {
  return job.resources != nullptr &&
                 job.resources->min_nodes() < job.resources->nodes()
             ? job.resources->min_nodes()
             : 0;
}

std::shared_ptr<const v1::ResourceRequest> ElasticSizes::Of(
    const std::shared_ptr<const v1::ResourceRequest>& base, int32_t nodes) {
  auto& entry = sized_[{base.get(), nodes}];
  if (entry.second == nullptr) {
    auto r = std::make_shared<v1::ResourceRequest>(*base);
    r->set_nodes(nodes);
    r->set_min_nodes(0);
    entry = {base, std::move(r)};
  }
  return entry.second;
}

void GrowElastic(const ClusterSnapshot& snapshot,
                 const std::unordered_set<std::string>& preempted,
                 std::optional<double> first_waiting_rank, FleetIndex* fleet,
                 PolicyGate* policy, Decisions* out) {
  if (snapshot.max_grows <= 0) return;
  std::vector<RequestClass::Pick> picks;
  std::vector<const RunningGang*> growable;
  for (const RunningGang& g : snapshot.running) {
    if (g.may_grow && g.request != nullptr && g.min_nodes > 0 &&
        preempted.count(g.job_id) == 0 &&
        static_cast<int32_t>(g.nodes.size()) < g.request->nodes() &&
        (!first_waiting_rank.has_value() || g.rank > *first_waiting_rank)) {
      growable.push_back(&g);
    }
  }
  std::stable_sort(growable.begin(), growable.end(),
                   [](const RunningGang* a, const RunningGang* b) {
                     return a->rank > b->rank;
                   });
  int tries = snapshot.max_grows;
  // Every request tried stays alive for the pass: the quota gate keeps
  // what it decided by the request's address.
  std::vector<std::shared_ptr<const v1::ResourceRequest>> tried;
  for (const RunningGang* g : growable) {
    if (tries-- <= 0) break;
    const int32_t have = static_cast<int32_t>(g->nodes.size());
    auto more = std::make_shared<v1::ResourceRequest>(*g->request);
    more->set_min_nodes(0);
    for (const std::string& node : g->nodes) more->add_exclude_nodes(node);
    JobRequest as;
    as.job_id = g->job_id;
    as.priority = g->priority;
    as.queue = g->queue;
    as.user = g->user;
    int32_t n = g->request->nodes() - have;
    while (n >= 1) {
      more->set_nodes(n);
      as.resources = std::make_shared<const v1::ResourceRequest>(*more);
      tried.push_back(as.resources);
      if (policy->governs(as)) {
        bool narrow = false, reclaimable = false;
        std::shared_ptr<const std::string> why;
        if (!policy->Admit(&as, &narrow, &why, &reclaimable)) {
          --n;
          continue;
        }
      }
      RequestClass klass(*fleet, *as.resources);
      if (!klass.Choose(&picks)) {
        n = static_cast<int32_t>(std::min<int64_t>(n - 1, klass.fitting()));
        continue;
      }
      Placement added;
      for (const auto& pick : picks) {
        added.shares.push_back(
            ShareOf(fleet->node_at(pick.slot), pick.gpus, klass.needs()));
        fleet->Take(pick.slot, pick.gpus, klass.needs());
      }
      if (policy->governs(as)) policy->Charge(as, added);
      Grow grow;
      grow.job_id = g->job_id;
      grow.from = have;
      std::vector<NodeShare> all = g->shares;
      std::vector<std::string> new_nodes;
      for (const NodeShare& share : added.shares) {
        all.push_back(share);
        new_nodes.push_back(share.node);
      }
      for (const NodeShare& share : all) grow.nodes.push_back(share.node);
      grow.reason = absl::StrCat(
          "elastic: growing from ", have, " to ", all.size(), " of ",
          g->request->nodes(), " nodes (", absl::StrJoin(new_nodes, ", "),
          " free); it restarts from its checkpoint once its ranks have "
          "stopped");
      Reservation r;
      r.job_id = g->job_id;
      r.priority = g->rank;
      r.submit_seq = g->submit_seq;
      r.start = snapshot.now + g->grace;
      r.nodes = grow.nodes;
      r.waits_for = {g->job_id};
      r.queue = g->queue;
      r.user = g->user;
      r.gpus_by_model = policy->ModelsOf(all);
      out->reservations.push_back(std::move(r));
      out->grows.push_back(std::move(grow));
      break;
    }
  }
}

}  // namespace xl::scheduler
