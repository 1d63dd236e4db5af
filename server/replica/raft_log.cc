#include "server/replica/raft_log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <uv.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/replica/raft_transport.h"

namespace xl::replica {
namespace {

// Entries in flight when a close is asked for get this long to finish.
constexpr absl::Duration kCloseGrace = absl::Seconds(3);
// Refusals kept for the leader's answers: entries this far behind the one
// being applied are answered already (or were never this replica's).
constexpr uint64_t kOutcomesKept = 100000;
// How often the loop refreshes state() and looks at a pending close.
constexpr uint64_t kTickMs = 20;

// raft 0.15 reads back from its segments only entries whose length is a
// multiple of 8 (it writes others padded, then reads the next batch from
// the wrong byte). An entry is therefore framed: its length as 8 bytes,
// little-endian, then the bytes, then zeros up to a multiple of 8.
bool Frame(absl::string_view entry, struct raft_buffer* buf) {
  const uint64_t n = entry.size();
  buf->len = 8 + (n + 7) / 8 * 8;
  buf->base = raft_malloc(buf->len);
  if (buf->base == nullptr) return false;
  auto* out = static_cast<unsigned char*>(buf->base);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(n >> (8 * i));
  memcpy(out + 8, entry.data(), n);
  memset(out + 8 + n, 0, buf->len - 8 - n);
  return true;
}

bool Unframe(const struct raft_buffer& buf, absl::string_view* entry) {
  if (buf.len < 8) return false;
  const auto* in = static_cast<const unsigned char*>(buf.base);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(in[i]) << (8 * i);
  if (n > buf.len - 8) return false;
  *entry = absl::string_view(reinterpret_cast<const char*>(in + 8), n);
  return true;
}

unsigned Millis(absl::Duration d) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

}  // namespace

struct RaftLog::Impl {
  struct Pending {
    std::string entry;
    std::function<void(absl::Status)> done;
    // Answer(): no entry, `done` gets `status`.
    bool answer_only = false;
    absl::Status status;
  };
  // One raft_apply of one or more entries, answered in order.
  struct Apply {
    struct raft_apply req;
    std::vector<std::function<void(absl::Status)>> dones;
    Impl* impl;
  };

  Options options;
  std::thread thread;
  absl::Notification started;
  absl::Status start_status;

  uv_loop_t loop;
  uv_async_t wake;
  uv_timer_t tick;
  ReplicaTransport wrapped;
  struct raft_uv_transport& transport = wrapped.t;
  struct raft_io io {};
  struct raft_fsm fsm {};
  struct raft raft {};
  bool raft_ready = false;  // raft_init succeeded: raft_close closes it
  // The snapshot raft is writing (between fsm.snapshot and its finalize).
  std::unique_ptr<std::string> snapshot_image;
  // After a failed snapshot: none is tried before this index.
  uint64_t snapshot_retry_at = 0;

  mutable absl::Mutex mu;
  std::deque<Pending> queue ABSL_GUARDED_BY(mu);
  bool wake_closed ABSL_GUARDED_BY(mu) = false;
  // Submitted once closing: answered after the loop has stopped.
  std::deque<Pending> late ABSL_GUARDED_BY(mu);
  bool closing ABSL_GUARDED_BY(mu) = false;
  State state ABSL_GUARDED_BY(mu);

  // Loop thread only.
  int in_flight = 0;
  // Entries applied here whose outcome was not OK, by index.
  std::map<uint64_t, absl::Status> outcomes;
  // The answers of a batch's entries after its first, by index, until each
  // is applied (counted in in_flight).
  struct Later {
    uint64_t term = 0;  // the term it was appended in
    std::function<void(absl::Status)> done;
  };
  std::map<uint64_t, Later> later;
  bool close_begun = false;
  bool raft_closed = false;
  absl::Time close_deadline = absl::InfiniteFuture();

