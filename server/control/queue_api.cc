// The QueueService side of the controller: queues as objects (specs,
// versions, recorded changes, changes written store-first) and the checks a
// queue makes at submit. Fair share is in fair_share.cc.
#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "common/status.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/control/controller.h"
#include "server/state/queue_edits.h"

namespace xl::control {
namespace {

// Queues the scheduler keeps at most (each pass checks a cohort's members).
constexpr size_t kMaxQueues = 1000;

const v1::QueueSpec& ImplicitDefault() {
  static const v1::QueueSpec* spec = [] {
    auto* s = new v1::QueueSpec;
    s->set_name(scheduler::kDefaultQueue);
    s->set_weight(1);
    return s;
  }();
  return *spec;
}

}  // namespace

const v1::QueueSpec* Controller::QueueSpecOf(const std::string& name) const {
  if (auto w = queue_writing_.find(name); w != queue_writing_.end()) {
    if (w->second) return &*w->second;
    return name == scheduler::kDefaultQueue ? &ImplicitDefault() : nullptr;
  }
  auto it = model_.queues.find(name);
  if (it != model_.queues.end()) return &it->second.spec();
  if (name == scheduler::kDefaultQueue) return &ImplicitDefault();
  return nullptr;
}

void Controller::SetPolicy(const v1::QueueSpec& spec) {
  if (spec.quotas_size() > 0 || spec.max_running_gpus_per_user() > 0) {
    policies_[spec.name()] = scheduler::QueuePolicy::FromSpec(spec);
  } else {
    policies_.erase(spec.name());
  }
}

absl::Status Controller::ApplyQueueToSpec(const scheduler::Submitter& who,
                                          v1::JobSpec* spec) {
  const std::string& user = who.user;
  const v1::QueueSpec* q = QueueSpecOf(spec->queue());
  if (q == nullptr) {
    std::vector<std::string> names;
    if (model_.queues.count(scheduler::kDefaultQueue) == 0) {
      names.push_back(scheduler::kDefaultQueue);
    }
    for (const auto& [name, queue] : model_.queues) {
      if (QueueSpecOf(name) != nullptr) names.push_back(name);
    }
    const bool more = names.size() > 20;
    names.resize(std::min<size_t>(names.size(), 20));
    return absl::InvalidArgumentError(absl::StrCat(
        "queue: there is no queue '", spec->queue(), "'; queues here: ",
        absl::StrJoin(names, ", "), more ? ", ..." : "",
        " (xlctl queue list); submit to one of them, or ask an admin to "
        "create it (xlctl queue set ", spec->queue(), ")"));
  }
  RETURN_IF_ERROR(scheduler::CheckQueueAccess(*q, who, spec->priority()));
  if (spec->has_preemptible() && !spec->preemptible().value() &&
      !q->allow_non_preemptible()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "preemptible: queue ", q->name(), " does not allow jobs that cannot "
        "be preempted; drop preemptible: false (give the job a checkpoint "
        "and a grace_period instead), or use a queue with "
        "allow_non_preemptible"));
  }
  if (spec->checkpoint_dir().empty()) {
    spec->set_checkpoint_dir(q->default_checkpoint_dir());
  }
  const absl::Duration limit = FromProto(spec->time_limit());
  const absl::Duration def = FromProto(q->default_time_limit());
  const absl::Duration max = FromProto(q->max_time_limit());
  if (limit <= absl::ZeroDuration()) {
    // As Slurm's partitions: the default, else the maximum.
    if (def > absl::ZeroDuration()) {
      *spec->mutable_time_limit() = q->default_time_limit();
    } else if (max > absl::ZeroDuration()) {
      *spec->mutable_time_limit() = q->max_time_limit();
    }
  } else if (max > absl::ZeroDuration() && limit > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "time_limit: ", HumanDuration(limit), " is more than queue ",
        q->name(), "'s max_time_limit ", HumanDuration(max), "; ask for ",
        HumanDuration(max), " or less (with checkpoints, a requeued job "
        "goes on from the last one)"));
  }
  // A job no state of the queue could ever start is refused now rather
  // than left waiting for ever.
  // An elastic job needs only its minimum.
  const int32_t least = spec->resources().min_nodes() > 0
                            ? spec->resources().min_nodes()
                            : spec->resources().nodes();
  const int64_t gpus = int64_t{least} * spec->resources().gpus_per_node();
  if (gpus > 0 && q->max_running_gpus_per_user() > 0 &&
      gpus > q->max_running_gpus_per_user()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resources: the job asks for ", gpus, " GPUs and queue ", q->name(),
        " lets one user hold ", q->max_running_gpus_per_user(),
        " (max_running_gpus_per_user); ask for fewer, or use another queue"));
  }
  if (gpus > 0 && q->quotas_size() > 0) {
    int64_t most = 0;
    for (const v1::GpuQuota& quota : q->quotas()) {
      int64_t cap = quota.nominal_gpus();
      if (!q->cohort().empty()) {
        cap = quota.has_borrowing_limit_gpus()
                  ? cap + quota.borrowing_limit_gpus().value()
                  : INT64_MAX;
      }
      most = std::max(most, cap);
    }
    if (gpus > most) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resources: the job asks for ", gpus, " GPUs and queue ", q->name(),
          " can hold at most ", most,
          " of any model (its nominal quota plus what it may borrow); ask "
          "for fewer, or ask an admin to raise the quota (xlctl queue show ",
          q->name(), ")"));
    }
  }
  if (q->max_pending_jobs_per_user() > 0) {
    const auto& pending = model_.jobs.pending_by_queue_user();
    auto it = pending.find({spec->queue(), user});
    auto in_flight = submitting_queue_.find({spec->queue(), user});
    const int64_t n =
        (it == pending.end() ? 0 : it->second) +
        (in_flight == submitting_queue_.end() ? 0 : in_flight->second);
    if (n >= q->max_pending_jobs_per_user()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "queue ", q->name(), " allows ", q->max_pending_jobs_per_user(),
          " pending jobs per user (max_pending_jobs_per_user) and ", user,
          " has ", n, "; submit again once some have started, or cancel "
          "some (xlctl list --user ", user, " --queue ", q->name(), ")"));
    }
  }
  return absl::OkStatus();
}

