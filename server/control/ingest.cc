// Output and metrics from the agents: accepted only for ranks the sending
// node ran in that attempt, stored, then acknowledged (logs) or shown live
// (metrics, about one stored point a second).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/duration.h"
#include "common/limits.h"
#include "common/status.h"
#include "server/control/controller.h"
#include "server/state/node_life.h"

namespace xl::control {

namespace {

// A metrics point is a few hundred bytes; a rank writing more (thousands of
// buckets) has its extra buckets dropped, and a point still over this is
// not kept at all.
constexpr int kMaxBucketsPerPoint = 64;
constexpr size_t kMaxMetricsPointBytes = 16 << 10;

}  // namespace

int64_t Controller::OutputBytes(const JobRecord& rec) const {
  int64_t events = 0;
  for (const auto& e : rec.events) events += e.ByteSizeLong();
  return rec.log_bytes + rec.metrics_bytes + events - rec.trim_in_flight;
}

int64_t Controller::TrimFor(JobRecord* rec, int64_t adding) {
  const int64_t budget = opts_.max_output_bytes_per_job;
  const int64_t used = OutputBytes(*rec);
  if (used + adding <= budget) return 0;
  // A tenth of the budget at a time: a job at its budget trims now and
  // then, not at every chunk.
  const int64_t trim = used + adding - budget + budget / 10;
  rec->trim_in_flight += trim;
  if (!rec->output_trimmed) {
    rec->output_trimmed = true;
    v1::JobEvent e = model_.jobs.Note(
        rec,
        absl::StrCat("its output passed its budget of ", HumanBytes(budget),
                     " (--max-output-bytes-per-job): the oldest logs and "
                     "metrics are dropped as new output comes"),
        clock_->Now());
    Apply(JobEffects(rec, {e}));
  }
  return trim;
}

void Controller::Trimmed(int64_t id, int64_t asked,
                         const store::Tx::Trimmed& trimmed) {
  JobRecord* rec = model_.jobs.Find(id);
  if (rec == nullptr) return;
  rec->trim_in_flight -= asked;
  rec->log_bytes = std::max<int64_t>(0, rec->log_bytes - trimmed.log_bytes);
  rec->metrics_bytes =
      std::max<int64_t>(0, rec->metrics_bytes - trimmed.metrics_bytes);
}

void Controller::HandleLog(NodeRecord* node, const v1::AgentMessage& msg) {
  // Each chunk is acknowledged once stored (or known not to matter); the
  // agent sends unacknowledged ones again after a reconnect. seq 0: an agent
  // that does not track acknowledgements.
  v1::SchedulerMessage ack;
  ack.mutable_log_ack()->set_seq(msg.seq());
  const v1::LogChunk& log = msg.log();
  JobRecord* rec = model_.jobs.Find(log.job_id());
  if (rec == nullptr ||
      !state::RankWasOnNode(model_, *node, *rec, log.attempt(), log.rank())) {
    // Not a rank of this node: dropped (acknowledged, so it is not resent).
    if (msg.seq() != 0) node->conn->Send(ack);
    return;
  }
  auto chunk = std::make_shared<v1::LogChunk>(log);
  if (!chunk->has_time()) *chunk->mutable_time() = ToProtoTime(clock_->Now());
  const int64_t id = rec->id;
  const int64_t size =
      static_cast<int64_t>(chunk->data().size()) + kStoredRowOverheadBytes;
  // Counted now, so that chunks queued behind it see it.
  rec->log_bytes += size;
  const int64_t trim = TrimFor(rec, 0);
  auto trimmed = std::make_shared<store::Tx::Trimmed>();
  std::weak_ptr<AgentConnection> weak = node->conn;
  Effects effects;
  if (trim > 0) {
    effects.changes.push_back(store::change::TrimOutput{id, trim, trimmed});
  }
  effects.changes.push_back(store::change::AppendLog{chunk});
  effects.apply = [this, id, chunk, size, trim, trimmed] {
    mu_.AssertHeld();
    {
      if (JobRecord* rec = model_.jobs.Find(id); rec != nullptr) {
        // A chunk sent again is stored once: it weighs nothing more.
        if (chunk->seq() == 0) rec->log_bytes -= size;
        Trimmed(id, trim, *trimmed);
        // How far the rank's output is stored (a chunk sent again is
        // stored once, but counts here too).
        if (chunk->end_offset() > 0 &&
            chunk->attempt() >= rec->log_ends_attempt) {
          if (chunk->attempt() > rec->log_ends_attempt) {
            rec->log_ends.clear();
            rec->log_ends_attempt = chunk->attempt();
          }
          int64_t& end = rec->log_ends[{chunk->rank(), chunk->stream()}];
          end = std::max(end, chunk->end_offset());
          if (!rec->parked_exits.empty()) SettleExits(id);
        }
      }
    }
  };
  effects.then = [this, weak, ack, chunk] {
    auto conn = weak.lock();
    if (conn && ack.log_ack().seq() != 0) conn->Send(ack);
    if (chunk->seq() != 0) NotifyListeners(chunk->job_id());
  };
  effects.answer = [weak](absl::Status st) {
    if (st.ok()) return;
    // Unstored: end the stream, so that the agent sends it again on its
    // next connection.
    if (auto conn = weak.lock()) {
      conn->Close(absl::StrCat("storing output failed: ", st.message()));
    }
  };
  Apply(std::move(effects));
}

void Controller::HandleMetrics(NodeRecord* node, const v1::TrainMetrics& m) {
  JobRecord* rec = model_.jobs.Find(m.job_id());
  if (rec == nullptr || rec->job.attempt() != m.attempt() ||
      !state::JobTable::IsActive(rec->job.state()) || m.rank() != 0 ||
      !state::RankWasOnNode(model_, *node, *rec, m.attempt(), m.rank())) {
    return;
  }
  auto point = std::make_shared<v1::TrainMetrics>(m);
  if (point->allreduce_buckets_size() > kMaxBucketsPerPoint) {
    point->mutable_allreduce_buckets()->DeleteSubrange(
        kMaxBucketsPerPoint,
        point->allreduce_buckets_size() - kMaxBucketsPerPoint);
  }
  if (point->ByteSizeLong() > kMaxMetricsPointBytes) return;
  *rec->job.mutable_metrics() = *point;
  // At most one stored point a second, whatever the point says of itself
  // (its step fields are the rank's to set); the latest waits for its turn
  // (Tick), or for the job's end.
  rec->metrics_unstored = std::move(point);
  metrics_due_.insert(rec->id);
  if (clock_->MonotonicNow() - rec->metrics_stored_mono >= absl::Seconds(1)) {
    StoreMetrics(rec);
  }
}

void Controller::StoreMetrics(JobRecord* rec) {
  metrics_due_.erase(rec->id);
  if (rec->metrics_unstored == nullptr) return;
  std::shared_ptr<const v1::TrainMetrics> point =
      std::move(rec->metrics_unstored);
  rec->metrics_unstored = nullptr;
  rec->metrics_stored_mono = clock_->MonotonicNow();
  const int64_t size =
      static_cast<int64_t>(point->ByteSizeLong()) + kStoredRowOverheadBytes;
  rec->metrics_bytes += size;
  const int64_t trim = TrimFor(rec, 0);
  const int64_t id = rec->id;
  auto trimmed = std::make_shared<store::Tx::Trimmed>();
  Effects effects;
  if (trim > 0) {
    effects.changes.push_back(store::change::TrimOutput{id, trim, trimmed});
  }
  effects.changes.push_back(store::change::AppendMetrics{std::move(point)});
  effects.apply = [this, id, trim, trimmed] {
    mu_.AssertHeld();
    Trimmed(id, trim, *trimmed);
  };
  Apply(std::move(effects));
}

void Controller::StoreDueMetrics() {
  if (metrics_due_.empty()) return;
  const absl::Time now = clock_->MonotonicNow();
  std::vector<int64_t> due;
  for (int64_t id : metrics_due_) {
    const JobRecord* rec = model_.jobs.Find(id);
    if (rec == nullptr || rec->metrics_unstored == nullptr ||
        now - rec->metrics_stored_mono >= absl::Seconds(1)) {
      due.push_back(id);
    }
  }
  for (int64_t id : due) {
    if (JobRecord* rec = model_.jobs.Find(id)) {
      StoreMetrics(rec);
    } else {
      metrics_due_.erase(id);
    }
  }
}

}  // namespace xl::control