  void Run();
  absl::Status Open();
  void OnWake();
  void OnTick();
  void Refresh();
  void MaybeClose();
  void CloseHandles();
  void Submit(Pending p);
  // Appends `bufs` (framed entries, then raft's) as one request whose
  // answers are `dones`, in order; empties both.
  void ApplyBatch(std::vector<struct raft_buffer>* bufs,
                  std::vector<std::function<void(absl::Status)>>* dones);
  // Entry `index` applied with `outcome`: answers it when it is a batch's
  // later entry, else keeps the outcome for its request's answer.
  void Settle(uint64_t index, absl::Status outcome) {
    auto it = later.find(index);
    if (it == later.end()) {
      KeepOutcome(index, std::move(outcome));
      return;
    }
    Later l = std::move(it->second);
    later.erase(it);
    --in_flight;
    if (raft_state(&raft) != RAFT_LEADER || l.term != raft.current_term) {
      // Deposed (maybe elected again) before it was applied: this index
      // may hold another leader's entry now.
      l.done(Lost());
      return;
    }
    l.done(std::move(outcome));
  }
  // Answers the later entries not applied yet that were appended in
  // another term than `keep_term` (0: all) with `why`.
  void FailLater(const absl::Status& why, uint64_t keep_term = 0) {
    std::vector<std::function<void(absl::Status)>> failed;
    for (auto it = later.begin(); it != later.end();) {
      if (keep_term != 0 && it->second.term == keep_term) {
        ++it;
        continue;
      }
      failed.push_back(std::move(it->second.done));
      it = later.erase(it);
      --in_flight;
    }
    for (auto& done : failed) done(why);
  }
  // What an entry whose leader was deposed before it committed or applied
  // is answered: it may still commit.
  static absl::Status Lost(absl::string_view cause = "") {
    absl::Status lost = absl::UnavailableError(absl::StrCat(
        "the leader lost its leadership before the entry was applied",
        cause.empty() ? "" : absl::StrCat(" (", cause, ")"),
        "; it may still commit: retry with the same idempotency key"));
    lost.SetPayload(kMayCommitPayload, absl::Cord("1"));
    return lost;
  }
  // Keeps a refusal for the leader's answer (raft gives the answer the
  // request, whose index is this one); old ones are dropped.
  void KeepOutcome(uint64_t index, absl::Status outcome) {
    if (!outcome.ok()) outcomes[index] = std::move(outcome);
    outcomes.erase(outcomes.begin(),
                   outcomes.lower_bound(
                       index > kOutcomesKept ? index - kOutcomesKept : 0));
  }
};

void RaftLog::Impl::Run() {
  uv_loop_init(&loop);
  wake.data = this;
  tick.data = this;
  uv_async_init(&loop, &wake,
                [](uv_async_t* h) { static_cast<Impl*>(h->data)->OnWake(); });
  uv_timer_init(&loop, &tick);
  start_status = Open();
  if (start_status.ok()) {
    Refresh();
  } else {
    absl::MutexLock lock(&mu);
    closing = true;
  }
  started.Notify();
  uv_timer_start(
      &tick, [](uv_timer_t* t) { static_cast<Impl*>(t->data)->OnTick(); },
      kTickMs, kTickMs);
  if (!start_status.ok()) MaybeClose();
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
}

absl::Status RaftLog::Impl::Open() {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("raft directory ", options.dir, ": ", ec.message(),
                     "; give a writable --raft-dir"));
  }
  auto self = options.peers.find(options.id);
  if (options.id == 0 || self == options.peers.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica id ", options.id,
                     " is not among the peers; list every "
                     "replica, this one included, as id=host:port"));
  }
  int rv = raft_uv_tcp_init(&transport, &loop);
  if (rv != 0) {
    return absl::InternalError(
        absl::StrCat("raft transport: ", raft_strerror(rv)));
  }
  WrapTransport(&wrapped);
  // This replica's name, as a number for raft 0.15 to listen on (it keeps
  // the name for its handshake and configuration).
  const std::string ip = Resolved(self->second.c_str());
  if (in_addr v4; ip == self->second &&
                  inet_pton(AF_INET, ip.substr(0, ip.rfind(':')).c_str(),
                            &v4) != 1) {
    raft_uv_tcp_close(&transport);
    return absl::InvalidArgumentError(absl::StrCat(
        "--peers: cannot look up ", self->second,
        " (this replica's Raft address); give a name this machine resolves "
        "(an IPv4 address) or a number"));
  }
  if (ip != self->second) {
    rv = raft_uv_tcp_set_bind_address(&transport, ip.c_str());
    if (rv != 0) {
      raft_uv_tcp_close(&transport);
      return absl::InvalidArgumentError(absl::StrCat(
          "--peers: ", self->second, " (", ip,
          ") is not an address of this machine to listen on"));
    }
  }
  rv = raft_uv_init(&io, &loop, options.dir.c_str(), &transport);
  if (rv != 0) {
    const std::string why = io.errmsg;
    raft_uv_tcp_close(&transport);
    return absl::FailedPreconditionError(
        absl::StrCat("raft log in ", options.dir, ": ", why));
  }
  raft_uv_set_connect_retry_delay(&io, 100);
  fsm.version = 2;  // snapshot_finalize: the snapshot's memory is ours
  fsm.data = this;
  fsm.snapshot = [](struct raft_fsm* f, struct raft_buffer* bufs[],
                    unsigned* n_bufs) -> int {
    Impl* impl = static_cast<Impl*>(f->data);
    // RAFT_BUSY is the one refusal raft 0.15 shrugs off (any other makes
    // a follower drop every later message); it asks again at every apply,
    // so after a failure the next try waits for a quarter of the interval.
    if (!impl->options.snapshot || impl->snapshot_image != nullptr ||
        impl->raft.last_applied < impl->snapshot_retry_at) {
      return RAFT_BUSY;
    }
    absl::StatusOr<std::string> image = impl->options.snapshot();
    if (!image.ok()) {
      impl->snapshot_retry_at =
          impl->raft.last_applied +
          std::max(1u, impl->options.snapshot_every / 4);
      fprintf(stderr,
              "xl-scheduler: cannot take a snapshot of the replicated log "
              "(%s); the log grows until one is taken, tried again after "
              "%llu more entries\n",
              image.status().ToString().c_str(),
              static_cast<unsigned long long>(impl->snapshot_retry_at -
                                              impl->raft.last_applied));
      return RAFT_BUSY;
    }
    impl->snapshot_image = std::make_unique<std::string>(*std::move(image));
    auto* buf =
        static_cast<struct raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
    if (buf == nullptr) {
      impl->snapshot_image.reset();
      return RAFT_NOMEM;
    }
    buf->base = impl->snapshot_image->data();
    buf->len = impl->snapshot_image->size();
    *bufs = buf;
    *n_bufs = 1;
    return 0;
  };
  fsm.snapshot_finalize = [](struct raft_fsm* f, struct raft_buffer* bufs[],
                             unsigned* n_bufs) -> int {
    Impl* impl = static_cast<Impl*>(f->data);
    raft_free(*bufs);
    *bufs = nullptr;
    *n_bufs = 0;
    impl->snapshot_image.reset();
    return 0;
  };
  fsm.restore = [](struct raft_fsm* f, struct raft_buffer* buf) -> int {
    Impl* impl = static_cast<Impl*>(f->data);
    absl::Status st =
        impl->options.restore
            ? impl->options.restore(absl::string_view(
                  static_cast<const char*>(buf->base), buf->len))
            : absl::FailedPreconditionError("this replica takes no snapshots");
    if (!st.ok()) {
      fprintf(stderr,
              "xl-scheduler: cannot restore a snapshot of the replicated log "
              "here (%s); stopping: fix this replica's database and start it "
              "again\n",
              st.ToString().c_str());
      std::abort();
    }
    raft_free(buf->base);  // ours once restored
    return 0;
  };
  fsm.apply = [](struct raft_fsm* f, const struct raft_buffer* buf,
                 void** result) -> int {
    Impl* impl = static_cast<Impl*>(f->data);
    *result = nullptr;
    // raft counts every entry it applies; this one is the next.
    absl::string_view entry;
    const uint64_t index = impl->raft.last_applied + 1;
    absl::Status outcome;
    if (!Unframe(*buf, &entry)) {
      // The same bytes on every replica: refused alike everywhere.
      impl->Settle(index, absl::DataLossError(
                              "log entry: a damaged frame; not applied"));
      return 0;
    }
    absl::Status failed = impl->options.apply(index, entry, &outcome);
    if (!failed.ok()) {
      // raft 0.15 turns a failed apply into an unavailable replica that
      // drops every later message: stop instead, as etcd does. A restart
      // replays the log from what the database says it applied.
      fprintf(stderr,
              "xl-scheduler: cannot apply replicated log entry %llu here (%s); "
              "stopping: fix this replica's database and start it again\n",
              static_cast<unsigned long long>(index),
              failed.ToString().c_str());
      std::abort();
    }
    impl->Settle(index, std::move(outcome));
    return 0;
  };
  rv = raft_init(&raft, &io, &fsm, options.id, self->second.c_str());
  if (rv != 0) {
    const std::string why = raft_errmsg(&raft);
    raft_uv_close(&io);
    raft_uv_tcp_close(&transport);
    return absl::InternalError(absl::StrCat("raft: ", why));
  }
  raft.data = this;
  raft_ready = true;
  struct raft_configuration conf;
  raft_configuration_init(&conf);
  for (const auto& [id, address] : options.peers) {
    raft_configuration_add(&conf, id, address.c_str(), RAFT_VOTER);
  }
  rv = raft_bootstrap(&raft, &conf);
  raft_configuration_close(&conf);
  if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) {  // CANTBOOTSTRAP: has a log
    return absl::InternalError(
        absl::StrCat("raft bootstrap: ", raft_errmsg(&raft)));
  }
  raft_set_election_timeout(&raft, Millis(options.election_timeout));
  raft_set_heartbeat_timeout(&raft, Millis(options.heartbeat));
  if (options.snapshot) {
    raft_set_snapshot_threshold(&raft, std::max(1u, options.snapshot_every));
    raft_set_snapshot_trailing(&raft, options.snapshot_trailing);
  } else {
    raft_set_snapshot_threshold(&raft, UINT_MAX);
  }
  rv = raft_start(&raft);
  if (rv != 0) {
    return absl::InternalError(
        absl::StrCat("raft start: ", raft_errmsg(&raft)));
  }
  return absl::OkStatus();
}

