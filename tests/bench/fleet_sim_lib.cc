// The simulated fleet (the scheduler child process is in
// scheduler_process.cc). Each agent's state
// (running ranks, heartbeat bookkeeping, its current stream) sits behind the
// agent's own mutex, so the streams of different agents never contend. All
// stream operations are started with that mutex held: gRPC's client reactor
// runs no reaction inline (its reads and writes use can_inline=false, and
// RemoveHold schedules OnDone on an executor), so no reaction can try to take
// the mutex on the thread that holds it.
#include "tests/bench/fleet_sim_lib.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "xl/v1/agent.grpc.pb.h"

namespace xl::bench {

double Ms(SteadyClock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

void LatencySamples::Add(double ms) {
  absl::MutexLock lock(&mu_);
  ms_.push_back(ms);
}

size_t LatencySamples::count() const {
  absl::MutexLock lock(&mu_);
  return ms_.size();
}

double LatencySamples::Quantile(double q) const {
  std::vector<double> copy;
  {
    absl::MutexLock lock(&mu_);
    copy = ms_;
  }
  if (copy.empty()) return -1;
  size_t i = std::min(copy.size() - 1, static_cast<size_t>(q * copy.size()));
  std::nth_element(copy.begin(), copy.begin() + i, copy.end());
  return copy[i];
}

namespace {

int64_t Nanos(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             t.time_since_epoch())
      .count();
}

SteadyClock::duration FromProto(const google::protobuf::Duration& d) {
  return std::chrono::seconds(d.seconds()) +
         std::chrono::nanoseconds(d.nanos());
}

// splitmix64: cheap, well-mixed, reproducible jitter.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double Unit(uint64_t x) { return (Mix(x) >> 11) * (1.0 / 9007199254740992.0); }

// Timer threads, each with its own heap; an agent always uses the same one.
// Callbacks run on the timer thread without the shard's lock held.
class TimerShards {
 public:
  explicit TimerShards(int n) {
    for (int i = 0; i < std::max(1, n); ++i) {
      shards_.push_back(std::make_unique<Shard>());
    }
    for (auto& s : shards_) {
      Shard* shard = s.get();
      shard->thread = std::thread([shard] { Run(shard); });
    }
  }
  ~TimerShards() { Stop(); }

  // Runs `fn` at `when` on shard `shard`; dropped after Stop.
  void At(size_t shard, SteadyClock::time_point when,
          std::function<void()> fn) {
    Shard& s = *shards_[shard % shards_.size()];
    absl::MutexLock lock(&s.mu);
    if (s.stop) return;
    const bool earliest = s.heap.empty() || when < s.heap.top().when;
    s.heap.push(Entry{when, s.seq++, std::move(fn)});
    if (earliest) s.cv.Signal();
  }

  // Drops what is queued and joins the threads. Idempotent.
  void Stop() {
    for (auto& s : shards_) {
      absl::MutexLock lock(&s->mu);
      s->stop = true;
      s->cv.Signal();
    }
    for (auto& s : shards_) {
      if (s->thread.joinable()) s->thread.join();
    }
  }

 private:
  struct Entry {
    SteadyClock::time_point when;
    uint64_t seq;
    std::function<void()> fn;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.when != b.when ? a.when > b.when : a.seq > b.seq;
    }
  };
  struct Shard {
    absl::Mutex mu;
    absl::CondVar cv;
    std::priority_queue<Entry, std::vector<Entry>, Later> heap
        ABSL_GUARDED_BY(mu);
    uint64_t seq ABSL_GUARDED_BY(mu) = 0;
    bool stop ABSL_GUARDED_BY(mu) = false;
    std::thread thread;
  };

  static void Run(Shard* s) {
    s->mu.Lock();
    while (!s->stop) {
      if (s->heap.empty()) {
        s->cv.Wait(&s->mu);
        continue;
      }
      const auto now = SteadyClock::now();
      if (s->heap.top().when > now) {
        s->cv.WaitWithTimeout(&s->mu,
                              absl::FromChrono(s->heap.top().when - now));
        continue;
      }
      // Only when and seq order the heap, so moving fn out before pop is safe.
      std::function<void()> fn =
          std::move(const_cast<Entry&>(s->heap.top()).fn);
      s->heap.pop();
      s->mu.Unlock();
      fn();
      s->mu.Lock();
    }
    s->mu.Unlock();
  }

  std::vector<std::unique_ptr<Shard>> shards_;
};

// One node share of one job attempt the agent "runs".
struct Share {
  std::vector<int32_t> ranks;
  int gpus = 0;
  int exit_code = 0;
  SteadyClock::time_point started;
  uint64_t id = 0;
};

class Session;

struct Agent {
  int index = 0;
  std::string name;
  v1::NodeInventory inventory;
  v1::AgentService::Stub* stub = nullptr;

