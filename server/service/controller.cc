#include "server/service/controller.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"
#include "common/status.h"
#include "common/planner/planner.h"
#include "server/scheduler/job_spec.h"

namespace xl::service {
namespace {

bool IsActive(v1::JobState s) {
  return s == v1::SCHEDULED || s == v1::RUNNING;
}
bool IsTerminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

int64_t ParseJobId(const std::string& id) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(id, &v) || v <= 0) return -1;
  return v;
}

std::string RandomToken() {
  absl::BitGen gen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

// The fastest NIC of a node, for the NCCL hints; nullptr when it has none.
const v1::Nic* FastestNic(const v1::NodeInventory& inv) {
  const v1::Nic* best = nullptr;
  for (const auto& nic : inv.nics()) {
    if (best == nullptr || nic.gbps() > best->gbps()) best = &nic;
  }
  return best;
}

void Log(const std::string& line) {
  fprintf(stderr, "xl-scheduler: %s\n", line.c_str());
}

}  // namespace

Controller::Controller(store::Store* store, const Clock* clock,
                       ControllerOptions opts)
    : store_(store), clock_(clock), opts_(std::move(opts)) {}

Controller::~Controller() { Stop(); }

absl::Status Controller::Recover() {
  ASSIGN_OR_RETURN(store::StoredState state, store_->Load());
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  for (auto& n : state.nodes) {
    NodeRecord& node = nodes_[n.name];
    node.name = n.name;
    node.inventory = n.inventory;
    node.address = n.inventory.address();
    node.drained = n.drained;
    node.drain_reason = n.state_reason;
    node.register_time = n.register_time;
    // Nobody is lost for the scheduler's own downtime: the timeout starts now.
    node.last_heartbeat = now;
  }
  for (auto& job : state.jobs) {
    int64_t id = ParseJobId(job.id());
    if (id <= 0) continue;
    JobRecord& rec = jobs_[id];
    rec.seq = id;
    rec.job = std::move(job);
    next_job_id_ = std::max(next_job_id_, id + 1);
    if (!rec.job.idempotency_key().empty()) {
      keys_[rec.job.idempotency_key()] = id;
    }
    if (rec.job.state() == v1::PENDING) {
      pending_.insert({-rec.job.spec().priority(), id});
    } else if (IsActive(rec.job.state())) {
      active_.insert(id);
      for (const auto& a : rec.job.allocations()) {
        NodeRecord& node = nodes_[a.node()];
        if (node.name.empty()) {
          node.name = a.node();
          node.last_heartbeat = now;
        }
        if (node.address.empty()) node.address = a.address();
        Hold hold;
        hold.job_id = rec.job.id();
        hold.attempt = rec.job.attempt();
        hold.share.node = a.node();
        hold.share.gpu_indices.assign(a.gpu_indices().begin(),
                                      a.gpu_indices().end());
        hold.share.cpus = a.cpus();
        hold.share.memory_bytes = a.memory_bytes();
        hold.share.nvme_bytes = a.nvme_bytes();
        hold.share.nic_gbps = a.nic_gbps();
        hold.live_ranks.insert(a.ranks().begin(), a.ranks().end());
        node.holds.push_back(std::move(hold));
      }
      if (rec.job.master_port() > 0) {
        ports_[rec.job.master_addr()].insert(rec.job.master_port());
      }
    }
  }
  for (auto& e : state.events) {
    int64_t id = ParseJobId(e.job_id());
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    it->second.committed_event_seq = e.seq();
    it->second.events.push_back(std::move(e));
  }
  capacity_freed_ = true;
  pass_needed_ = true;
  return absl::OkStatus();
}

void Controller::SetAdvertiseAddressIfEmpty(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (opts_.advertise_address.empty()) opts_.advertise_address = address;
}

void Controller::Start() {
  loop_ = std::thread([this] { RunLoop(); });
}

void Controller::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (loop_.joinable()) loop_.join();
}

void Controller::RunLoop() {
  while (true) {
    After after;
    {
      absl::MutexLock lock(&mu_);
      // Passes come at most every kMinPass, so a burst of submits is
      // scheduled together rather than one wake-up each.
      constexpr absl::Duration kMinPass = absl::Milliseconds(2);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), kMinPass);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return wake_ || stop_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&woken), opts_.tick);
      if (stop_) return;
      wake_ = false;
      TickLocked(&after);
    }
    RunAfter(&after);
  }
}

void Controller::Tick() {
  After after;
  {
    absl::MutexLock lock(&mu_);
    TickLocked(&after);
  }
  RunAfter(&after);
}

void Controller::RunAfter(After* after) {
  for (auto& call : after->calls) call();
  after->calls.clear();
}

void Controller::ProcessDisconnects(After* after) {
  std::vector<std::pair<std::string, std::shared_ptr<AgentConnection>>> gone;
  {
    absl::MutexLock lock(&disconnect_mu_);
    gone.swap(disconnects_);
  }
  for (const auto& [name, conn] : gone) {
    auto it = nodes_.find(name);
    if (it == nodes_.end() || it->second.conn != conn) continue;
    it->second.conn.reset();
    pass_needed_ = true;
    Log(absl::StrCat("node ", name, ": agent disconnected; lost in ",
                     HumanDuration(opts_.heartbeat_timeout),
                     " unless it reconnects"));
  }
}

void Controller::TickLocked(After* after) {
  ProcessDisconnects(after);
  absl::Time now = clock_->Now();
  for (auto& [name, node] : nodes_) {
    if (node.lost) continue;
    absl::Duration silent = now - node.last_heartbeat;
    if (silent > opts_.heartbeat_timeout) {
      NodeLost(&node,
               absl::StrCat("no heartbeat for ", HumanDuration(silent),
                            " (timeout ", HumanDuration(opts_.heartbeat_timeout),
                            ")"),
               after);
    }
  }
  // Time limits, over the running jobs only.
  std::vector<int64_t> active(active_.begin(), active_.end());
  for (int64_t id : active) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    JobRecord& rec = it->second;
    if (!IsActive(rec.job.state()) || rec.stopping) continue;
    absl::Duration limit = FromProto(rec.job.spec().time_limit());
    if (limit <= absl::ZeroDuration() || !rec.job.has_start_time()) continue;
    if (now - FromProto(rec.job.start_time()) >= limit) {
      StopGang(&rec, after);
      Transition(&rec, v1::FAILED,
                 absl::StrCat("time limit of ", HumanDuration(limit),
                              " reached; the ranks were stopped (raise "
                              "time_limit to give it longer)"));
    }
  }
  ServeWaiters(after);
  if (pass_needed_) SchedulePass(after);
}