void RaftLog::Impl::OnWake() {
  std::deque<Pending> taken;
  bool close;
  {
    absl::MutexLock lock(&mu);
    taken.swap(queue);
    close = closing;
  }
  // Appends queued together go to raft as one request: one AppendEntries
  // to each follower and one disk write for all of them.
  std::vector<struct raft_buffer> bufs;
  std::vector<std::function<void(absl::Status)>> dones;
  if (!later.empty() && !raft_closed && raft_state(&raft) != RAFT_LEADER) {
    FailLater(Lost());  // before the refusals below: log order
  }
  for (Pending& p : taken) {
    if (p.answer_only) {
      ApplyBatch(&bufs, &dones);  // answered after what was queued before
      p.done(p.status);
      continue;
    }
    if (close || raft_closed) {
      p.done(absl::UnavailableError(
          "this scheduler replica is shutting down; retry on another"));
      continue;
    }
    if (raft_state(&raft) != RAFT_LEADER) {
      raft_id id = 0;
      const char* address = nullptr;
      raft_leader(&raft, &id, &address);
      p.done(absl::FailedPreconditionError(
          id == 0 ? std::string("no leader elected yet; retry in a moment")
                  : absl::StrCat("not the leader; the leader is replica ", id,
                                 " at ", address)));
      continue;
    }
    struct raft_buffer buf;
    if (!Frame(p.entry, &buf)) {
      p.done(absl::ResourceExhaustedError("out of memory for a log entry"));
      continue;
    }
    bufs.push_back(buf);
    dones.push_back(std::move(p.done));
  }
  ApplyBatch(&bufs, &dones);
  if (close && !close_begun) {
    close_begun = true;
    close_deadline = absl::Now() + kCloseGrace;
  }
  MaybeClose();
}