void Controller::ChangeQueue(const std::string& by, const std::string& action,
                             v1::Queue queue,
                             std::function<void(absl::Status)> answer) {
  auto edit = std::make_shared<state::QueueEdit>(
      state::EditQueue(&model_, by, action, std::move(queue), clock_->Now()));
  const std::string name = edit->name;
  // The model takes the change once it is on disk; until then further
  // changes to the queue wait (WaitForQueueWrite), so each is checked
  // against the version before it.
  queue_writing_[name] = edit->remove ? std::nullopt
                                      : std::optional<v1::QueueSpec>(
                                            edit->queue.spec());
  Effects effects;
  effects.changes = std::move(edit->changes);  // the edit keeps the rest
  effects.apply = [this, edit] {
    mu_.AssertHeld();
    state::CommitQueueEdit(&model_, *edit);
    if (edit->remove) {
      policies_.erase(edit->name);
    } else {
      SetPolicy(edit->queue.spec());
    }
    // Policies changed: the whole queue is looked at again.
    capacity_freed_ = true;
    pass_needed_ = true;
    shares_cache_mono_ = absl::InfinitePast();
  };
  effects.answer = [this, name, answer = std::move(answer)](absl::Status st) {
    std::vector<std::function<void()>> waiting;
    {
      absl::MutexLock lock(&mu_);
      queue_writing_.erase(name);
      if (auto it = queue_waiting_.find(name); it != queue_waiting_.end()) {
        waiting = std::move(it->second);
        queue_waiting_.erase(it);
      }
    }
    if (answer) answer(st);
    for (auto& retry : waiting) retry();
  };
  Apply(std::move(effects));
}

size_t Controller::CreatesInFlight() const {
  size_t n = 0;
  for (const auto& [name, spec] : queue_writing_) {
    n += spec.has_value() && model_.queues.count(name) == 0;
  }
  return n;
}

absl::Status Controller::WaitForQueueWrite(const std::string& name,
                                           std::function<void()> retry) {
  auto& waiting = queue_waiting_[name];
  if (waiting.size() >= kMaxQueueChangesWaiting) {
    return absl::UnavailableError(absl::StrCat(
        "queue ", name, " has ", waiting.size(),
        " changes waiting to be recorded; retry in a moment"));
  }
  waiting.push_back(std::move(retry));
  return absl::OkStatus();
}