std::vector<scheduler::NodeCapacity> Controller::Capacities() const {
  std::vector<scheduler::NodeCapacity> caps;
  caps.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) {
    auto cap = scheduler::NodeCapacity::Empty(name, node.inventory);
    if (node.lost) {
      cap.unavailable = absl::StrCat("lost (", node.lost_reason, ")");
    } else if (!node.conn) {
      cap.unavailable = "agent not connected";
    } else if (node.drained) {
      cap.unavailable = node.drain_reason.empty()
                            ? "drained"
                            : absl::StrCat("drained (", node.drain_reason, ")");
    }
    for (const auto& hold : node.holds) scheduler::Consume(&cap, hold.share);
    caps.push_back(std::move(cap));
  }
  return caps;
}

void Controller::SchedulePass(After* after) {
  pass_needed_ = false;
  std::vector<scheduler::JobRequest> queue;
  auto add = [&](int64_t id) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.job.state() != v1::PENDING) return;
    scheduler::JobRequest req;
    req.job_id = it->second.job.id();
    req.priority = it->second.job.spec().priority();
    req.submit_seq = id;
    req.resources = it->second.job.spec().resources();
    queue.push_back(std::move(req));
  };
  if (capacity_freed_) {
    for (const auto& [prio, id] : pending_) add(id);
  } else {
    for (int64_t id : new_pending_) add(id);
  }
  capacity_freed_ = false;
  new_pending_.clear();
  if (queue.empty()) return;
  scheduler::Decisions d = scheduler::Schedule(Capacities(), std::move(queue));
  for (auto& [job_id, reason] : d.waiting) {
    JobRecord* rec = FindJob(job_id);
    if (rec != nullptr && rec->job.reason() != reason) {
      rec->job.set_reason(reason);
    }
  }
  for (auto& [job_id, placement] : d.starts) {
    JobRecord* rec = FindJob(job_id);
    if (rec == nullptr) continue;
    pending_.erase({-rec->job.spec().priority(), rec->seq});
    StartJob(rec, placement, after);
  }
}

int Controller::AllocatePort(const std::string& address) {
  std::set<int>& used = ports_[address];
  int& cursor = port_cursor_[address];
  if (cursor < opts_.master_port_base) cursor = opts_.master_port_base;
  for (int i = 0; i < opts_.master_port_count; ++i) {
    int p = opts_.master_port_base +
            (cursor - opts_.master_port_base + i) % opts_.master_port_count;
    if (used.count(p) == 0) {
      used.insert(p);
      cursor = p + 1;
      return p;
    }
  }
  return opts_.master_port_base;
}

void Controller::StartJob(JobRecord* rec, const scheduler::Placement& placement,
                          After* after) {
  v1::Job& job = rec->job;
  const auto& res = job.spec().resources();
  const int rpn = res.ranks_per_node();
  const int world = res.nodes() * rpn;
  job.set_world_size(world);
  job.clear_allocations();
  std::vector<std::string> names;
  for (size_t g = 0; g < placement.shares.size(); ++g) {
    const auto& share = placement.shares[g];
    NodeRecord& node = nodes_[share.node];
    names.push_back(share.node);
    v1::Allocation* a = job.add_allocations();
    a->set_node(share.node);
    for (int32_t gpu : share.gpu_indices) a->add_gpu_indices(gpu);
    a->set_group_rank(static_cast<int32_t>(g));
    a->set_address(node.address);
    a->set_cpus(share.cpus);
    a->set_memory_bytes(share.memory_bytes);
    a->set_nvme_bytes(share.nvme_bytes);
    a->set_nic_gbps(share.nic_gbps);
    Hold hold;
    hold.job_id = job.id();
    hold.attempt = job.attempt();
    hold.share = share;
    for (int l = 0; l < rpn; ++l) {
      int rank = static_cast<int>(g) * rpn + l;
      a->add_ranks(rank);
      hold.live_ranks.insert(rank);
    }
    node.holds.push_back(std::move(hold));
  }
  job.set_master_addr(job.allocations(0).address());
  job.set_master_port(AllocatePort(job.master_addr()));
  *job.mutable_start_time() = ToProtoTime(clock_->Now());
  job.clear_end_time();
  job.set_exit_code(0);
  rec->ranks.clear();
  rec->stopping = false;

  const std::string token = RandomToken();
  rec->token = token;
  rec->rendezvous.clear();
  std::vector<std::pair<std::string, v1::SchedulerMessage>> messages;
  for (const auto& a : job.allocations()) {
    const NodeRecord& node = nodes_[a.node()];
    v1::SchedulerMessage msg;
    v1::StartRanks* start = msg.mutable_start_ranks();
    start->set_job_id(job.id());
    start->set_attempt(job.attempt());
    start->mutable_argv()->CopyFrom(job.spec().command());
    start->set_working_dir(job.spec().working_dir());
    *start->mutable_grace_period() = job.spec().grace_period();
    std::string gpus = absl::StrJoin(a.gpu_indices(), ",");
    for (int l = 0; l < a.ranks_size(); ++l) {
      v1::RankLaunch* launch = start->add_ranks();
      launch->set_rank(a.ranks(l));
      launch->set_local_rank(l);
      auto& env = *launch->mutable_env();
      if (const v1::Nic* nic = FastestNic(node.inventory)) {
        if (nic->kind() == v1::INFINIBAND) {
          env["NCCL_IB_HCA"] = nic->name();
        } else {
          env["NCCL_SOCKET_IFNAME"] = nic->name();
        }
      }
      for (const auto& [k, v] : job.spec().env()) env[k] = v;
      env["RANK"] = absl::StrCat(a.ranks(l));
      env["WORLD_SIZE"] = absl::StrCat(world);
      env["LOCAL_RANK"] = absl::StrCat(l);
      env["LOCAL_WORLD_SIZE"] = absl::StrCat(rpn);
      env["GROUP_RANK"] = absl::StrCat(a.group_rank());
      env["GROUP_WORLD_SIZE"] = absl::StrCat(res.nodes());
      env["ROLE_RANK"] = env["RANK"];
      env["ROLE_WORLD_SIZE"] = env["WORLD_SIZE"];
      env["MASTER_ADDR"] = job.master_addr();
      env["MASTER_PORT"] = absl::StrCat(job.master_port());
      env["CUDA_VISIBLE_DEVICES"] = gpus;
      env["TORCHELASTIC_RUN_ID"] = job.id();
      env["TORCHELASTIC_RESTART_COUNT"] = absl::StrCat(job.attempt() - 1);
      env["TORCHELASTIC_MAX_RESTARTS"] = absl::StrCat(job.spec().max_retries());
      env["XL_JOB_ID"] = job.id();
      env["XL_ATTEMPT"] = absl::StrCat(job.attempt());
      env["XL_NODE"] = a.node();
      env["XL_NODE_ADDRESS"] = a.address();
      env["XL_SCHEDULER"] = opts_.advertise_address;
      env["XL_RENDEZVOUS_TOKEN"] = token;
    }
    messages.emplace_back(a.node(), std::move(msg));
  }
  const std::string job_id = job.id();
  const int attempt = job.attempt();
  Transition(rec, v1::SCHEDULED,
             absl::StrCat("placed on ", absl::StrJoin(names, ", ")),
             [this, job_id, attempt, messages = std::move(messages)] {
               // Decisions go to the agents only once they are durable.
               std::vector<std::pair<std::shared_ptr<AgentConnection>,
                                     const v1::SchedulerMessage*>>
                   sends;
               {
                 absl::MutexLock lock(&mu_);
                 JobRecord* rec = FindJob(job_id);
                 bool live = rec != nullptr && rec->job.attempt() == attempt &&
                             IsActive(rec->job.state()) && !rec->stopping;
                 for (const auto& [name, msg] : messages) {
                   NodeRecord& node = nodes_[name];
                   if (live && node.conn) {
                     sends.emplace_back(node.conn, &msg);
                   } else if (!live) {
                     // Never started: give the resources back now.
                     for (const auto& r : msg.start_ranks().ranks()) {
                       ReleaseRank(&node, job_id, attempt, r.rank());
                     }
                   }
                   // A node without a connection reconciles on reconnect.
                 }
               }
               for (auto& [conn, msg] : sends) conn->Send(*msg);
             });
  (void)after;
}