void RaftLog::Impl::ApplyBatch(
    std::vector<struct raft_buffer>* bufs,
    std::vector<std::function<void(absl::Status)>>* dones) {
  if (bufs->empty()) return;
  auto* a = new Apply{{}, std::move(*dones), this};
  dones->clear();
  a->req.data = a;
  const raft_index last_before = raft_last_index(&raft);
  const int rv = raft_apply(
      &raft, &a->req, bufs->data(), static_cast<unsigned>(bufs->size()),
      [](struct raft_apply* req, int status, void*) {
        auto* a = static_cast<Apply*>(req->data);
        Impl* impl = a->impl;
        --impl->in_flight;
        if (status == 0) {
          // raft 0.15 answers a request when its first entry is applied
          // (getRequest matches req->index only): the others are answered
          // as each is applied (`later`, in fsm.apply).
          absl::Status outcome;
          auto it = impl->outcomes.find(req->index);
          if (it != impl->outcomes.end()) {
            outcome = std::move(it->second);
            impl->outcomes.erase(it);
          }
          // Entries of an older term still waiting lost their place.
          impl->FailLater(Lost(), impl->raft.current_term);
          for (size_t i = 1; i < a->dones.size(); ++i) {
            auto [it, fresh] = impl->later.try_emplace(
                req->index + i,
                Later{impl->raft.current_term, std::move(a->dones[i])});
            if (!fresh) {  // not expected: the slot's old entry is lost
              auto old = std::move(it->second.done);
              it->second = Later{impl->raft.current_term,
                                 std::move(a->dones[i])};
              old(Lost());
            } else {
              ++impl->in_flight;
            }
          }
          a->dones[0](outcome);
        } else {
          // Deposed: the later entries of earlier batches first (log order),
          // then this batch's.
          impl->FailLater(Lost());
          const absl::Status lost = Lost(raft_strerror(status));
          for (auto& done : a->dones) done(lost);
        }
        delete a;
        // Not MaybeClose() here: this may run inside raft's own calls
        // (a leadership change), which raft_close must not re-enter; the
        // tick closes.
      });
  if (rv != 0) {
    if (raft_last_index(&raft) != last_before) {
      // raft 0.15 left some of the batch in its log (out of memory midway)
      // pointing at these buffers: neither freeing nor keeping them is
      // safe. Stop; a restart replays the log.
      fprintf(stderr,
              "xl-scheduler: raft kept part of a failed append (%s); "
              "stopping\n",
              raft_strerror(rv));
      std::abort();
    }
    for (struct raft_buffer& b : *bufs) raft_free(b.base);
    for (auto& done : a->dones) {
      done(absl::FailedPreconditionError(
          absl::StrCat("not appended: ", raft_strerror(rv))));
    }
    delete a;
  } else {
    ++in_flight;
  }
  bufs->clear();
}