void Controller::PutQueue(
    const std::string& user, v1::PutQueueRequest request,
    std::function<void(absl::StatusOr<v1::Queue>)> done) {
  v1::QueueSpec spec = std::move(*request.mutable_spec());
  if (absl::Status valid = scheduler::ValidateQueueSpec(&spec); !valid.ok()) {
    done(valid);
    return;
  }
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    auto it = model_.queues.find(spec.name());
    const int64_t version = it == model_.queues.end() ? 0 : it->second.version();
    if (degraded_) {
      refused = absl::UnavailableError(degraded_reason_);
    } else if (queue_writing_.count(spec.name()) > 0 ||
               queue_waiting_.count(spec.name()) > 0) {
      // Checked again once the change being written is in the model.
      refused = WaitForQueueWrite(
          spec.name(), [this, user, request, spec, done]() mutable {
            *request.mutable_spec() = std::move(spec);
            PutQueue(user, std::move(request), std::move(done));
          });
      if (refused.ok()) return;
    } else if (it != model_.queues.end() &&
               google::protobuf::util::MessageDifferencer::Equals(
                   it->second.spec(), spec)) {
      // Nothing changes (a retry of a change that went through is
      // answered alike): no new version, nothing recorded; answered once
      // the write that made it is on disk.
      v1::Queue same = it->second;
      Effects effects;
      effects.answer = [done, same](absl::Status st) {
        if (st.ok()) {
          done(same);
        } else {
          done(st);
        }
      };
      Apply(std::move(effects));
      return;
    } else if (request.expected_version() == -1 && it != model_.queues.end()) {
      refused = absl::AlreadyExistsError(absl::StrCat(
          "queue ", spec.name(), " exists already (version ", version,
          "); read it (xlctl queue show ", spec.name(),
          ") and change it with its version"));
    } else if (request.expected_version() > 0 &&
               request.expected_version() != version) {
      refused = absl::FailedPreconditionError(absl::StrCat(
          "queue ", spec.name(), " is at version ", version, ", not ",
          request.expected_version(), "; someone changed it: read it again "
          "(xlctl queue show ", spec.name(), ") and retry"));
    } else if (request.expected_version() < -1) {
      refused = absl::InvalidArgumentError(
          "expected_version: give 0 (any), -1 (only if the queue does not "
          "exist) or the version read");
    } else if (it == model_.queues.end() &&
               model_.queues.size() + CreatesInFlight() >= kMaxQueues) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "there are ", model_.queues.size(), " queues, the most the scheduler "
          "keeps; delete unused ones (xlctl queue list) first"));
    } else {
      v1::Queue queue;
      *queue.mutable_spec() = spec;
      *queue.mutable_update_time() = ToProtoTime(clock_->Now());
      queue.set_updated_by(user);
      queue.set_defined(true);
      // The version ChangeQueue gives it; the answer is what was written.
      queue.set_version(model_.next_queue_change_seq);
      ChangeQueue(user, it == model_.queues.end() ? "create" : "update", queue,
                  [done, queue](absl::Status st) {
                    if (st.ok()) {
                      done(queue);
                    } else {
                      done(st);
                    }
                  });
      return;
    }
  }
  done(refused);
}

void Controller::DeleteQueue(const std::string& user, const std::string& name,
                             std::function<void(absl::Status)> done) {
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    auto it = model_.queues.find(name);
    if (degraded_) {
      refused = absl::UnavailableError(degraded_reason_);
    } else if (queue_writing_.count(name) > 0 ||
               queue_waiting_.count(name) > 0) {
      refused = WaitForQueueWrite(
          name, [this, user, name, done] { DeleteQueue(user, name, done); });
      if (refused.ok()) return;
    } else if (name.empty()) {
      refused = absl::InvalidArgumentError(
          "name: required; xlctl queue list shows the queues");
    } else if (it == model_.queues.end()) {
      refused = absl::NotFoundError(absl::StrCat(
          "queue ", name, " is not defined; xlctl queue list shows the "
          "queues"));
    } else {
      const state::QueueJobs jobs = state::JobsInQueue(model_, name);
      int64_t pending = jobs.pending;
      const int64_t running = jobs.active;
      // Submits accepted and still being written count as pending.
      for (auto p = submitting_queue_.lower_bound({name, ""});
           p != submitting_queue_.end() && p->first.first == name; ++p) {
        pending += p->second;
      }
      // "default" goes back to the implicit one; its jobs stay valid.
      if (name != scheduler::kDefaultQueue && pending + running > 0) {
        refused = absl::FailedPreconditionError(absl::StrCat(
            "queue ", name, " has ", pending, " pending and ", running,
            " running jobs; cancel them or let them end (xlctl list --queue ",
            name, "), then delete it"));
      } else {
        v1::Queue queue = it->second;
        ChangeQueue(user, "delete", std::move(queue), std::move(done));
        return;
      }
    }
  }
  done(refused);
}