void Controller::Transition(JobRecord* rec, v1::JobState to,
                            const std::string& reason,
                            std::function<void()> then) {
  v1::Job& job = rec->job;
  v1::JobState from = job.state();
  absl::Time now = clock_->Now();
  if (IsActive(from) && !IsActive(to) && job.master_port() > 0) {
    auto it = ports_.find(job.master_addr());
    if (it != ports_.end()) it->second.erase(job.master_port());
  }
  job.set_state(to);
  job.set_reason(reason);
  if (IsActive(to)) {
    active_.insert(rec->seq);
  } else {
    active_.erase(rec->seq);
  }
  if (IsTerminal(to)) *job.mutable_end_time() = ToProtoTime(now);
  v1::JobEvent e;
  e.set_job_id(job.id());
  e.set_seq(rec->events.empty() ? 1 : rec->events.back().seq() + 1);
  *e.mutable_time() = ToProtoTime(now);
  e.set_from_state(from);
  e.set_to_state(to);
  e.set_attempt(job.attempt());
  e.set_reason(reason);
  rec->events.push_back(e);
  const std::string id = job.id();
  store_->Write(
      [copy = job, e](store::Tx& tx) {
        RETURN_IF_ERROR(tx.PutJob(copy));
        return tx.AddEvent(e);
      },
      [this, id, seq = e.seq(), then = std::move(then)](absl::Status st) {
        if (!st.ok()) {
          Log(absl::StrCat("job ", id, ": could not record a transition: ",
                           st.ToString()));
        }
        {
          absl::MutexLock lock(&mu_);
          JobRecord* rec = FindJob(id);
          if (rec != nullptr && seq > rec->committed_event_seq) {
            rec->committed_event_seq = seq;
          }
        }
        NotifyListeners(id);
        if (then) then();
      });
}

void Controller::StopGang(JobRecord* rec, After* after) {
  rec->stopping = true;
  for (const auto& a : rec->job.allocations()) {
    auto it = nodes_.find(a.node());
    if (it == nodes_.end() || !it->second.conn) continue;
    v1::SchedulerMessage msg;
    v1::StopJob* stop = msg.mutable_stop_job();
    stop->set_job_id(rec->job.id());
    stop->set_attempt(rec->job.attempt());
    *stop->mutable_grace_period() = rec->job.spec().grace_period();
    it->second.conn->Send(msg);
  }
  (void)after;
}

void Controller::FailAttempt(JobRecord* rec, const std::string& why,
                             After* after) {
  StopGang(rec, after);
  v1::Job& job = rec->job;
  const int used = job.attempt() - 1;
  if (used < job.spec().max_retries()) {
    std::string reason = absl::StrCat(why, "; requeued as attempt ",
                                      job.attempt() + 1, " of ",
                                      job.spec().max_retries() + 1);
    // Release the port of the attempt that ended before the attempt changes.
    auto it = ports_.find(job.master_addr());
    if (it != ports_.end()) it->second.erase(job.master_port());
    job.set_attempt(job.attempt() + 1);
    job.clear_allocations();
    job.clear_master_addr();
    job.set_master_port(0);
    job.clear_start_time();
    rec->ranks.clear();
    rec->stopping = false;
    Transition(rec, v1::PENDING, reason);
    pending_.insert({-job.spec().priority(), rec->seq});
    new_pending_.push_back(rec->seq);
    pass_needed_ = true;
    wake_ = true;
  } else {
    std::string reason = why;
    if (job.spec().max_retries() > 0) {
      absl::StrAppend(&reason, "; no retries left (max_retries ",
                      job.spec().max_retries(), ")");
    }
    Transition(rec, v1::FAILED, reason);
  }
}

void Controller::ReleaseRank(NodeRecord* node, const std::string& job_id,
                             int attempt, int rank) {
  for (auto it = node->holds.begin(); it != node->holds.end(); ++it) {
    if (it->job_id != job_id || it->attempt != attempt) continue;
    it->live_ranks.erase(rank);
    if (it->live_ranks.empty()) {
      node->holds.erase(it);
      capacity_freed_ = true;
      pass_needed_ = true;
      wake_ = true;
    }
    return;
  }
}