  absl::Mutex mu;
  // The current stream, or null between streams.
  Session* session ABSL_GUARDED_BY(mu) = nullptr;
  // +1 per stream; a heartbeat chain runs only for its own stream.
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  bool ever_registered ABSL_GUARDED_BY(mu) = false;
  bool ever_closed ABSL_GUARDED_BY(mu) = false;
  int failures_in_row ABSL_GUARDED_BY(mu) = 0;
  SteadyClock::time_point register_sent ABSL_GUARDED_BY(mu);
  SteadyClock::time_point last_acked_send ABSL_GUARDED_BY(mu);
  SteadyClock::duration heartbeat_interval ABSL_GUARDED_BY(mu) =
      std::chrono::seconds(1);
  // Zero: the scheduler gave no lease.
  SteadyClock::duration lease ABSL_GUARDED_BY(mu){};
  uint64_t next_heartbeat_seq ABSL_GUARDED_BY(mu) = 1;
  std::deque<std::pair<uint64_t, SteadyClock::time_point>> heartbeats_in_flight
      ABSL_GUARDED_BY(mu);
  std::map<std::pair<std::string, int>, Share> running ABSL_GUARDED_BY(mu);
  // Rank exits no stream carried yet; sent with the next Register.
  std::vector<v1::RankStatus> unreported ABSL_GUARDED_BY(mu);
  // When ranks last ended and freed GPUs no StartRanks has used since.
  std::optional<SteadyClock::time_point> freed_at ABSL_GUARDED_BY(mu);
  uint64_t next_share_id ABSL_GUARDED_BY(mu) = 1;
};

}  // namespace

class SimulatedFleet::Impl {
 public:
  Impl(FleetOptions options, FleetObserver* observer)
      : opts_(std::move(options)),
        observer_(observer),
        timers_(opts_.timer_threads) {}
  ~Impl();

  void Start();
  bool WaitRegistered(SteadyClock::duration timeout);
  void Stop();
  void StartBusyWindow(SteadyClock::time_point from) {
    window_start_ns_.store(Nanos(from));
  }
  double BusyGpuSeconds() const;
  FleetCounters Counters() const;
  std::string NodeName(int index) const {
    return absl::StrFormat("%s%05d", opts_.name_prefix, index);
  }

  // From the agent's current Session, with agent->mu held.
  void OnMessage(Agent* agent, Session* session, const v1::SchedulerMessage& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent->mu);
  void OnSessionEnded(Agent* agent, bool acked, const grpc::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent->mu);
  // The last thing a Session does; after it the fleet may be destroyed.
  void OnSessionGone() ABSL_LOCKS_EXCLUDED(done_mu_);

  const FleetOptions opts_;
  FleetObserver* const observer_;
  LatencySamples heartbeat_rtt_, register_rtt_, free_to_start_;

