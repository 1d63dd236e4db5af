// Output and metrics from the agents: accepted only for ranks the sending
// node ran in that attempt, stored, then acknowledged (logs) or shown live
// (metrics, about one stored point a second).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/duration.h"
#include "common/status.h"
#include "server/control/controller.h"

namespace xl::control {

void Controller::HandleLog(NodeRecord* node, const v1::AgentMessage& msg) {
  // Each chunk is acknowledged once stored (or known not to matter); the
  // agent sends unacknowledged ones again after a reconnect. seq 0: an agent
  // that does not track acknowledgements.
  v1::SchedulerMessage ack;
  ack.mutable_log_ack()->set_seq(msg.seq());
  const v1::LogChunk& log = msg.log();
  JobRecord* rec = jobs_.Find(log.job_id());
  if (rec == nullptr ||
      !RankWasOnNode(*node, *rec, log.attempt(), log.rank())) {
    // Not a rank of this node: dropped (acknowledged, so it is not resent).
    if (msg.seq() != 0) node->conn->Send(ack);
    return;
  }
  if (rec->log_bytes >= opts_.max_log_bytes_per_job) {
    // Over the job's quota: dropped (acknowledged), once with a line that
    // says so.
    if (rec->log_capped) {
      if (msg.seq() != 0) node->conn->Send(ack);
      return;
    }
    rec->log_capped = true;
  }
  auto chunk = std::make_shared<v1::LogChunk>(log);
  if (rec->log_capped) {
    chunk->set_end_offset(0);
    chunk->set_data(absl::StrCat(
        "[xl: output of this job past ", HumanBytes(opts_.max_log_bytes_per_job),
        " is dropped; write large output to files]\n"));
  }
  if (!chunk->has_time()) *chunk->mutable_time() = ToProtoTime(clock_->Now());
  const int64_t id = rec->id;
  std::weak_ptr<AgentConnection> weak = node->conn;
  const uint64_t generation = generation_;
  store_->Write(
      [chunk](store::Tx& tx) { return tx.AppendLog(chunk.get()); },
      [this, id, weak, ack, chunk, generation](absl::Status st) {
        auto conn = weak.lock();
        if (!st.ok()) {
          EnterDegraded(st);
          // Unstored: end the stream, so that the agent sends it again on
          // its next connection.
          if (conn) {
            conn->Close(absl::StrCat("storing output failed: ", st.message()));
          }
          return;
        }
        {
          absl::MutexLock lock(&mu_);
          if (generation != generation_) return;  // resent after the reload
          if (JobRecord* rec = jobs_.Find(id); rec != nullptr) {
            if (chunk->seq() != 0) {
              rec->log_bytes += static_cast<int64_t>(chunk->data().size());
            }
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
        if (conn && ack.log_ack().seq() != 0) conn->Send(ack);
        if (chunk->seq() != 0) NotifyListeners(chunk->job_id());
      });
}

void Controller::HandleMetrics(NodeRecord* node, const v1::TrainMetrics& m) {
  JobRecord* rec = jobs_.Find(m.job_id());
  if (rec == nullptr || rec->job.attempt() != m.attempt() ||
      !state::JobTable::IsActive(rec->job.state()) || m.rank() != 0 ||
      !RankWasOnNode(*node, *rec, m.attempt(), m.rank())) {
    return;
  }
  *rec->job.mutable_metrics() = m;
  const absl::Time now = clock_->MonotonicNow();
  // About one stored point a second, and always the last step.
  if (now - rec->metrics_stored_mono < absl::Seconds(1) &&
      m.step() != m.total_steps()) {
    return;
  }
  rec->metrics_stored_mono = now;
  Commit([m](store::Tx& tx) { return tx.AppendMetrics(m); }, nullptr);
}

}  // namespace xl::control