void Controller::HandleRankStatus(NodeRecord* node, const v1::RankStatus& st,
                                  After* after) {
  JobRecord* rec = FindJob(st.job_id());
  const bool current = rec != nullptr && rec->job.attempt() == st.attempt() &&
                       IsActive(rec->job.state()) && !rec->stopping;
  if (st.state() == v1::RANK_RUNNING) {
    if (!current) {
      // A rank of an attempt that is over: stop it.
      v1::SchedulerMessage msg;
      msg.mutable_stop_job()->set_job_id(st.job_id());
      msg.mutable_stop_job()->set_attempt(st.attempt());
      *msg.mutable_stop_job()->mutable_grace_period() =
          rec != nullptr ? rec->job.spec().grace_period()
                         : ToProtoDuration(absl::Seconds(10));
      msg.mutable_stop_job()->set_reason("attempt is over");
      if (node->conn) node->conn->Send(msg);
      return;
    }
    rec->ranks[st.rank()] = st;
    if (rec->job.state() == v1::SCHEDULED &&
        static_cast<int>(rec->ranks.size()) == rec->job.world_size()) {
      Transition(rec, v1::RUNNING,
                 absl::StrCat("all ", rec->job.world_size(), " ranks running"));
    }
    return;
  }
  ReleaseRank(node, st.job_id(), st.attempt(), st.rank());
  if (!current) return;
  rec->ranks[st.rank()] = st;
  if (st.state() == v1::RANK_EXITED && st.exit_code() == 0 &&
      st.signal() == 0) {
    int done = 0;
    for (const auto& [r, s] : rec->ranks) {
      if (s.state() == v1::RANK_EXITED && s.exit_code() == 0 &&
          s.signal() == 0) {
        ++done;
      }
    }
    if (done == rec->job.world_size()) {
      Transition(rec, v1::SUCCEEDED,
                 absl::StrCat("all ", done, " ranks exited with code 0"));
    }
    return;
  }
  std::string why;
  if (st.state() == v1::RANK_FAILED_TO_START) {
    why = absl::StrCat("rank ", st.rank(), " on ", node->name,
                       " failed to start: ", st.message());
    rec->job.set_exit_code(127);
  } else if (st.signal() != 0) {
    why = absl::StrCat("rank ", st.rank(), " on ", node->name,
                       " was killed by signal ", st.signal());
    rec->job.set_exit_code(128 + st.signal());
  } else {
    why = absl::StrCat("rank ", st.rank(), " on ", node->name,
                       " exited with code ", st.exit_code());
    if (!st.message().empty()) absl::StrAppend(&why, " (", st.message(), ")");
    rec->job.set_exit_code(st.exit_code());
  }
  FailAttempt(rec, why, after);
}

void Controller::NodeLost(NodeRecord* node, const std::string& why,
                          After* after) {
  node->lost = true;
  node->lost_reason = why;
  Log(absl::StrCat("node ", node->name, " lost: ", why));
  if (node->conn) {
    auto conn = std::move(node->conn);
    node->conn.reset();
    after->calls.push_back([conn, why] { conn->Close(why); });
  }
  std::vector<Hold> holds;
  holds.swap(node->holds);
  for (const auto& hold : holds) {
    JobRecord* rec = FindJob(hold.job_id);
    if (rec == nullptr || rec->job.attempt() != hold.attempt ||
        !IsActive(rec->job.state()) || rec->stopping) {
      continue;
    }
    FailAttempt(rec, absl::StrCat("node ", node->name, " was lost: ", why),
                after);
  }
  pass_needed_ = true;
}

Controller::JobRecord* Controller::FindJob(const std::string& id) {
  auto it = jobs_.find(ParseJobId(id));
  return it == jobs_.end() ? nullptr : &it->second;
}

void Controller::NotifyListeners(const std::string& job_id) {
  std::vector<std::function<void()>> calls;
  {
    absl::MutexLock lock(&listeners_mu_);
    auto it = listeners_.find(job_id);
    if (it == listeners_.end()) return;
    for (const auto& [id, fn] : it->second) calls.push_back(fn);
  }
  for (auto& fn : calls) fn();
}

int64_t Controller::AddListener(const std::string& job_id,
                                std::function<void()> wake) {
  absl::MutexLock lock(&listeners_mu_);
  int64_t id = next_listener_++;
  listeners_[job_id][id] = std::move(wake);
  return id;
}

void Controller::RemoveListener(const std::string& job_id, int64_t id) {
  absl::MutexLock lock(&listeners_mu_);
  auto it = listeners_.find(job_id);
  if (it == listeners_.end()) return;
  it->second.erase(id);
  if (it->second.empty()) listeners_.erase(it);
}

// --- JobService -----------------------------------------------------------

void Controller::Submit(
    const std::string& user, v1::SubmitJobRequest request,
    std::function<void(absl::StatusOr<v1::SubmitJobResponse>)> done) {
  v1::JobSpec spec = std::move(*request.mutable_spec());
  v1::Plan plan;
  absl::Status valid = SizeFromModel(&spec, &plan);
  if (valid.ok()) valid = scheduler::ValidateJobSpec(&spec);
  if (!valid.ok()) {
    done(valid);
    return;
  }
  const std::string key = request.idempotency_key();
  if (key.size() > 256) {
    done(absl::InvalidArgumentError(
        "idempotency_key: longer than 256 characters; use a UUID"));
    return;
  }
  auto rec = std::make_shared<JobRecord>();
  {
    absl::MutexLock lock(&mu_);
    if (!key.empty()) {
      auto it = keys_.find(key);
      if (it != keys_.end()) {
        v1::SubmitJobResponse resp;
        resp.set_job_id(absl::StrCat(it->second));
        resp.set_created(false);
        if (uncommitted_.count(it->second) == 0) {
          mu_.Unlock();
          done(resp);
          mu_.Lock();
          return;
        }
        // The first submit is still committing: answer after it.
        int64_t id = it->second;
        store_->Write([](store::Tx&) { return absl::OkStatus(); },
                      [this, id, resp, done](absl::Status st) {
                        bool exists;
                        {
                          absl::MutexLock lock(&mu_);
                          exists = jobs_.count(id) > 0;
                        }
                        if (st.ok() && exists) {
                          done(resp);
                        } else {
                          done(absl::UnavailableError(
                              "the first submit with this idempotency key "
                              "failed; retry the call"));
                        }
                      });
        return;
      }
    }
    int64_t id = next_job_id_++;
    rec->seq = id;
    v1::Job& job = rec->job;
    job.set_id(absl::StrCat(id));
    job.set_user(user);
    job.set_state(v1::PENDING);
    job.set_attempt(1);
    job.set_idempotency_key(key);
    job.set_world_size(spec.resources().nodes() *
                       spec.resources().ranks_per_node());
    *job.mutable_create_time() = ToProtoTime(clock_->Now());
    job.set_reason("waiting for the next scheduling pass");
    if (plan.parameters() > 0) *job.mutable_plan() = std::move(plan);
    *job.mutable_spec() = std::move(spec);
    v1::JobEvent e;
    e.set_job_id(job.id());
    e.set_seq(1);
    *e.mutable_time() = job.create_time();
    e.set_to_state(v1::PENDING);
    e.set_attempt(1);
    e.set_reason(absl::StrCat("submitted by ", user));
    rec->events.push_back(e);
    if (!key.empty()) keys_[key] = id;
    uncommitted_.insert(id);
  }
  store_->Write(
      [rec](store::Tx& tx) {
        RETURN_IF_ERROR(tx.PutJob(rec->job));
        return tx.AddEvent(rec->events[0]);
      },
      [this, rec, key, done](absl::Status st) {
        const int64_t id = rec->seq;
        const int prio = rec->job.spec().priority();
        {
          absl::MutexLock lock(&mu_);
          uncommitted_.erase(id);
          if (st.ok()) {
            rec->committed_event_seq = 1;
            jobs_.emplace(id, std::move(*rec));
            pending_.insert({-prio, id});
            new_pending_.push_back(id);
            pass_needed_ = true;
            wake_ = true;
          } else if (!key.empty()) {
            keys_.erase(key);
          }
        }
        if (!st.ok()) {
          done(Annotate(st, "the job was not stored"));
          return;
        }
        v1::SubmitJobResponse resp;
        resp.set_job_id(absl::StrCat(id));
        resp.set_created(true);
        done(resp);
      });
}