 private:
  void Connect(Agent* agent) ABSL_LOCKS_EXCLUDED(agent->mu);
  void Heartbeat(Agent* agent, uint64_t generation, SteadyClock::time_point due)
      ABSL_LOCKS_EXCLUDED(agent->mu);
  void RanksDue(Agent* agent, const std::pair<std::string, int>& key,
                uint64_t share_id) ABSL_LOCKS_EXCLUDED(agent->mu);
  void StartRanks(Agent* agent, const v1::StartRanks& start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent->mu);
  // Reports the share's ranks exited and forgets it.
  void EndShare(Agent* agent,
                std::map<std::pair<std::string, int>, Share>::iterator it,
                int exit_code, int signal, const std::string& message,
                bool stopped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent->mu);
  // Sends a rank status, or keeps it for the next Register.
  void Report(Agent* agent, v1::RankStatus st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(agent->mu);

  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::AgentService::Stub>> stubs_;
  std::vector<std::unique_ptr<Agent>> agents_;
  TimerShards timers_;
  std::atomic<bool> stopping_{false};
  bool leaked_ = false;

  struct AtomicCounters {
    std::atomic<int64_t> register_acks{0}, sessions_closed_by_scheduler{0},
        nodes_closed_by_scheduler{0}, sessions_failed_before_ack{0},
        start_ranks{0}, stop_jobs{0}, rank_statuses_sent{0}, heartbeats_sent{0},
        heartbeat_acks{0}, log_acks{0}, lease_expiries{0}, other_messages{0};
  } counters_;
  std::atomic<int> closed_reports_{0};
  std::atomic<int64_t> window_start_ns_{INT64_MIN};
  std::atomic<int64_t> busy_gpu_ns_{0};

  mutable absl::Mutex done_mu_;
  int live_sessions_ ABSL_GUARDED_BY(done_mu_) = 0;
  int nodes_registered_ ABSL_GUARDED_BY(done_mu_) = 0;
};

namespace {

// One AgentService/Connect stream of one agent. Lives from Connect to
// OnDone; every field is guarded by the agent's mutex.
class Session final
    : public grpc::ClientBidiReactor<v1::AgentMessage, v1::SchedulerMessage> {
 public:
  Session(SimulatedFleet::Impl* fleet, Agent* agent, uint64_t generation)
      : fleet_(fleet), agent_(agent), generation_(generation) {}

  // Opens the stream with `reg` as its first message. agent->mu held.
  void Begin(v1::AgentMessage reg) {
    // No deadline: the session lasts as long as the agent; Stop cancels it.
    agent_->stub->async()->Connect(&ctx_, this);
    // Writes start outside reactions (heartbeat timers), so the stream is
    // held open until closing_ and no write in flight.
    AddHold();
    Send(std::move(reg));
    StartRead(&in_);
    StartCall();
  }

  // Queues `msg`; false when the stream is closing (nothing sent).
  // agent->mu held.
  bool Send(v1::AgentMessage msg) {
    if (closing_) return false;
    out_.push_back(std::move(msg));
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
    return true;
  }

  void Cancel() { ctx_.TryCancel(); }
  uint64_t generation() const { return generation_; }
  void MarkAcked() { acked_ = true; }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&agent_->mu);
    if (!ok) {
      closing_ = true;
      MaybeReleaseHold();
      return;
    }
    fleet_->OnMessage(agent_, this, in_);
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&agent_->mu);
    out_.pop_front();
    if (!ok) closing_ = true;
    if (!closing_ && !out_.empty()) {
      StartWrite(&out_.front());
      return;
    }
    writing_ = false;
    MaybeReleaseHold();
  }

  void OnDone(const grpc::Status& status) override {
    SimulatedFleet::Impl* fleet = fleet_;
    {
      absl::MutexLock lock(&agent_->mu);
      if (agent_->session == this) agent_->session = nullptr;
      fleet->OnSessionEnded(agent_, acked_, status);
    }
    delete this;
    fleet->OnSessionGone();
  }

 private:
  void MaybeReleaseHold() {
    if (!closing_ || writing_ || hold_released_) return;
    hold_released_ = true;
    // Exits queued but never written go with the next Register.
    for (auto& msg : out_) {
      if (msg.has_rank_status() &&
          msg.rank_status().state() != v1::RANK_RUNNING) {
        agent_->unreported.push_back(msg.rank_status());
      }
    }
    out_.clear();
    RemoveHold();
  }

  SimulatedFleet::Impl* const fleet_;
  Agent* const agent_;
  const uint64_t generation_;
  grpc::ClientContext ctx_;
  v1::SchedulerMessage in_;
  // Front: the write in flight. A deque keeps it in place while others queue.
  std::deque<v1::AgentMessage> out_;
  bool writing_ = false;
  bool closing_ = false;
  bool hold_released_ = false;
  bool acked_ = false;
};

