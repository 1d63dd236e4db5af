// Controller::CollectMetrics: the model as /metrics shows it, in one walk
// over jobs and nodes under the lock. The pending jobs' reason classes
// follow what Visible() tells a user (job_api.cc).
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

#include "server/control/controller.h"

namespace xl::control {

ModelMetrics Controller::CollectMetrics() {
  ModelMetrics out;
  // Counted by (state, queue) and (queue, reason) with views into the
  // records, so the walk under the lock allocates per distinct key, not
  // per job (at 100,000 jobs the lock is held for milliseconds).
  absl::flat_hash_map<std::pair<int, absl::string_view>, int64_t> jobs;
  absl::flat_hash_map<std::pair<absl::string_view, const char*>, int64_t>
      pending;
  absl::MutexLock lock(&mu_);
  const absl::Time mono_now = clock_->MonotonicNow();
  for (const auto& [id, rec] : model_.jobs.all()) {
    const v1::Job& job = rec.committed ? *rec.committed : rec.job;
    if (uncommitted_.count(id) > 0) continue;  // not accepted yet
    // Both arms views: a ternary of a char array and a std::string would
    // make a temporary string, and the view would outlive it.
    const absl::string_view queue =
        job.spec().queue().empty() ? absl::string_view(scheduler::kDefaultQueue)
                                   : absl::string_view(job.spec().queue());
    ++jobs[{job.state(), queue}];
    if (job.state() == v1::PENDING && rec.job.state() == v1::PENDING) {
      const char* reason = "unplaced";
      if (rec.eligible_mono > mono_now) {
        reason = "fenced";
      } else if (rec.job.spec().after_ok_size() > 0 &&
                 !DependencyWait(rec, nullptr).empty()) {
        reason = "dependency";
      } else if (preempt_holds_.count(rec.id) > 0) {
        reason = "preempting";
      } else if (reservations_.count(rec.job.id()) > 0) {
        reason = "reserved";
      } else if (auto own = job_reasons_.find(rec.job.id());
                 own != job_reasons_.end() && own->second != nullptr) {
        reason = "quota";
      } else if (class_reasons_.count(rec.request.get()) > 0) {
        reason = "resources";
      }
      ++pending[{queue, reason}];
    }
    if (rec.job.state() == v1::RUNNING && rec.job.has_metrics()) {
      out.training.push_back(
          {job.id(), std::string(queue), job.user(), rec.job.metrics()});
    }
  }
  for (const auto& [key, n] : jobs) {
    out.jobs[{v1::JobState_Name(static_cast<v1::JobState>(key.first)),
              std::string(key.second)}] = n;
  }
  for (const auto& [key, n] : pending) {
    out.pending[{std::string(key.first), key.second}] = n;
  }
  for (const auto& [name, node] : model_.nodes.all()) {
    if (node.info == nullptr) continue;  // known only from a hold
    const char* state = node.lost ? "LOST" : node.drained ? "DRAINED" : "READY";
    ++out.nodes[state];
    if (node.lost) continue;
    const v1::NodeInventory& inv = node.inventory;
    std::vector<bool> held(inv.gpus_size(), false);
    for (const auto& h : model_.ledger.Holds(name)) {
      for (int32_t g : h.share.gpu_indices) {
        if (g >= 0 && g < inv.gpus_size()) held[g] = true;
      }
    }
    const bool ready = !node.drained && node.conn != nullptr;
    for (int g = 0; g < inv.gpus_size(); ++g) {
      ModelMetrics::Gpus& m = out.gpus[inv.gpus(g).model().empty()
                                           ? std::string("unknown")
                                           : inv.gpus(g).model()];
      ++m.capacity;
      if (held[g]) {
        ++m.allocated;
      } else if (ready) {
        ++m.free;
      }
    }
    if (node.conn != nullptr) {
      out.heartbeat_age.emplace_back(
          name, std::max(0.0, absl::ToDoubleSeconds(
                                  mono_now - node.last_heartbeat_mono)));
    }
  }
  return out;
}

}  // namespace xl::control