absl::StatusOr<v1::Job> Controller::GetJob(const std::string& job_id) {
  if (job_id.empty()) {
    return absl::InvalidArgumentError("job_id: required; see xlctl list");
  }
  absl::MutexLock lock(&mu_);
  JobRecord* rec = FindJob(job_id);
  if (rec == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, " does not exist"));
  }
  return rec->job;
}

absl::StatusOr<v1::ListJobsResponse> Controller::ListJobs(
    const v1::ListJobsRequest& request) {
  int limit = request.page_size();
  if (limit < 0) {
    return absl::InvalidArgumentError("page_size: must not be negative");
  }
  if (limit == 0) limit = 100;
  limit = std::min(limit, 1000);
  int64_t below = INT64_MAX;
  if (!request.page_token().empty() &&
      !absl::SimpleAtoi(request.page_token(), &below)) {
    return absl::InvalidArgumentError(
        "page_token: not a token this server gave; pass next_page_token of "
        "the previous page");
  }
  std::set<int> states(request.states().begin(), request.states().end());
  v1::ListJobsResponse resp;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.lower_bound(below);
  while (it != jobs_.begin()) {
    --it;
    const v1::Job& job = it->second.job;
    if (!states.empty() && states.count(job.state()) == 0) continue;
    if (!request.user().empty() && job.user() != request.user()) continue;
    if (!request.queue().empty() && job.spec().queue() != request.queue()) {
      continue;
    }
    if (resp.jobs_size() == limit) {
      resp.set_next_page_token(absl::StrCat(it->first + 1));
      break;
    }
    *resp.add_jobs() = job;
  }
  return resp;
}

void Controller::Cancel(const std::string& user,
                        const v1::CancelJobRequest& request,
                        std::function<void(absl::StatusOr<v1::Job>)> done) {
  if (request.job_id().empty()) {
    done(absl::InvalidArgumentError("job_id: required; see xlctl list"));
    return;
  }
  After after;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    JobRecord* rec = FindJob(request.job_id());
    if (rec == nullptr) {
      error = absl::NotFoundError(absl::StrCat(
          "job ", request.job_id(), " does not exist"));
    } else if (IsTerminal(rec->job.state())) {
      error = absl::FailedPreconditionError(
          absl::StrCat("job ", request.job_id(), " already ended ",
                       v1::JobState_Name(rec->job.state()),
                       "; there is nothing to cancel"));
    } else {
      std::string reason = absl::StrCat("cancelled by ", user);
      if (!request.reason().empty()) {
        absl::StrAppend(&reason, ": ", request.reason());
      }
      if (rec->job.state() == v1::PENDING) {
        pending_.erase({-rec->job.spec().priority(), rec->seq});
      } else {
        StopGang(rec, &after);
      }
      const std::string id = rec->job.id();
      Transition(rec, v1::CANCELLED, reason, [this, id, done] {
        done(GetJob(id));
      });
    }
  }
  RunAfter(&after);
  if (!error.ok()) done(error);
}

v1::GetQueueResponse Controller::GetQueue() {
  v1::GetQueueResponse resp;
  absl::MutexLock lock(&mu_);
  std::map<std::string, v1::QueueSummary> queues;
  for (const auto& [id, rec] : jobs_) {
    const v1::Job& job = rec.job;
    if (IsTerminal(job.state())) continue;
    v1::QueueSummary& q = queues[job.spec().queue()];
    q.set_queue(job.spec().queue());
    const auto& r = job.spec().resources();
    if (job.state() == v1::PENDING) {
      q.set_pending_jobs(q.pending_jobs() + 1);
      q.set_gpus_requested_pending(q.gpus_requested_pending() +
                                   r.nodes() * r.gpus_per_node());
    } else {
      q.set_running_jobs(q.running_jobs() + 1);
      int gpus = 0;
      for (const auto& a : job.allocations()) gpus += a.gpu_indices_size();
      q.set_gpus_in_use(q.gpus_in_use() + gpus);
    }
  }
  for (auto& [name, q] : queues) *resp.add_queues() = q;
  int total = 0, used = 0;
  for (const auto& [name, node] : nodes_) {
    if (node.lost) {
      resp.set_nodes_lost(resp.nodes_lost() + 1);
      continue;
    }
    if (node.drained) {
      resp.set_nodes_drained(resp.nodes_drained() + 1);
    } else {
      resp.set_nodes_ready(resp.nodes_ready() + 1);
    }
    total += node.inventory.gpus_size();
    for (const auto& h : node.holds) {
      used += static_cast<int>(h.share.gpu_indices.size());
    }
  }
  resp.set_total_gpus(total);
  resp.set_gpus_in_use(used);
  resp.set_gpus_free(total - used);
  return resp;
}