void RaftLog::Impl::OnTick() {
  if (!raft_closed) Refresh();
  MaybeClose();
}

void RaftLog::Impl::Refresh() {
  State s;
  s.leader = raft_state(&raft) == RAFT_LEADER;
  if (!later.empty()) {
    FailLater(Lost(), s.leader ? raft.current_term : 0);
  }
  raft_id id = 0;
  const char* address = nullptr;
  raft_leader(&raft, &id, &address);
  s.leader_id = id;
  if (address != nullptr) s.leader_address = address;
  s.term = raft.current_term;
  s.commit_index = raft.commit_index;
  s.applied_index = raft.last_applied;
  absl::MutexLock lock(&mu);
  state = std::move(s);
}

void RaftLog::Impl::MaybeClose() {
  if (!close_begun || raft_closed) return;
  // Entries in flight finish first (raft 0.15 must not be closed with
  // appends of its own still being written), unless they take too long.
  // An entry may commit on the followers' acks before this replica's own
  // write of it: wait for that too.
  const bool busy = in_flight > 0 ||
                    (raft_ready && raft.last_stored < raft_last_index(&raft));
  if (busy && absl::Now() < close_deadline) return;
  raft_closed = true;
  if (!raft_ready) {
    CloseHandles();
    return;
  }
  raft_close(&raft, [](struct raft* r) {
    Impl* impl = static_cast<Impl*>(r->data);
    raft_uv_close(&impl->io);
    raft_uv_tcp_close(&impl->transport);
    impl->CloseHandles();
  });
}

