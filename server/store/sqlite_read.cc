// SqliteStore's reads: Load (the whole state at start, in one read
// transaction) and the reader connection's log and metrics queries.
#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/duration.h"
#include "common/limits.h"
#include "common/status.h"
#include "server/store/migrator.h"
#include "server/store/sqlite_store.h"

namespace xl::store {

absl::StatusOr<std::vector<std::pair<int64_t, v1::TrainMetrics>>>
SqliteStore::ReadMetrics(int64_t job_id, int64_t after_seq, int limit) {
  absl::MutexLock lock(&reader_mu_);
  Statement* s = read_metrics_.get();
  s->BindInt(1, job_id);
  s->BindInt(2, after_seq);
  s->BindInt(3, limit);
  std::vector<std::pair<int64_t, v1::TrainMetrics>> out;
  RETURN_IF_ERROR(s->ForEachRow([&] {
    v1::TrainMetrics m;
    if (m.ParseFromString(s->ColumnBlob(1))) {
      out.emplace_back(s->ColumnInt(0), std::move(m));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<StoredState> SqliteStore::Load() {
  // Through the reader's connection, so a reload may run while the writer
  // works (WAL: it sees every committed transaction); ":memory:" has only
  // the writer's, and loads once, before the first write.
  absl::MutexLock lock(&reader_mu_);
  Db* db = reader_ ? reader_.get() : db_.get();
  StoredState state;
  // One read transaction: every table as of one commit.
  RETURN_IF_ERROR(db->Exec("BEGIN"));
  struct EndRead {
    Db* db;
    ~EndRead() { (void)db->Exec("COMMIT"); }
  } end_read{db};
  {
    ASSIGN_OR_RETURN(auto s, db->Prepare("SELECT value FROM meta WHERE "
                                         "key = 'last_job_id'"));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      state.last_job_id = s->ColumnInt(0);
      return absl::OkStatus();
    }));
  }
  {
    ASSIGN_OR_RETURN(auto s, db->Prepare("SELECT job, id, rendezvous_token "
                                         "FROM jobs ORDER BY id"));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      v1::Job job;
      if (!job.ParseFromString(s->ColumnBlob(0))) {
        return absl::DataLossError(
            absl::StrCat("cannot parse a job row in ", db->path()));
      }
      if (!s->ColumnIsNull(2)) state.tokens[s->ColumnInt(1)] = s->ColumnText(2);
      state.last_job_id = std::max(state.last_job_id, s->ColumnInt(1));
      state.jobs.push_back(std::move(job));
      return absl::OkStatus();
    }));
  }
  {
    ASSIGN_OR_RETURN(auto s,
                     db->Prepare("SELECT job_id, seq, time_us, from_state, "
                                 "to_state, attempt, reason FROM job_events "
                                 "ORDER BY job_id, seq"));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      v1::JobEvent e;
      e.set_job_id(absl::StrCat(s->ColumnInt(0)));
      e.set_seq(s->ColumnInt(1));
      *e.mutable_time() = ToProtoTime(absl::FromUnixMicros(s->ColumnInt(2)));
      e.set_from_state(static_cast<v1::JobState>(s->ColumnInt(3)));
      e.set_to_state(static_cast<v1::JobState>(s->ColumnInt(4)));
      e.set_attempt(static_cast<int32_t>(s->ColumnInt(5)));
      e.set_reason(s->ColumnText(6));
      state.events.push_back(std::move(e));
      return absl::OkStatus();
    }));
  }
  {
    ASSIGN_OR_RETURN(auto s,
                     db->Prepare("SELECT name, inventory, drained, "
                                 "state_reason, register_time_us FROM nodes "
                                 "ORDER BY name"));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      StoredNode n;
      n.name = s->ColumnText(0);
      if (!n.inventory.ParseFromString(s->ColumnBlob(1))) {
        return absl::DataLossError(absl::StrCat("cannot parse node ", n.name));
      }
      n.drained = s->ColumnInt(2) != 0;
      n.state_reason = s->ColumnText(3);
      n.register_time = absl::FromUnixMicros(s->ColumnInt(4));
      state.nodes.push_back(std::move(n));
      return absl::OkStatus();
    }));
  }
  {
    // Exits of each job's current attempt, into its rank_exits.
    std::map<int64_t, v1::Job*> by_id;
    for (auto& job : state.jobs) by_id[JobRowId(job.id())] = &job;
    ASSIGN_OR_RETURN(auto s, db->Prepare("SELECT job_id, attempt, exit FROM "
                                         "rank_exits ORDER BY job_id, rank"));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      auto it = by_id.find(s->ColumnInt(0));
      if (it == by_id.end() || it->second->attempt() != s->ColumnInt(1)) {
        return absl::OkStatus();
      }
      v1::RankExit exit;
      if (!exit.ParseFromString(s->ColumnBlob(2))) {
        return absl::DataLossError("cannot parse a rank exit");
      }
      v1::Job* job = it->second;
      for (const auto& known : job->rank_exits()) {
        if (known.rank() == exit.rank()) return absl::OkStatus();
      }
      *job->add_rank_exits() = std::move(exit);
      return absl::OkStatus();
    }));
  }
  {
    ASSIGN_OR_RETURN(auto s, db->Prepare("SELECT job_id, attempt, allocation "
                                         "FROM holds ORDER BY node, job_id"));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      StoredHold h;
      h.job_id = s->ColumnInt(0);
      h.attempt = static_cast<int32_t>(s->ColumnInt(1));
      if (!h.allocation.ParseFromString(s->ColumnBlob(2))) {
        return absl::DataLossError(
            absl::StrCat("cannot parse a hold of job ", h.job_id));
      }
      state.holds.push_back(std::move(h));
      return absl::OkStatus();
    }));
  }
  {
    // With each row's overhead, as the budget counts them.
    ASSIGN_OR_RETURN(
        auto m, db->Prepare(absl::StrCat("SELECT job_id, sum(length(data) + ",
                                         kStoredRowOverheadBytes,
                                         ") FROM metrics GROUP BY job_id")));
    RETURN_IF_ERROR(m->ForEachRow([&] {
      state.metrics_bytes[m->ColumnInt(0)] = m->ColumnInt(1);
      return absl::OkStatus();
    }));
    ASSIGN_OR_RETURN(
        auto s, db->Prepare(absl::StrCat("SELECT job_id, sum(length(data) + ",
                                         kStoredRowOverheadBytes,
                                         ") FROM logs GROUP BY job_id")));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      state.log_bytes[s->ColumnInt(0)] = s->ColumnInt(1);
      return absl::OkStatus();
    }));
  }
  {
    // By the logs_once index, for the few jobs that run.
    ASSIGN_OR_RETURN(
        auto s,
        db->Prepare(absl::StrCat(
            "SELECT job_id, attempt, rank, stream, max(end_offset) FROM logs "
            "WHERE end_offset IS NOT NULL AND job_id IN (SELECT id FROM jobs "
            "WHERE state IN (",
            v1::SCHEDULED, ", ", v1::RUNNING,
            ")) GROUP BY job_id, attempt, rank, stream")));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      state.log_ends[{s->ColumnInt(0), static_cast<int32_t>(s->ColumnInt(1)),
                      static_cast<int32_t>(s->ColumnInt(2)),
                      static_cast<int32_t>(s->ColumnInt(3))}] = s->ColumnInt(4);
      return absl::OkStatus();
    }));
  }
  {
    ASSIGN_OR_RETURN(auto s, db->Prepare("SELECT spec, version, updated_us, "
                                         "updated_by FROM queues ORDER BY "
                                         "name"));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      v1::Queue q;
      if (!q.mutable_spec()->ParseFromString(s->ColumnBlob(0))) {
        return absl::DataLossError("cannot parse a queue row");
      }
      q.set_version(s->ColumnInt(1));
      *q.mutable_update_time() =
          ToProtoTime(absl::FromUnixMicros(s->ColumnInt(2)));
      q.set_updated_by(s->ColumnText(3));
      q.set_defined(true);
      state.queues.push_back(std::move(q));
      return absl::OkStatus();
    }));
  }
  {
    ASSIGN_OR_RETURN(
        auto s, db->Prepare(absl::StrCat(
                    "SELECT seq, time_us, queue, by_user, action, spec, "
                    "version FROM (SELECT * FROM queue_changes ORDER BY seq "
                    "DESC LIMIT ",
                    kLoadedQueueChanges, ") ORDER BY seq")));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      v1::QueueChange c;
      c.set_seq(s->ColumnInt(0));
      *c.mutable_time() = ToProtoTime(absl::FromUnixMicros(s->ColumnInt(1)));
      c.set_queue(s->ColumnText(2));
      c.set_by(s->ColumnText(3));
      c.set_action(s->ColumnText(4));
      (void)c.mutable_spec()->ParseFromString(s->ColumnBlob(5));
      c.set_version(s->ColumnInt(6));
      state.queue_changes.push_back(std::move(c));
      return absl::OkStatus();
    }));
  }
  {
    ASSIGN_OR_RETURN(auto s, db->Prepare("SELECT queue, user, gpu_seconds, "
                                         "as_of_us FROM usage"));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      StoredUsage u;
      u.queue = s->ColumnText(0);
      u.user = s->ColumnText(1);
      u.gpu_seconds = s->ColumnDouble(2);
      u.as_of = absl::FromUnixMicros(s->ColumnInt(3));
      state.usage.push_back(std::move(u));
      return absl::OkStatus();
    }));
  }
  {
    ASSIGN_OR_RETURN(auto s, db->Prepare("SELECT log_index FROM "
                                         "replica_applied WHERE id = 1"));
    RETURN_IF_ERROR(s->ForEachRow([&] {
      state.applied_index = static_cast<uint64_t>(s->ColumnInt(0));
      return absl::OkStatus();
    }));
  }
  return state;
}