absl::Status Controller::ReadEvents(const std::string& job_id,
                                    int64_t after_seq,
                                    std::vector<v1::JobEvent>* out,
                                    bool* finished) {
  absl::MutexLock lock(&mu_);
  JobRecord* rec = FindJob(job_id);
  if (rec == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, " does not exist"));
  }
  for (const auto& e : rec->events) {
    if (e.seq() > after_seq && e.seq() <= rec->committed_event_seq) {
      out->push_back(e);
    }
  }
  int64_t last = out->empty() ? after_seq : out->back().seq();
  *finished = IsTerminal(rec->job.state()) &&
              last >= rec->committed_event_seq &&
              rec->committed_event_seq == rec->events.back().seq();
  return absl::OkStatus();
}

absl::Status Controller::JobFinished(const std::string& job_id,
                                     bool* finished) {
  absl::MutexLock lock(&mu_);
  JobRecord* rec = FindJob(job_id);
  if (rec == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("job ", job_id, " does not exist"));
  }
  *finished = IsTerminal(rec->job.state()) &&
              rec->committed_event_seq == rec->events.back().seq();
  return absl::OkStatus();
}

// --- NodeService -----------------------------------------------------------

v1::Node Controller::NodeToProto(const NodeRecord& node) const {
  v1::Node out;
  out.set_name(node.name);
  *out.mutable_inventory() = node.inventory;
  if (out.inventory().address().empty()) {
    out.mutable_inventory()->set_address(node.address);
  }
  if (node.lost) {
    out.set_state(v1::LOST);
    out.set_state_reason(node.lost_reason);
  } else if (node.drained) {
    out.set_state(v1::DRAINED);
    out.set_state_reason(node.drain_reason);
  } else {
    out.set_state(v1::READY);
    if (!node.conn) {
      out.set_state_reason(
          "agent not connected; the node is lost if it stays away past the "
          "heartbeat timeout");
    }
  }
  v1::NodeUsage* u = out.mutable_usage();
  std::set<std::string> jobs;
  for (const auto& h : node.holds) {
    for (int32_t g : h.share.gpu_indices) u->add_gpus_in_use(g);
    u->set_cpus_in_use(u->cpus_in_use() + h.share.cpus);
    u->set_memory_bytes_in_use(u->memory_bytes_in_use() +
                               h.share.memory_bytes);
    u->set_nvme_bytes_in_use(u->nvme_bytes_in_use() + h.share.nvme_bytes);
    u->set_nic_gbps_in_use(u->nic_gbps_in_use() + h.share.nic_gbps);
    jobs.insert(h.job_id);
  }
  for (const auto& j : jobs) u->add_job_ids(j);
  *out.mutable_last_heartbeat_time() = ToProtoTime(node.last_heartbeat);
  *out.mutable_register_time() = ToProtoTime(node.register_time);
  out.set_agent_version(node.agent_version);
  return out;
}

v1::ListNodesResponse Controller::ListNodes() {
  v1::ListNodesResponse resp;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, node] : nodes_) *resp.add_nodes() = NodeToProto(node);
  return resp;
}

absl::StatusOr<v1::Node> Controller::GetNode(const std::string& name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("name: required; see xlctl nodes");
  }
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    return absl::NotFoundError(
        absl::StrCat("node ", name, " is not known"));
  }
  return NodeToProto(it->second);
}

void Controller::SetDrained(
    const std::string& name, bool drained, const std::string& reason,
    std::function<void(absl::StatusOr<v1::Node>)> done) {
  if (name.empty()) {
    done(absl::InvalidArgumentError("name: required; see xlctl nodes"));
    return;
  }
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    mu_.Unlock();
    done(absl::NotFoundError(
        absl::StrCat("node ", name, " is not known")));
    mu_.Lock();
    return;
  }
  NodeRecord& node = it->second;
  node.drained = drained;
  node.drain_reason = drained ? reason : "";
  if (!drained) capacity_freed_ = true;
  pass_needed_ = true;
  wake_ = true;
  PersistNode(node, [this, name, done](absl::Status st) {
    if (!st.ok()) {
      done(st);
      return;
    }
    done(GetNode(name));
  });
}

void Controller::PersistNode(const NodeRecord& node,
                             store::Store::DoneFn done) {
  store::StoredNode stored;
  stored.name = node.name;
  stored.inventory = node.inventory;
  stored.drained = node.drained;
  stored.state_reason = node.drain_reason;
  stored.register_time = node.register_time;
  store_->Write([stored](store::Tx& tx) { return tx.PutNode(stored); },
                std::move(done));
}

// --- AgentService ----------------------------------------------------------

absl::StatusOr<std::string> Controller::AgentRegister(
    const v1::Register& reg, std::shared_ptr<AgentConnection> conn) {
  std::string name = reg.name().empty() ? reg.inventory().hostname()
                                        : reg.name();
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "register.name: empty and the inventory has no hostname; start "
        "xl-agent with --name");
  }
  std::set<int> indices;
  for (int i = 0; i < reg.inventory().gpus_size(); ++i) {
    if (!indices.insert(reg.inventory().gpus(i).index()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "register.inventory.gpus[", i, "].index: ",
          reg.inventory().gpus(i).index(),
          " appears twice; give each GPU its own index"));
    }
  }
  After after;
  {
    absl::MutexLock lock(&mu_);
    NodeRecord& node = nodes_[name];
    if (node.conn && node.conn != conn) {
      auto old = node.conn;
      after.calls.push_back(
          [old] { old->Close("replaced by a newer session of this node"); });
    }
    const bool was_lost = node.lost;
    node.name = name;
    node.inventory = reg.inventory();
    node.address = reg.inventory().address().empty() ? conn->PeerAddress()
                                                     : reg.inventory().address();
    node.conn = conn;
    node.lost = false;
    node.lost_reason.clear();
    node.last_heartbeat = clock_->Now();
    node.register_time = clock_->Now();
    node.agent_version = reg.agent_version();
    capacity_freed_ = true;
    pass_needed_ = true;
    wake_ = true;
    Log(absl::StrCat("node ", name, " registered from ", node.address, " (",
                     node.inventory.gpus_size(), " GPUs, ",
                     node.inventory.cpus(), " CPUs)",
                     was_lost ? " after being lost" : ""));
    PersistNode(node, nullptr);

    v1::SchedulerMessage ack;
    ack.mutable_register_ack()->set_node(name);
    *ack.mutable_register_ack()->mutable_heartbeat_interval() =
        ToProtoDuration(opts_.heartbeat_interval);
    ack.mutable_register_ack()->set_log_acks(true);
    conn->Send(ack);

    // Reconcile what the agent runs with what the scheduler expects there.
    std::set<std::tuple<std::string, int, int>> reported;
    for (const auto& st : reg.ranks()) {
      reported.insert({st.job_id(), st.attempt(), st.rank()});
    }
    std::vector<v1::RankStatus> missing;
    for (const auto& hold : node.holds) {
      for (int rank : hold.live_ranks) {
        if (reported.count({hold.job_id, hold.attempt, rank}) > 0) continue;
        v1::RankStatus st;
        st.set_job_id(hold.job_id);
        st.set_attempt(hold.attempt);
        st.set_rank(rank);
        st.set_state(v1::RANK_EXITED);
        st.set_exit_code(-1);
        st.set_message("not running on the node when its agent reconnected");
        missing.push_back(st);
      }
    }
    for (const auto& st : reg.ranks()) HandleRankStatus(&node, st, &after);
    for (const auto& st : missing) HandleRankStatus(&node, st, &after);
  }
  RunAfter(&after);
  return name;
}