v1::NodeInventory MakeInventory(const FleetOptions& o, int i,
                                const std::string& name) {
  v1::NodeInventory inv;
  inv.set_hostname(name);
  const int n = i + 1;
  inv.set_address(
      absl::StrCat("10.", (n >> 16) & 255, ".", (n >> 8) & 255, ".", n & 255));
  const int sw = i / std::max(1, o.nodes_per_switch);
  (*inv.mutable_labels())["switch"] = absl::StrFormat("sw-%04d", sw);
  (*inv.mutable_labels())["rack"] =
      absl::StrFormat("rack-%03d", sw / std::max(1, o.switches_per_rack));
  inv.set_cpus(224);
  inv.set_memory_bytes(2ull << 40);
  for (int g = 0; g < o.gpus_per_node; ++g) {
    v1::Gpu* gpu = inv.add_gpus();
    gpu->set_index(g);
    gpu->set_uuid(absl::StrCat("GPU-", name, "-", g));
    gpu->set_model("NVIDIA H100 80GB HBM3");
    gpu->set_memory_bytes(o.gpu_memory_bytes);
    gpu->set_compute_capability("9.0");
  }
  v1::Nvme* nvme = inv.add_nvme();
  nvme->set_device("/dev/nvme0n1");
  nvme->set_path("/mnt/nvme0");
  nvme->set_capacity_bytes(7680ull * 1000 * 1000 * 1000);
  nvme->set_free_bytes(nvme->capacity_bytes());
  v1::Nic* ib = inv.add_nics();
  ib->set_name("mlx5_0");
  ib->set_kind(v1::INFINIBAND);
  ib->set_gbps(400);
  v1::Nic* eth = inv.add_nics();
  eth->set_name("eth0");
  eth->set_kind(v1::ETHERNET);
  eth->set_gbps(100);
  return inv;
}

// A rank's own env wins over the shared part (StartRanks.env).
const std::string* StartEnv(const v1::StartRanks& start,
                            const std::string& key) {
  if (start.ranks_size() > 0) {
    auto it = start.ranks(0).env().find(key);
    if (it != start.ranks(0).env().end()) return &it->second;
  }
  auto it = start.env().find(key);
  return it != start.env().end() ? &it->second : nullptr;
}

}  // namespace

SimulatedFleet::Impl::~Impl() {
  Stop();
  if (leaked_) {
    // Streams still running would touch their agents: keep them alive.
    for (auto& a : agents_) a.release();
    for (auto& s : stubs_) s.release();
  }
}

void SimulatedFleet::Impl::Start() {
  const int channels = std::max(1, std::min(opts_.channels, opts_.nodes));
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    // A channel of its own connection each (channels with equal arguments
    // would otherwise share one subchannel, so one TCP connection).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("xl.fleet_sim.channel", c);
    channels_.push_back(grpc::CreateCustomChannel(
        opts_.target, grpc::InsecureChannelCredentials(), args));
    stubs_.push_back(v1::AgentService::NewStub(channels_.back()));
  }
  for (int i = 0; i < opts_.nodes; ++i) {
    auto agent = std::make_unique<Agent>();
    agent->index = i;
    agent->name = NodeName(i);
    agent->inventory = MakeInventory(opts_, i, agent->name);
    agent->stub = stubs_[i % channels].get();
    agents_.push_back(std::move(agent));
  }
  for (auto& agent : agents_) Connect(agent.get());
}

bool SimulatedFleet::Impl::WaitRegistered(SteadyClock::duration timeout) {
  absl::MutexLock lock(&done_mu_);
  auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(done_mu_) {
    return nodes_registered_ >= opts_.nodes;
  };
  return done_mu_.AwaitWithTimeout(absl::Condition(&all),
                                   absl::FromChrono(timeout));
}

void SimulatedFleet::Impl::Stop() {
  if (stopping_.exchange(true)) return;
  // No timer (heartbeat, reconnect, rank exit) runs after this.
  timers_.Stop();
  for (auto& agent : agents_) {
    absl::MutexLock lock(&agent->mu);
    if (agent->session != nullptr) agent->session->Cancel();
  }
  absl::MutexLock lock(&done_mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(done_mu_) {
    return live_sessions_ == 0;
  };
  if (!done_mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(20))) {
    fprintf(stderr, "fleet: %d streams did not end within 20 s of cancelling\n",
            live_sessions_);
    leaked_ = true;
  }
}