absl::StatusOr<v1::Queue> Controller::GetQueueSpec(const std::string& name) {
  ASSIGN_OR_RETURN(v1::ListQueuesResponse all, ListQueues());
  for (v1::Queue& q : *all.mutable_queues()) {
    if (q.spec().name() == name) return std::move(q);
  }
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "name: required; xlctl queue list shows the queues");
  }
  return absl::NotFoundError(absl::StrCat(
      "there is no queue '", name, "'; xlctl queue list shows the queues"));
}

absl::StatusOr<v1::ListQueuesResponse> Controller::ListQueues() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, v1::Queue> out;
  for (const auto& [name, queue] : model_.queues) out[name] = queue;
  if (out.count(scheduler::kDefaultQueue) == 0) {
    v1::Queue& d = out[scheduler::kDefaultQueue];
    *d.mutable_spec() = ImplicitDefault();
  }
  std::map<std::string, std::map<std::string, int64_t>> by_model, by_user;
  for (int64_t id : model_.jobs.active()) {
    const JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr) continue;
    const std::string& queue = rec->job.spec().queue();
    auto q = out.find(queue);
    if (q == out.end()) continue;
    q->second.set_running_jobs(q->second.running_jobs() + 1);
    for (const auto& [model, n] : model_.nodes.GpuModelsOf(rec->job)) {
      by_model[queue][model] += n;
      by_user[queue][rec->job.user()] += n;
    }
  }
  for (const auto& [key, n] : model_.jobs.pending_by_queue_user()) {
    auto q = out.find(key.first);
    if (q != out.end()) q->second.set_pending_jobs(q->second.pending_jobs() + n);
  }
  const scheduler::QuotaBook book(&policies_, by_model, by_user);
  v1::ListQueuesResponse resp;
  for (auto& [name, queue] : out) {
    auto* in_use = queue.mutable_gpus_in_use();
    auto p = policies_.find(name);
    if (p != policies_.end() && !p->second.quotas.empty()) {
      for (const auto& [key, quota] : p->second.quotas) {
        (*in_use)[key] = book.Used(name, key);
      }
      queue.set_gpus_borrowed(book.Borrowed(name));
    } else {
      for (const auto& [model, n] : by_model[name]) (*in_use)[model] = n;
    }
    *resp.add_queues() = std::move(queue);
  }
  return resp;
}

absl::StatusOr<v1::ListQueueChangesResponse> Controller::ListQueueChanges(
    const v1::ListQueueChangesRequest& request) {
  int limit = request.page_size();
  if (limit < 0) {
    return absl::InvalidArgumentError("page_size: must not be negative");
  }
  if (limit == 0) limit = 100;
  limit = std::min(limit, 1000);
  absl::MutexLock lock(&mu_);
  v1::ListQueueChangesResponse resp;
  for (auto it = model_.queue_changes.rbegin();
       it != model_.queue_changes.rend() && resp.changes_size() < limit; ++it) {
    if (!request.queue().empty() && it->queue() != request.queue()) continue;
    *resp.add_changes() = *it;
  }
  return resp;
}

absl::Status Controller::ApplyQueueFile(const v1::QueueFile& file,
                                        const std::string& by) {
  for (int i = 0; i < file.queues_size(); ++i) {
    v1::QueueSpec spec = file.queues(i);
    absl::Status valid = scheduler::ValidateQueueSpec(&spec);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("queues[", i, "].", valid.message()));
    }
    for (int j = 0; j < i; ++j) {
      if (file.queues(j).name() == spec.name()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "queues[", i, "].name: queue ", spec.name(),
            " is given twice (also queues[", j, "]); give each once"));
      }
    }
  }
  for (const v1::QueueSpec& spec : file.queues()) {
    v1::PutQueueRequest request;
    *request.mutable_spec() = spec;
    absl::Mutex mu;
    bool finished = false;
    absl::Status result;
    PutQueue(by, request, [&](absl::StatusOr<v1::Queue> q) {
      absl::MutexLock lock(&mu);
      result = q.status();
      finished = true;
    });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&finished));
    if (!result.ok()) {
      return absl::Status(result.code(),
                          absl::StrCat("queue ", spec.name(), ": ",
                                       result.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace xl::control
