#include "server/state/queue_edits.h"

#include <utility>
#include <vector>

#include "common/duration.h"

namespace xl::state {

QueueEdit EditQueue(Model* model, const std::string& by,
                    const std::string& action, v1::Queue queue,
                    absl::Time now) {
  QueueEdit edit;
  edit.name = queue.spec().name();
  edit.remove = action == "delete";
  v1::QueueChange& change = edit.change;
  change.set_seq(model->next_queue_change_seq++);
  if (!edit.remove) queue.set_version(change.seq());
  *change.mutable_time() = ToProtoTime(now);
  change.set_queue(edit.name);
  change.set_by(by);
  change.set_action(action);
  *change.mutable_spec() = queue.spec();
  change.set_version(queue.version());
  if (edit.remove) {
    edit.changes.push_back(store::change::DeleteQueue{edit.name});
    edit.changes.push_back(store::change::PutUsage{{edit.name, "", 0, now}});
    for (auto it = model->user_usage.lower_bound({edit.name, ""});
         it != model->user_usage.end() && it->first.first == edit.name; ++it) {
      edit.changes.push_back(
          store::change::PutUsage{{edit.name, it->first.second, 0, now}});
    }
  } else {
    edit.changes.push_back(store::change::PutQueue{queue});
  }
  edit.changes.push_back(store::change::AddQueueChange{change});
  edit.queue = std::move(queue);
  return edit;
}

void CommitQueueEdit(Model* model, const QueueEdit& edit) {
  if (edit.remove) {
    model->queues.erase(edit.name);
    model->queue_usage.erase(edit.name);
    for (auto it = model->user_usage.lower_bound({edit.name, ""});
         it != model->user_usage.end() && it->first.first == edit.name;) {
      it = model->user_usage.erase(it);
    }
  } else {
    model->queues[edit.name] = edit.queue;
  }
  model->queue_changes.push_back(edit.change);
  while (model->queue_changes.size() > store::kLoadedQueueChanges) {
    model->queue_changes.pop_front();
  }
}

QueueJobs JobsInQueue(const Model& model, const std::string& name) {
  QueueJobs out;
  const auto& by = model.jobs.pending_by_queue_user();
  for (auto p = by.lower_bound({name, ""});
       p != by.end() && p->first.first == name; ++p) {
    out.pending += p->second;
  }
  for (int64_t id : model.jobs.active()) {
    const JobRecord* rec = model.jobs.Find(id);
    if (rec != nullptr && rec->job.spec().queue() == name) ++out.active;
  }
  return out;
}

}  // namespace xl::state