void SimulatedFleet::Impl::Connect(Agent* agent) {
  absl::MutexLock lock(&agent->mu);
  // Checked under the agent's lock: Stop sets stopping_ and then cancels each
  // agent's stream under the same lock, so no stream escapes the cancel.
  if (stopping_.load() || agent->session != nullptr) return;
  v1::AgentMessage msg;
  v1::Register* reg = msg.mutable_register_();
  reg->set_name(agent->name);
  *reg->mutable_inventory() = agent->inventory;
  reg->set_agent_version("xl-fleet-sim");
  reg->set_shared_env(true);
  reg->set_honours_lease(true);
  for (const auto& [key, share] : agent->running) {
    for (int32_t rank : share.ranks) {
      v1::RankStatus* st = reg->add_ranks();
      st->set_job_id(key.first);
      st->set_attempt(key.second);
      st->set_rank(rank);
      st->set_state(v1::RANK_RUNNING);
      st->set_pid(100000 + rank);
    }
  }
  for (auto& st : agent->unreported) *reg->add_ranks() = std::move(st);
  agent->unreported.clear();
  auto* session = new Session(this, agent, ++agent->generation);
  agent->session = session;
  {
    absl::MutexLock done(&done_mu_);
    ++live_sessions_;
  }
  agent->register_sent = SteadyClock::now();
  agent->heartbeats_in_flight.clear();
  session->Begin(std::move(msg));
}

void SimulatedFleet::Impl::OnMessage(Agent* agent, Session* session,
                                     const v1::SchedulerMessage& m) {
  const auto now = SteadyClock::now();
  switch (m.msg_case()) {
    case v1::SchedulerMessage::kRegisterAck: {
      const auto& ack = m.register_ack();
      session->MarkAcked();
      ++counters_.register_acks;
      register_rtt_.Add(Ms(now - agent->register_sent));
      if (FromProto(ack.heartbeat_interval()) > SteadyClock::duration::zero()) {
        agent->heartbeat_interval = FromProto(ack.heartbeat_interval());
      }
      agent->lease = ack.has_lease() ? FromProto(ack.lease())
                                     : SteadyClock::duration::zero();
      agent->last_acked_send = agent->register_sent;
      agent->failures_in_row = 0;
      if (!agent->ever_registered) {
        agent->ever_registered = true;
        absl::MutexLock lock(&done_mu_);
        ++nodes_registered_;
      }
      // The first heartbeat at a random phase, so they spread over the
      // interval instead of arriving together.
      const auto first =
          now + std::chrono::duration_cast<SteadyClock::duration>(
                    agent->heartbeat_interval *
                    Unit(opts_.seed * 1000003 + agent->index * 7919 +
                         session->generation()));
      const uint64_t gen = session->generation();
      timers_.At(agent->index, first,
                 [this, agent, gen, first] { Heartbeat(agent, gen, first); });
      break;
    }
    case v1::SchedulerMessage::kStartRanks:
      ++counters_.start_ranks;
      StartRanks(agent, m.start_ranks());
      break;
    case v1::SchedulerMessage::kStopJob: {
      ++counters_.stop_jobs;
      const auto& stop = m.stop_job();
      for (auto it = agent->running.begin(); it != agent->running.end();) {
        auto next = std::next(it);
        if (it->first.first == stop.job_id() &&
            it->first.second <= stop.attempt()) {
          EndShare(agent, it, 0, SIGTERM, "", /*stopped=*/true);
        }
        it = next;
      }
      break;
    }
    case v1::SchedulerMessage::kHeartbeatAck: {
      ++counters_.heartbeat_acks;
      auto& sent = agent->heartbeats_in_flight;
      while (!sent.empty() && sent.front().first < m.heartbeat_ack().seq()) {
        sent.pop_front();
      }
      if (!sent.empty() && sent.front().first == m.heartbeat_ack().seq()) {
        heartbeat_rtt_.Add(Ms(now - sent.front().second));
        agent->last_acked_send =
            std::max(agent->last_acked_send, sent.front().second);
        sent.pop_front();
      }
      break;
    }
    case v1::SchedulerMessage::kLogAck:
      ++counters_.log_acks;
      break;
    default:
      ++counters_.other_messages;
      break;
  }
}