absl::StatusOr<std::vector<v1::LogChunk>> SqliteStore::ReadLogs(
    int64_t job_id, int64_t after_seq, int rank, int limit) {
  absl::MutexLock lock(&reader_mu_);
  Statement* s = rank < 0 ? read_logs_.get() : read_logs_rank_.get();
  int i = 1;
  s->BindInt(i++, job_id);
  s->BindInt(i++, after_seq);
  if (rank >= 0) s->BindInt(i++, rank);
  s->BindInt(i++, limit);
  std::vector<v1::LogChunk> out;
  RETURN_IF_ERROR(s->ForEachRow([&] {
    v1::LogChunk c;
    c.set_seq(s->ColumnInt(0));
    c.set_job_id(absl::StrCat(s->ColumnInt(1)));
    c.set_attempt(static_cast<int32_t>(s->ColumnInt(2)));
    c.set_rank(static_cast<int32_t>(s->ColumnInt(3)));
    c.set_stream(static_cast<v1::LogStream>(s->ColumnInt(4)));
    *c.mutable_time() = ToProtoTime(absl::FromUnixMicros(s->ColumnInt(5)));
    c.set_data(s->ColumnBlob(6));
    if (!s->ColumnIsNull(7)) c.set_end_offset(s->ColumnInt(7));
    out.push_back(std::move(c));
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace xl::store
