// The supervisor's side of a rank's state directory (agent/shim/rank_shim.h):
// adopting what an earlier agent left, following a shim's status, reading
// its spools into chunks (cut the same way again after a restart) and
// remembering what the scheduler stored.
#include <google/protobuf/util/json_util.h>

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/log.h"
#include "agent/shim/rank_shim.h"
#include "agent/supervisor/launch_spec.h"
#include "agent/supervisor/supervisor.h"
#include "agent/supervisor/supervisor_internal.h"
#include "common/duration.h"
#include "common/status.h"

namespace xl::agent {

using internal::CloseFd;
using internal::GroupAlive;
using internal::ReadChunkEnds;
using internal::ShimGone;

void Supervisor::Adopt() {
  std::error_code ec;
  std::vector<std::string> dirs;
  for (const auto& entry :
       std::filesystem::directory_iterator(state_dir_ + "/ranks", ec)) {
    dirs.push_back(entry.path().string());
  }
  for (const std::string& dir : dirs) {
    std::string data;
    shim::ReadWholeFile(dir + "/" + shim::kRecord, &data);
    const auto record = shim::ParseLines(data);
    auto job = record.find("job");
    if (job == record.end() || !SafePathComponent(job->second)) {
      // The agent writes the record before it forks the shim: without one,
      // nothing ever ran here.
      if (ShimGone(dir)) {
        std::filesystem::remove_all(dir, ec);
      } else {
        LogLine(absl::StrCat("rank state ", dir, " has no record but a "
                             "shim holds it; leaving it alone"));
      }
      continue;
    }
    if (record.count("boot") && record.at("boot") != shim::BootId()) {
      // From before a reboot: its pids mean nothing now.
      std::filesystem::remove_all(dir, ec);
      continue;
    }
    auto process = std::make_unique<Process>();
    process->key = RankKey(job->second, shim::Int(record, "attempt"),
                           shim::Int(record, "rank"));
    if (processes_.count(process->key)) continue;
    process->dir = dir;
    process->shim_pid = shim::Int(record, "shim_pid");
    process->grace = absl::Milliseconds(shim::Int(record, "grace_ms", 10000));
    const auto acked = [&] {
      std::string text;
      shim::ReadWholeFile(dir + "/" + shim::kAcked, &text);
      return shim::ParseLines(text);
    }();
    for (auto [output, name, chunks] :
         {std::tuple{&process->out, shim::kStdout, shim::kChunksStdout},
          {&process->err, shim::kStderr, shim::kChunksStderr},
          {&process->metrics, shim::kMetrics, ""}}) {
      output->stored = shim::Int(acked, name);
      output->offset = output->read_offset = output->stored;
      output->dropped_said =
          shim::Int(acked, absl::StrCat(name, "_dropped_said"));
      if (*chunks == '\0') continue;
      for (int64_t end : ReadChunkEnds(dir + "/" + chunks)) {
        if (end > output->stored &&
            (output->replay.empty() || end > output->replay.back())) {
          output->replay.push_back(end);
        }
      }
    }
    const AttemptKey attempt_key(std::get<0>(process->key),
                                 std::get<1>(process->key));
    if (!attempts_.count(attempt_key)) {
      auto attempt = std::make_unique<Attempt>();
      attempt->user.name = record.count("user") ? record.at("user") : "";
      attempt->user.uid = shim::Int(record, "uid");
      attempt->user.gid = shim::Int(record, "gid");
      // Its HOME and groups, for ranks of the attempt started later.
      absl::StatusOr<RankUser> user = LookUpRankUser(attempt->user.name);
      if (user.ok() && user->uid == attempt->user.uid) {
        attempt->user = *std::move(user);
      }
      attempt->tmp_dir = record.count("tmp_dir") ? record.at("tmp_dir") : "";
      if (record.count("cgroup") &&
          options_.cgroups.version != CgroupVersion::kNone) {
        attempt->cgroup = JobCgroup::Adopt(
            options_.cgroups, record.at("cgroup"),
            static_cast<uint64_t>(shim::Int(record, "memory_limit")));
      }
      attempts_[attempt_key] = std::move(attempt);
    }
    LogLine(absl::StrCat("job ", std::get<0>(process->key), " attempt ",
                         std::get<1>(process->key), " rank ",
                         std::get<2>(process->key),
                         ": adopted (shim pid ", process->shim_pid, ")"));
    Process& raw = *process;
    processes_[process->key] = std::move(process);
    WatchRank(raw);
    Poll(raw);
    if (!raw.started && !raw.finished) {
      // Still starting: a StartRanks sent again must not start it twice.
      v1::RankStatus status;
      status.set_job_id(std::get<0>(raw.key));
      status.set_attempt(std::get<1>(raw.key));
      status.set_rank(std::get<2>(raw.key));
      status.set_state(v1::RANK_RUNNING);
      status.set_message("starting");
      SetStatus(status, /*notify=*/false);
    }
  }
}

void Supervisor::WatchRank(Process& process) {
  process.watch = inotify_add_watch(inotify_, process.dir.c_str(),
                                    IN_MODIFY | IN_MOVED_TO | IN_CLOSE_WRITE);
  if (process.watch >= 0) {
    watches_[process.watch] = &process;
  } else {
    // Followed by the once-a-second sweep only.
    LogLine(absl::StrCat("cannot watch ", process.dir, ": ",
                         ErrnoString(errno),
                         "; raise fs.inotify.max_user_watches"));
  }
}

void Supervisor::PersistAcked(Process& process) {
  // What the scheduler stored needs no disk here any more (offsets stay).
  for (auto [output, upto] :
       {std::pair{&process.out, process.out.stored},
        {&process.err, process.err.stored},
        {&process.metrics, process.metrics.read_offset -
                               static_cast<int64_t>(
                                   process.metrics.pending.size())}}) {
    const int64_t hole = upto / 4096 * 4096;
    if (output->fd >= 0 && hole > output->punched) {
      if (fallocate(output->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                    hole) == 0) {
        output->punched = hole;
      }
    }
  }
  // Also the losses already said, so that a successor does not say them
  // again.
  const std::string text = absl::StrCat(
      shim::kStdout, " ", process.out.stored, "\n", shim::kStderr, " ",
      process.err.stored, "\n", shim::kMetrics, " ",
      process.metrics.read_offset -
          static_cast<int64_t>(process.metrics.pending.size()),
      "\nstdout_dropped_said ", process.out.dropped_said,
      "\nstderr_dropped_said ", process.err.dropped_said, "\n");
  process.metrics_persisted = options_.clock->MonotonicNow();
  if (!shim::WriteFileAtomically(process.dir + "/" + shim::kAcked, text)) {
    LogLine(absl::StrCat("cannot write ", process.dir, "/", shim::kAcked,
                         ": ", ErrnoString(errno),
                         " (a restarted agent sends that output again)"));
    return;
  }
  // Chunk ends at or below what is stored are needed no more: the file is
  // rewritten without them once it holds 64 KiB (8 bytes a chunk).
  for (Output* output : {&process.out, &process.err}) {
    struct stat st;
    if (output->chunks_fd < 0 || ::fstat(output->chunks_fd, &st) != 0 ||
        st.st_size < 64 * 1024) {
      continue;
    }
    const std::string path =
        absl::StrCat(process.dir, "/chunks.", output->name);
    std::string kept;
    for (int64_t end : ReadChunkEnds(path)) {
      if (end > output->stored) {
        kept.append(reinterpret_cast<const char*>(&end), sizeof(end));
      }
    }
    if (shim::WriteFileAtomically(path, kept)) {
      CloseFd(output->chunks_fd);  // Opened again at the next chunk.
    }
  }
}

void Supervisor::Poll(Process& process) {
  if (process.finished) return;
  auto child = shims_.find(process.shim_pid);
  if (!process.shim_gone &&
      (child == shims_.end() || child->second != &process)) {
    // Children are reaped (Reap()); adopted shims are checked by their lock
    // before their status is read, which is then their last word.
    const absl::Time now = options_.clock->MonotonicNow();
    if (now >= process.next_lock_check) {
      process.next_lock_check = now + absl::Seconds(1);
      process.shim_gone = ShimGone(process.dir);
    }
  }
  std::string data;
  shim::Status st;
  const bool have =
      shim::ReadWholeFile(process.dir + "/" + shim::kStatus, &data) &&
      shim::DecodeStatus(data, &st);
  const auto& [job_id, attempt, rank] = process.key;
  if (!process.started) {
    v1::StartRanks request;
    request.set_job_id(job_id);
    request.set_attempt(attempt);
    if (have && st.phase == shim::Status::kFailed) {
      process.finished = true;
      process.leader_alive = process.group_alive = false;
      return FailToStart(request, rank, st.message, st.node_fault);
    }
    if (!have || st.phase == shim::Status::kStarting) {
      if (!process.shim_gone) return;
      process.finished = true;
      process.leader_alive = process.group_alive = false;
      return FailToStart(request, rank,
                         "xl-rank-shim ended before it started the rank; see "
                         "the agent's log (stderr)",
                         /*node_fault=*/true);
    }
    process.started = true;
    process.pid = st.pid;
    v1::RankStatus status;
    status.set_job_id(job_id);
    status.set_attempt(attempt);
    status.set_rank(rank);
    status.set_state(v1::RANK_RUNNING);
    status.set_pid(process.pid);
    SetStatus(status);
    if (process.pending_signal != 0) {
      ::kill(-process.pid, process.pending_signal);
      process.pending_signal = 0;
    }
  }
  // While an exit waits, SayExit reads (the output before the exit first).
  if (!process.pending_exit) {
    for (Output* output : {&process.out, &process.err, &process.metrics}) {
      ReadOutput(process, *output);
    }
  }
  if (have) {
    // Output the shim could not spool is said where it would have been.
    for (auto [output, dropped] : {std::pair{&process.out, st.stdout_dropped},
                                   {&process.err, st.stderr_dropped}}) {
      if (dropped <= output->dropped_said) continue;
      EmitNote(process, *output,
               absl::StrCat("[xl-rank-shim: ", dropped - output->dropped_said,
                            " bytes of this rank's ", output->name,
                            " were lost: the node could not write its "
                            "spool (disk full?)]\n"));
      LogLine(absl::StrCat("job ", job_id, " attempt ", attempt, " rank ",
                           rank, ": ", dropped - output->dropped_said,
                           " bytes of ", output->name,
                           " lost: the shim could not write ", process.dir,
                           "/", output->name));
      output->dropped_said = dropped;
      PersistAcked(process);
    }
  }
  // The group is gone when the shim says so (it pumped the last output
  // first), or, without a shim, when the kernel does.
  auto group_gone = [&] {
    return (have && st.phase == shim::Status::kDone) ||
           (process.shim_gone && !GroupAlive(process.pid));
  };
  const bool gone = group_gone();
  if (process.leader_alive) {
    if (have && (st.phase == shim::Status::kExited ||
                 st.phase == shim::Status::kDone)) {
      OnLeaderExit(process, st.wait_status, st.lease_stop, "", !gone,
                   st.stdout_bytes, st.stderr_bytes);
    } else if (process.shim_gone) {
      // Its parent-death signal killed the rank with it.
      OnLeaderExit(process, SIGKILL, false,
                   "its xl-rank-shim died (killed?) and took the rank with "
                   "it",
                   !gone, -1, -1);
    }
  } else if (process.group_alive && gone) {
    // Known at once, whether or not the exit was said: nothing of the rank
    // runs (a stop, a restart of the job, StopAll wait for no one).
    process.group_alive = false;
    // Said after the exit (which otherwise says it itself).
    process.group_gone_unsaid = !process.pending_exit;
  }
  // Said once the output written before it is handed over; until then,
  // again whenever the session has room.
  if (process.pending_exit) SayExit(process);
  if (!process.pending_exit && !process.leader_alive) {
    if (process.group_gone_unsaid) {
      // Its resources are free now, whatever output is still to ship.
      process.group_gone_unsaid = false;
      OnGroupGone(process);
    }
    if (!process.group_alive) {
      // No writer is left: the spools are whole. Each is closed once read
      // to its end.
      for (Output* output : {&process.out, &process.err, &process.metrics}) {
        if (!output->closed && ReadOutput(process, *output, /*all=*/true)) {
          CloseOutput(process, *output);
        }
      }
    }
  }
  if (process.metrics.read_offset > 0 &&
      options_.clock->MonotonicNow() - process.metrics_persisted >=
          absl::Seconds(1)) {
    PersistAcked(process);
  }
}

void Supervisor::PersistLateAck(
    const std::tuple<std::string, int, int, int>& key, int64_t end) {
  const auto& [job_id, attempt, rank, stream] = key;
  if (!SafePathComponent(job_id)) return;
  const std::string dir = shim::RankDir(state_dir_, job_id, attempt, rank);
  const std::string path = dir + "/" + shim::kAcked;
  std::string text;
  if (!shim::ReadWholeFile(path, &text)) return;  // removed already
  auto acked = shim::ParseLines(text);
  const std::string name = stream == v1::STDERR ? shim::kStderr : shim::kStdout;
  if (shim::Int(acked, name) >= end) return;
  acked[name] = absl::StrCat(end);
  std::string out;
  for (const auto& [k, v] : acked) absl::StrAppend(&out, k, " ", v, "\n");
  if (!shim::WriteFileAtomically(path, out)) {
    LogLine(absl::StrCat("cannot write ", path, ": ", ErrnoString(errno),
                         " (a restarted agent sends that output again)"));
  }
}

void Supervisor::MarkUnreadable(Process& process, Output& output, int err) {
  output.unreadable = true;
  output.starved = false;
  if (&output == &process.metrics) return;  // a curve, not the rank's log
  const std::string path = process.dir + "/" + output.name;
  LogLine(absl::StrCat("cannot read ", path, ": ", ErrnoString(err),
                       "; the rank's ", output.name, " is not shipped"));
  EmitNote(process, output,
           absl::StrCat("[xl-agent: cannot read this rank's ", output.name,
                        " spool ", path, ": ", ErrnoString(err), "]\n"));
}

bool Supervisor::ReadOutput(Process& process, Output& output, bool all,
                            int64_t limit) {
  if (output.closed || output.unreadable) return true;
  if (output.fd < 0) {
    // Read-write: what the scheduler stored is punched out (PersistAcked).
    output.fd = ::open((process.dir + "/" + output.name).c_str(),
                       O_RDWR | O_CLOEXEC);
    if (output.fd < 0) {
      // Not made yet, unless the rank's output is wanted whole now (the
      // shim makes the spools before it starts the rank).
      if (errno == ENOENT && !all) return false;
      MarkUnreadable(process, output, errno);
      return true;
    }
  }
  char buf[64 * 1024];
  // Bounded so one chatty rank cannot starve the others, unless all of it
  // must be read (before an exit status).
  for (int i = 0; all || i < 16; ++i) {
    const bool replaying = !output.replay.empty();
    // The chunks an earlier agent cut are cut the same way again, whole.
    if (!replaying && limit >= 0 && output.read_offset >= limit) {
      output.starved = false;
      return true;
    }
    size_t want = sizeof(buf);
    if (&output != &process.metrics) {
      // What the session cannot take yet stays in the spool, on disk: read
      // on when it has room (LogRoomFreed), never dropped. The partial
      // line held here goes out with the next piece.
      const size_t room = sink_->LogRoom();
      if (room <= output.pending.size()) {
        output.starved = true;
        return false;
      }
      want = std::min(want, room - output.pending.size());
    }
    if (replaying) {
      want = static_cast<size_t>(std::min<int64_t>(
          want, output.replay.front() - output.read_offset));
    } else if (limit >= 0) {
      want = static_cast<size_t>(
          std::min<int64_t>(want, limit - output.read_offset));
    }
    ssize_t n = ::pread(output.fd, buf, want, output.read_offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      MarkUnreadable(process, output, errno);
      return true;
    }
    if (n == 0) {
      output.starved = false;
      return true;
    }
    output.read_offset += n;
    if (replaying) {
      output.pending.append(buf, static_cast<size_t>(n));
      if (output.read_offset == output.replay.front()) {
        output.replay.pop_front();
        EmitChunk(process, output, std::move(output.pending),
                  /*remember=*/false);
        output.pending.clear();
      }
      continue;
    }
    AppendOutput(process, output, buf, static_cast<size_t>(n));
  }
  output.starved = true;
  return false;
}

void Supervisor::AppendOutput(Process& process, Output& output,
                              const char* data, size_t size) {
  if (&output == &process.metrics) {
    output.pending.append(data, size);
    size_t start = 0, nl;
    const absl::Time now = options_.clock->MonotonicNow();
    while ((nl = output.pending.find('\n', start)) != std::string::npos) {
      if (nl > start) {
        if (now >= output.sent_at + options_.metrics_interval) {
          output.held.clear();
          EmitMetrics(process, output.pending.substr(start, nl - start));
          output.sent_at = now;
        } else {
          output.held.assign(output.pending, start, nl - start);
        }
      }
      start = nl + 1;
    }
    output.pending.erase(0, start);
    // A line this long is no metrics point (the scheduler keeps 16 KiB).
    if (output.pending.size() > (64u << 10)) output.pending.clear();
    return;
  }
  const bool had_pending = !output.pending.empty();
  output.pending.append(data, size);
  bool emitted = false;
  const size_t max = std::max<size_t>(1, options_.max_chunk_bytes);
  while (output.pending.size() >= max) {
    size_t nl = output.pending.rfind('\n', max - 1);
    size_t cut = nl == std::string::npos ? max : nl + 1;
    EmitChunk(process, output, output.pending.substr(0, cut));
    output.pending.erase(0, cut);
    emitted = true;
  }
  size_t nl = output.pending.rfind('\n');
  if (nl != std::string::npos) {
    EmitChunk(process, output, output.pending.substr(0, nl + 1));
    output.pending.erase(0, nl + 1);
    emitted = true;
  }
  if (output.pending.empty()) {
    output.pending_since = absl::InfiniteFuture();
  } else if (emitted || !had_pending) {
    output.pending_since = options_.clock->MonotonicNow();
  }
}

void Supervisor::EmitChunk(Process& process, Output& output,
                           std::string data, bool remember) {
  v1::LogChunk chunk;
  output.offset += static_cast<int64_t>(data.size());
  if (remember) {
    // Before it is sent: a successor sends it again as this same chunk.
    if (output.chunks_fd == -1) {
      output.chunks_fd = ::open(
          absl::StrCat(process.dir, "/chunks.", output.name).c_str(),
          O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    }
    if (output.chunks_fd >= 0) {
      const off_t at = ::lseek(output.chunks_fd, 0, SEEK_END);
      if (::write(output.chunks_fd, &output.offset, sizeof(output.offset)) !=
          sizeof(output.offset)) {
        // Full disk: no torn entry stays; a successor re-cuts what follows.
        if (at >= 0) (void)::ftruncate(output.chunks_fd, at);
        CloseFd(output.chunks_fd);
        output.chunks_fd = -2;  // Not again.
      }
    }
  }
  chunk.set_end_offset(output.offset);
  chunk.set_job_id(std::get<0>(process.key));
  chunk.set_attempt(std::get<1>(process.key));
  chunk.set_rank(std::get<2>(process.key));
  chunk.set_stream(output.stream);
  chunk.set_data(std::move(data));
  *chunk.mutable_time() = ToProtoTime(options_.clock->Now());
  sink_->OnLogChunk(std::move(chunk));
}

void Supervisor::EmitNote(Process& process, Output& output,
                          const std::string& text) {
  v1::LogChunk chunk;
  chunk.set_job_id(std::get<0>(process.key));
  chunk.set_attempt(std::get<1>(process.key));
  chunk.set_rank(std::get<2>(process.key));
  chunk.set_stream(output.stream);
  chunk.set_data(text);
  *chunk.mutable_time() = ToProtoTime(options_.clock->Now());
  sink_->OnLogChunk(std::move(chunk));
}

void Supervisor::SendHeldMetrics(Process& process, Output& output) {
  if (output.held.empty()) return;
  EmitMetrics(process, output.held);
  output.held.clear();
  output.sent_at = options_.clock->MonotonicNow();
}

void Supervisor::EmitMetrics(const Process& process, const std::string& line) {
  if (line.empty()) return;
  v1::TrainMetrics metrics;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(line, &metrics, options)
           .ok()) {
    return;  // Not ours to judge a rank's output; drop what does not parse.
  }
  metrics.set_job_id(std::get<0>(process.key));
  metrics.set_attempt(std::get<1>(process.key));
  metrics.set_rank(std::get<2>(process.key));
  if (!metrics.has_time()) {
    *metrics.mutable_time() = ToProtoTime(options_.clock->Now());
  }
  sink_->OnMetrics(std::move(metrics));
}

void Supervisor::FlushPartial(Process& process, Output& output) {
  if (&output == &process.metrics) {
    output.pending_since = absl::InfiniteFuture();
    SendHeldMetrics(process, output);
    return;  // A partial metrics line is never a whole report.
  }
  if (!output.pending.empty()) {
    EmitChunk(process, output, std::move(output.pending));
  }
  output.pending.clear();
  output.pending_since = absl::InfiniteFuture();
}

void Supervisor::CloseOutput(Process& process, Output& output) {
  FlushPartial(process, output);
  CloseFd(output.fd);
  CloseFd(output.chunks_fd);
  output.closed = true;
}

}  // namespace xl::agent