void SimulatedFleet::Impl::StartRanks(Agent* agent,
                                      const v1::StartRanks& start) {
  const auto now = SteadyClock::now();
  const auto key = std::make_pair(start.job_id(), start.attempt());
  if (agent->running.count(key) > 0) return;  // a repeat
  if (agent->freed_at) {
    free_to_start_.Add(Ms(now - *agent->freed_at));
    agent->freed_at.reset();
  }
  Share share;
  share.started = now;
  share.id = agent->next_share_id++;
  // The GPUs the scheduler gave this node: CUDA_VISIBLE_DEVICES.
  if (const std::string* gpus = StartEnv(start, "CUDA_VISIBLE_DEVICES");
      gpus != nullptr && !gpus->empty()) {
    share.gpus =
        1 + static_cast<int>(std::count(gpus->begin(), gpus->end(), ','));
  }
  auto runtime =
      std::chrono::duration_cast<SteadyClock::duration>(opts_.default_runtime);
  if (const std::string* ms = StartEnv(start, kRuntimeEnv)) {
    runtime = std::chrono::milliseconds(atoll(ms->c_str()));
  }
  if (const std::string* code = StartEnv(start, kExitCodeEnv)) {
    share.exit_code = atoi(code->c_str());
  }
  for (const auto& launch : start.ranks()) {
    share.ranks.push_back(launch.rank());
    v1::RankStatus st;
    st.set_job_id(start.job_id());
    st.set_attempt(start.attempt());
    st.set_rank(launch.rank());
    st.set_state(v1::RANK_RUNNING);
    st.set_pid(100000 + launch.rank());
    Report(agent, std::move(st));
  }
  const uint64_t id = share.id;
  if (observer_ != nullptr) {
    observer_->OnStartRanks(start.job_id(), start.attempt(), agent->index,
                            share.gpus, now);
  }
  agent->running.emplace(key, std::move(share));
  timers_.At(agent->index, now + runtime,
             [this, agent, key, id] { RanksDue(agent, key, id); });
}

void SimulatedFleet::Impl::RanksDue(Agent* agent,
                                    const std::pair<std::string, int>& key,
                                    uint64_t share_id) {
  absl::MutexLock lock(&agent->mu);
  auto it = agent->running.find(key);
  if (it == agent->running.end() || it->second.id != share_id) return;
  EndShare(agent, it, it->second.exit_code, 0, "", /*stopped=*/false);
}

void SimulatedFleet::Impl::EndShare(
    Agent* agent, std::map<std::pair<std::string, int>, Share>::iterator it,
    int exit_code, int signal, const std::string& message, bool stopped) {
  const auto now = SteadyClock::now();
  const Share& share = it->second;
  for (int32_t rank : share.ranks) {
    v1::RankStatus st;
    st.set_job_id(it->first.first);
    st.set_attempt(it->first.second);
    st.set_rank(rank);
    st.set_state(v1::RANK_EXITED);
    st.set_exit_code(signal != 0 ? 0 : exit_code);
    st.set_signal(signal);
    st.set_pid(100000 + rank);
    st.set_message(message);
    Report(agent, std::move(st));
  }
  const int64_t window = window_start_ns_.load();
  if (window != INT64_MIN) {
    const int64_t from = std::max(window, Nanos(share.started));
    if (Nanos(now) > from) busy_gpu_ns_ += share.gpus * (Nanos(now) - from);
  }
  if (observer_ != nullptr) {
    observer_->OnRanksEnded(it->first.first, it->first.second, agent->index,
                            share.gpus, stopped, now);
  }
  if (!agent->freed_at && (observer_ == nullptr || observer_->JobsWaiting())) {
    agent->freed_at = now;
  }
  agent->running.erase(it);
}

void SimulatedFleet::Impl::Report(Agent* agent, v1::RankStatus st) {
  if (agent->session != nullptr) {
    v1::AgentMessage msg;
    *msg.mutable_rank_status() = st;
    if (agent->session->Send(std::move(msg))) {
      ++counters_.rank_statuses_sent;
      return;
    }
  }
  if (st.state() != v1::RANK_RUNNING)
    agent->unreported.push_back(std::move(st));
}