void Controller::AgentMessage(const std::string& name,
                              const AgentConnection* conn,
                              const v1::AgentMessage& msg) {
  After after;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(name);
    if (it == nodes_.end() || it->second.conn.get() != conn) return;
    NodeRecord& node = it->second;
    node.last_heartbeat = clock_->Now();
    switch (msg.msg_case()) {
      case v1::AgentMessage::kRankStatus:
        HandleRankStatus(&node, msg.rank_status(), &after);
        break;
      case v1::AgentMessage::kMetrics:
        HandleMetrics(msg.metrics());
        break;
      case v1::AgentMessage::kLog: {
        // Each chunk is acknowledged once stored (or known not to matter);
        // the agent sends unacknowledged ones again after a reconnect.
        // seq 0: an agent that does not track acknowledgements.
        v1::SchedulerMessage ack;
        ack.mutable_log_ack()->set_seq(msg.seq());
        if (FindJob(msg.log().job_id()) == nullptr) {
          if (msg.seq() != 0) node.conn->Send(ack);
          break;
        }
        auto chunk = std::make_shared<v1::LogChunk>(msg.log());
        if (!chunk->has_time()) *chunk->mutable_time() = ToProtoTime(clock_->Now());
        std::string job_id = chunk->job_id();
        std::weak_ptr<AgentConnection> weak = node.conn;
        store_->Write([chunk](store::Tx& tx) { return tx.AppendLog(chunk.get()); },
                      [this, job_id, weak, ack, chunk](absl::Status st) {
                        auto conn = weak.lock();
                        if (!st.ok()) {
                          // Unstored: end the stream, so that the agent
                          // sends it again on its next connection.
                          if (conn) {
                            conn->Close(absl::StrCat("storing output failed: ",
                                                     st.ToString()));
                          }
                          return;
                        }
                        if (conn && ack.log_ack().seq() != 0) conn->Send(ack);
                        if (chunk->seq() != 0) NotifyListeners(job_id);
                      });
        break;
      }
      default:
        break;
    }
  }
  RunAfter(&after);
}

void Controller::AgentDisconnected(const std::string& node,
                                   std::shared_ptr<AgentConnection> conn) {
  absl::MutexLock lock(&disconnect_mu_);
  disconnects_.emplace_back(node, std::move(conn));
}

}  // namespace xl::service

namespace xl::service {

void Controller::HandleMetrics(const v1::TrainMetrics& m) {
  JobRecord* rec = FindJob(m.job_id());
  if (rec == nullptr || rec->job.attempt() != m.attempt() ||
      !IsActive(rec->job.state()) || m.rank() != 0) {
    return;
  }
  *rec->job.mutable_metrics() = m;
  absl::Time now = clock_->Now();
  // About one stored point a second, and always the last step.
  if (now - rec->metrics_stored < absl::Seconds(1) &&
      m.step() != m.total_steps()) {
    return;
  }
  rec->metrics_stored = now;
  store_->Write([m](store::Tx& tx) { return tx.AppendMetrics(m); }, nullptr);
}

absl::StatusOr<v1::GetJobMetricsResponse> Controller::GetJobMetrics(
    const std::string& job_id) {
  {
    absl::MutexLock lock(&mu_);
    if (FindJob(job_id) == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("job ", job_id, " does not exist"));
    }
  }
  ASSIGN_OR_RETURN(auto points, store_->ReadMetrics(ParseJobId(job_id)));
  v1::GetJobMetricsResponse resp;
  for (auto& p : points) *resp.add_points() = std::move(p);
  return resp;
}

absl::StatusOr<Controller::JobRecord*> Controller::RendezvousScopeJob(
    const v1::RendezvousScope& scope) {
  JobRecord* rec = FindJob(scope.job_id());
  if (rec == nullptr || rec->job.attempt() != scope.attempt() ||
      !IsActive(rec->job.state()) || rec->stopping || rec->token.empty() ||
      rec->token != scope.token()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "scope: job ", scope.job_id(), " attempt ", scope.attempt(),
        " is not running or the token is wrong; only the ranks of a running "
        "attempt may rendezvous (they get XL_RENDEZVOUS_TOKEN)"));
  }
  return rec;
}

absl::Status Controller::RendezvousPut(const v1::RendezvousPutRequest& req) {
  if (req.key().empty()) {
    return absl::InvalidArgumentError("key: required");
  }
  if (req.value().size() > (1 << 20)) {
    return absl::InvalidArgumentError("value: larger than 1 MiB");
  }
  After after;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(JobRecord * rec, RendezvousScopeJob(req.scope()));
    if (rec->rendezvous.size() >= 100000) {
      return absl::ResourceExhaustedError(
          "scope: more than 100000 rendezvous keys in one attempt");
    }
    rec->rendezvous[req.key()] = req.value();
    ServeWaiters(&after);
  }
  RunAfter(&after);
  return absl::OkStatus();
}