void RaftLog::Impl::CloseHandles() {
  // Appended, maybe on the followers already: they may still commit.
  absl::Status closing = absl::UnavailableError(
      "this scheduler replica shut down with the entry in flight; it may "
      "still commit: retry with the same idempotency key on another");
  closing.SetPayload(kMayCommitPayload, absl::Cord("1"));
  FailLater(closing);
  {
    absl::MutexLock lock(&mu);
    state.leader = false;
    wake_closed = true;  // nobody sends to it from now on
  }
  uv_timer_stop(&tick);
  uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&wake), nullptr);
}

void RaftLog::Impl::Submit(Pending p) {
  {
    absl::MutexLock lock(&mu);
    if (closing) {
      // The loop may be gone: answered by the destructor, never here (the
      // caller may hold a lock its answer takes).
      late.push_back(std::move(p));
      return;
    }
    queue.push_back(std::move(p));
    // Under the lock: the loop closes the handle only after saying so.
    if (!wake_closed) uv_async_send(&wake);
  }
}

absl::StatusOr<std::unique_ptr<RaftLog>> RaftLog::Start(Options options) {
  if (!options.apply) {
    return absl::InvalidArgumentError("RaftLog: no apply function");
  }
  // A peer that goes away mid-write must not kill the process.
  signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  impl->started.WaitForNotification();
  if (!impl->start_status.ok()) {
    const absl::Status st = impl->start_status;
    {
      absl::MutexLock lock(&raw->mu);
      raw->closing = true;
    }
    uv_async_send(&raw->wake);
    impl->thread.join();
    return st;
  }
  return std::unique_ptr<RaftLog>(new RaftLog(std::move(impl)));
}

RaftLog::RaftLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RaftLog::~RaftLog() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->closing = true;
    if (!impl_->wake_closed) uv_async_send(&impl_->wake);
  }
  impl_->thread.join();
  // What came in while closing, and what those answers append: until none.
  while (true) {
    std::deque<Impl::Pending> left;
    {
      absl::MutexLock lock(&impl_->mu);
      left.swap(impl_->late);
      for (auto& p : impl_->queue) left.push_back(std::move(p));
      impl_->queue.clear();
    }
    if (left.empty()) break;
    for (auto& p : left) {
      p.done(p.answer_only ? p.status
                           : absl::UnavailableError(
                                 "this scheduler replica is shutting down; "
                                 "retry on another"));
    }
  }
}

void RaftLog::Answer(absl::Status status,
                     std::function<void(absl::Status)> done) {
  Impl::Pending p;
  p.done = std::move(done);
  p.answer_only = true;
  p.status = std::move(status);
  impl_->Submit(std::move(p));
}

void RaftLog::Append(std::string entry,
                     std::function<void(absl::Status)> done) {
  impl_->Submit({std::move(entry), std::move(done)});
}

RaftLog::State RaftLog::state() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->state;
}

}  // namespace xl::replica