void SimulatedFleet::Impl::Heartbeat(Agent* agent, uint64_t generation,
                                     SteadyClock::time_point due) {
  absl::MutexLock lock(&agent->mu);
  if (stopping_.load() || agent->session == nullptr ||
      agent->generation != generation) {
    return;  // this stream is over; the next one runs its own chain
  }
  const auto now = SteadyClock::now();
  if (agent->lease > SteadyClock::duration::zero() &&
      now - agent->last_acked_send > agent->lease && !agent->running.empty()) {
    // What a real agent does: the scheduler may have given these GPUs away.
    ++counters_.lease_expiries;
    while (!agent->running.empty()) {
      EndShare(agent, agent->running.begin(), 0, SIGTERM,
               "stopped by the agent: lease expired", /*stopped=*/true);
    }
  }
  v1::AgentMessage msg;
  const uint64_t seq = agent->next_heartbeat_seq++;
  msg.mutable_heartbeat()->set_seq(seq);
  if (agent->session->Send(std::move(msg))) {
    ++counters_.heartbeats_sent;
    agent->heartbeats_in_flight.emplace_back(seq, now);
    if (agent->heartbeats_in_flight.size() > 64) {
      agent->heartbeats_in_flight.pop_front();
    }
  }
  auto next = due + agent->heartbeat_interval;
  // After a stall, skip the missed beats rather than sending a burst.
  if (next < now) next = now + agent->heartbeat_interval;
  timers_.At(agent->index, next, [this, agent, generation, next] {
    Heartbeat(agent, generation, next);
  });
}

void SimulatedFleet::Impl::OnSessionEnded(Agent* agent, bool acked,
                                          const grpc::Status& status) {
  if (stopping_.load()) return;
  if (acked) {
    ++counters_.sessions_closed_by_scheduler;
    if (!agent->ever_closed) {
      agent->ever_closed = true;
      ++counters_.nodes_closed_by_scheduler;
    }
  } else {
    ++counters_.sessions_failed_before_ack;
  }
  if (closed_reports_.fetch_add(1) < 10) {
    fprintf(stderr, "fleet: %s: stream ended %s: code %d: %s\n",
            agent->name.c_str(),
            acked ? "by the scheduler" : "before its RegisterAck",
            static_cast<int>(status.error_code()),
            status.error_message().c_str());
  }
  const int shift = std::min(agent->failures_in_row++, 5);
  const auto base = std::min<SteadyClock::duration>(
      std::chrono::milliseconds(200) * (1 << shift), std::chrono::seconds(5));
  const auto delay = std::chrono::duration_cast<SteadyClock::duration>(
      base * (0.5 + 0.5 * Unit(agent->index * 31 + agent->generation)));
  timers_.At(agent->index, SteadyClock::now() + delay,
             [this, agent] { Connect(agent); });
}

void SimulatedFleet::Impl::OnSessionGone() {
  absl::MutexLock lock(&done_mu_);
  --live_sessions_;
}

double SimulatedFleet::Impl::BusyGpuSeconds() const {
  const int64_t window = window_start_ns_.load();
  if (window == INT64_MIN) return 0;
  const int64_t now = Nanos(SteadyClock::now());
  int64_t busy = busy_gpu_ns_.load();
  for (const auto& agent : agents_) {
    absl::MutexLock lock(&agent->mu);
    for (const auto& [key, share] : agent->running) {
      const int64_t from = std::max(window, Nanos(share.started));
      if (now > from) busy += share.gpus * (now - from);
    }
  }
  return busy / 1e9;
}

FleetCounters SimulatedFleet::Impl::Counters() const {
  FleetCounters c;
  {
    absl::MutexLock lock(&done_mu_);
    c.nodes_registered = nodes_registered_;
  }
  c.register_acks = counters_.register_acks;
  c.sessions_closed_by_scheduler = counters_.sessions_closed_by_scheduler;
  c.nodes_closed_by_scheduler = counters_.nodes_closed_by_scheduler;
  c.sessions_failed_before_ack = counters_.sessions_failed_before_ack;
  c.start_ranks = counters_.start_ranks;
  c.stop_jobs = counters_.stop_jobs;
  c.rank_statuses_sent = counters_.rank_statuses_sent;
  c.heartbeats_sent = counters_.heartbeats_sent;
  c.heartbeat_acks = counters_.heartbeat_acks;
  c.log_acks = counters_.log_acks;
  c.lease_expiries = counters_.lease_expiries;
  c.other_messages = counters_.other_messages;
  for (const auto& agent : agents_) {
    absl::MutexLock lock(&agent->mu);
    c.running_shares += agent->running.size();
    for (const auto& [key, share] : agent->running) c.gpus_busy += share.gpus;
  }
  return c;
}