void Controller::RendezvousGet(
    const v1::RendezvousGetRequest& req,
    std::function<void(absl::StatusOr<std::vector<std::string>>)> done) {
  if (req.keys_size() == 0) {
    done(absl::InvalidArgumentError("keys: give at least one key"));
    return;
  }
  After after;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    auto rec = RendezvousScopeJob(req.scope());
    if (!rec.ok()) {
      error = rec.status();
    } else {
      RendezvousWaiter w;
      w.job = (*rec)->seq;
      w.attempt = (*rec)->job.attempt();
      w.keys.assign(req.keys().begin(), req.keys().end());
      absl::Duration timeout =
          req.has_timeout() ? FromProto(req.timeout()) : absl::Minutes(5);
      w.deadline = clock_->Now() + timeout;
      w.done = std::move(done);
      waiters_.push_back(std::move(w));
      ServeWaiters(&after);
    }
  }
  RunAfter(&after);
  if (!error.ok()) done(error);
}

void Controller::ServeWaiters(After* after) {
  const absl::Time now = clock_->Now();
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    auto job = jobs_.find(it->job);
    bool live = job != jobs_.end() && job->second.job.attempt() == it->attempt &&
                IsActive(job->second.job.state()) && !job->second.stopping;
    if (!live) {
      after->calls.push_back([done = std::move(it->done)] {
        done(absl::AbortedError(
            "the job attempt ended while waiting for the rendezvous"));
      });
      it = waiters_.erase(it);
      continue;
    }
    const auto& kv = job->second.rendezvous;
    std::vector<std::string> values, missing;
    for (const auto& k : it->keys) {
      auto v = kv.find(k);
      if (v == kv.end()) {
        missing.push_back(k);
      } else {
        values.push_back(v->second);
      }
    }
    if (missing.empty()) {
      after->calls.push_back(
          [done = std::move(it->done), values = std::move(values)] {
            done(values);
          });
      it = waiters_.erase(it);
    } else if (now >= it->deadline) {
      after->calls.push_back(
          [done = std::move(it->done), missing = std::move(missing)] {
            done(absl::DeadlineExceededError(absl::StrCat(
                "rendezvous keys not set in time: ", absl::StrJoin(missing, ", "),
                "; a rank of this attempt did not start or died")));
          });
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace xl::service

namespace xl::service {
namespace {

std::vector<planner::FleetGpu> FleetOf(
    const std::vector<v1::NodeInventory>& inventories) {
  std::vector<planner::FleetGpu> fleet;
  for (const auto& inv : inventories) {
    std::map<std::string, planner::FleetGpu> by_model;
    for (const auto& g : inv.gpus()) {
      planner::FleetGpu& f = by_model[g.model()];
      f.model = g.model();
      f.memory_bytes = std::max<uint64_t>(f.memory_bytes, g.memory_bytes());
      ++f.count;
    }
    for (auto& [model, f] : by_model) {
      f.gpus_per_node = f.count;
      fleet.push_back(f);
    }
  }
  return fleet;
}

}  // namespace

absl::StatusOr<v1::Plan> Controller::PlanResources(const v1::ModelSpec& model) {
  RETURN_IF_ERROR(planner::ValidateModelSpec(model));
  std::vector<v1::NodeInventory> inventories;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, node] : nodes_) {
      if (!node.lost) inventories.push_back(node.inventory);
    }
  }
  return planner::MakePlan(model, FleetOf(inventories));
}

absl::Status Controller::SizeFromModel(v1::JobSpec* spec, v1::Plan* plan) {
  v1::ModelSpec model;
  bool derive_all = false;
  if (spec->has_model()) {
    model = spec->model();
    derive_all = true;
  } else if (spec->has_train()) {
    // xl-train's MLP, with xl-train's defaults (agent/worker/train_config.h).
    const v1::TrainSpec& t = spec->train();
    v1::MlpShape* mlp = model.mutable_mlp();
    mlp->set_input_dim(t.input_dim() > 0 ? t.input_dim() : 256);
    mlp->set_hidden_dim(t.hidden_dim() > 0 ? t.hidden_dim() : 1024);
    mlp->set_hidden_layers(t.hidden_layers() > 0 ? t.hidden_layers() : 2);
    mlp->set_classes(t.classes() > 0 ? t.classes() : 16);
    model.set_micro_batch_size(t.batch_per_rank() > 0 ? t.batch_per_rank() : 64);
    const bool cpu = t.device() == "cpu" ||
                     (t.device().empty() && spec->resources().gpus_per_node() == 0);
    if (cpu) {
      model.set_gpu_model(planner::kCpuDevice);
      model.set_precision(v1::FP32);
    } else {
      model.set_precision(t.precision());
    }
    if (planner::ValidateModelSpec(model).ok() == false) return absl::OkStatus();
    *spec->mutable_model() = model;
  } else {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*plan, PlanResources(model));
  auto* r = spec->mutable_resources();
  const uint64_t per_rank = plan->memory_per_gpu().total_bytes();
  if (model.gpu_model() == planner::kCpuDevice) {
    if (r->memory_bytes_per_node() == 0) {
      const int ranks = r->ranks_per_node() > 0 ? r->ranks_per_node() : 1;
      r->set_memory_bytes_per_node(per_rank * static_cast<uint64_t>(ranks));
    }
    return absl::OkStatus();
  }
  bool fits_fleet = false, any_fleet = false;
  for (const auto& g : plan->gpus_that_fit()) {
    if (g.in_fleet() > 0) any_fleet = true;
    if (g.in_fleet() > 0 && g.fits()) fits_fleet = true;
  }
  if (any_fleet && !fits_fleet) {
    std::string why = absl::StrCat(
        "model: needs ", HumanBytes(per_rank), " per GPU (",
        plan->model().micro_batch_size(), " per micro-batch), and no GPU of the "
        "fleet has that much");
    for (const auto& w : plan->warnings()) absl::StrAppend(&why, "; ", w);
    absl::StrAppend(&why, "; shard with model.sharding (ZERO_3), use tensor or "
                          "pipeline parallelism, or lower micro_batch_size "
                          "(xlctl plan shows the arithmetic)");
    return absl::InvalidArgumentError(why);
  }
  if (r->min_gpu_memory_bytes() == 0) r->set_min_gpu_memory_bytes(per_rank);
  if (derive_all) {
    if (r->gpus_per_node() == 0) {
      r->set_gpus_per_node(std::max(1, std::min(plan->gpus(),
                                                plan->model().gpus_per_node())));
    }
    if (r->nodes() == 0) r->set_nodes(std::max(1, plan->nodes()));
    if (r->nvme_bytes_per_node() == 0) {
      r->set_nvme_bytes_per_node(plan->nvme_bytes_per_node());
    }
  }
  return absl::OkStatus();
}

}  // namespace xl::service