// --- SimulatedFleet ----------------------------------------------------------

SimulatedFleet::SimulatedFleet(FleetOptions options, FleetObserver* observer)
    : impl_(std::make_unique<Impl>(std::move(options), observer)) {}
SimulatedFleet::~SimulatedFleet() = default;
void SimulatedFleet::Start() { impl_->Start(); }
bool SimulatedFleet::WaitRegistered(SteadyClock::duration timeout) {
  return impl_->WaitRegistered(timeout);
}
void SimulatedFleet::Stop() { impl_->Stop(); }
void SimulatedFleet::StartBusyWindow(SteadyClock::time_point from) {
  impl_->StartBusyWindow(from);
}
double SimulatedFleet::BusyGpuSeconds() const {
  return impl_->BusyGpuSeconds();
}
FleetCounters SimulatedFleet::Counters() const { return impl_->Counters(); }
const LatencySamples& SimulatedFleet::heartbeat_rtt() const {
  return impl_->heartbeat_rtt_;
}
const LatencySamples& SimulatedFleet::register_rtt() const {
  return impl_->register_rtt_;
}
const LatencySamples& SimulatedFleet::free_to_start() const {
  return impl_->free_to_start_;
}
const std::string& SimulatedFleet::target() const {
  return impl_->opts_.target;
}
std::string SimulatedFleet::NodeName(int index) const {
  return impl_->NodeName(index);
}
int SimulatedFleet::nodes() const { return impl_->opts_.nodes; }
int SimulatedFleet::total_gpus() const {
  return impl_->opts_.nodes * impl_->opts_.gpus_per_node;
}

// --- submitting ---

v1::SubmitJobRequest GpuSubmitRequest(const std::string& key, int gpus,
                                          int64_t runtime_ms) {
  v1::SubmitJobRequest req;
  auto* spec = req.mutable_spec();
  spec->set_name("bench");
  spec->add_command("/bin/true");
  spec->mutable_resources()->set_nodes(1);
  spec->mutable_resources()->set_gpus_per_node(gpus);
  (*spec->mutable_env())[kRuntimeEnv] = std::to_string(runtime_ms);
  req.set_idempotency_key(key);
  return req;
}

// Submits requests 0..count-1 (`make(n)`), 32 in flight; false when one
// fails or they take longer than 120 s (the reason is on stderr).
bool SubmitAll(v1::JobService::Stub* stub, int count,
               const std::function<v1::SubmitJobRequest(int)>& make) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    int next = 0, answered = 0, failed = 0;
    bool stop = false;
  };
  auto state = std::make_shared<State>();
  std::function<void()> issue;
  issue = [=, &issue]() {
    int n;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->next >= count || state->stop) return;
      n = state->next++;
    }
    auto* ctx = new grpc::ClientContext();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto* req = new v1::SubmitJobRequest(make(n));
    auto* resp = new v1::SubmitJobResponse();
    stub->async()->SubmitJob(ctx, req, resp, [=, &issue](grpc::Status s) {
      delete ctx; delete req; delete resp;
      // The next call first: once `answered` counts this one, SubmitAll may
      // return and `issue` go away.
      issue();
      std::lock_guard<std::mutex> lock(state->mu);
      ++state->answered;
      if (!s.ok() && state->failed++ == 0) {
        fprintf(stderr, "bench: SubmitJob failed: %s\n", s.error_message().c_str());
      }
      state->cv.notify_all();
    });
  };
  for (int i = 0; i < 32; ++i) issue();
  std::unique_lock<std::mutex> lock(state->mu);
  bool done = state->cv.wait_for(lock, std::chrono::seconds(120),
                                 [&] { return state->answered == count; });
  if (!done) {
    fprintf(stderr, "bench: %d of %d submits answered in 120 s\n", state->answered,
            count);
    // Calls in flight refer to `issue`: wait for them before it goes away.
    state->stop = true;
    state->cv.wait(lock, [&] { return state->answered == state->next; });
  }
  return done && state->failed == 0;
}

}  // namespace xl::bench
