// Fuzzes the scheduler's RPC handlers in process: the Controller (what the
// gRPC services of server/service call) over a real SqliteStore in a temp
// file, with a fake clock and fake agent connections, as
// tests/server/controller_fixture.h sets it up.
//
// The input is a sequence of operations, each [op][length lo][length hi]
// [payload]. The op's low 5 bits pick the call; bit 7 says the payload is
// protobuf text format (readable seeds), else the binary wire format (what
// gRPC delivers); bit 6 picks the caller (alice or bob) or the node (first
// or last registered). Calls: SubmitJob, GetJob, ListJobs, CancelJob,
// GetQueue, WatchJob (ReadEvents), GetJobMetrics, ListNodes, GetNode,
// DrainNode, ResumeNode, the agent stream's Register and messages
// (Heartbeat, RankStatus, LogChunk, TrainMetrics), its end, Rendezvous
// Put/Get, PlanResources, StreamLogs (the store's ReadLogs), ExplainJob,
// a tick of the
// loop with the clock moved on, and "echo": each fake agent reports the
// ranks it was last asked to start as running or exited, so fuzzed jobs
// reach every state. A rendezvous scope left empty is filled with the last
// started attempt's job, attempt and token.
//
// Properties: no crash, no hang (every answer comes within 10 s); no
// INTERNAL or UNKNOWN answer; an invalid spec is INVALID_ARGUMENT; a created
// job can be read back; no fuzzed input puts the store in degraded mode
// (every write the controller makes from it commits).
#include <google/protobuf/text_format.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/control/controller.h"
#include "server/scheduler/job_spec.h"
#include "server/store/sqlite_store.h"
#include "tests/fuzz/fuzz_util.h"

namespace xl::control {
namespace {

// An agent's stream as the controller sees it; keeps the last StartRanks.
class FakeConnection : public AgentConnection {
 public:
  bool Send(const v1::SchedulerMessage& msg) override {
    absl::MutexLock lock(&mu_);
    if (msg.has_start_ranks()) last_start_ = msg.start_ranks();
    ++sent_;
    return true;
  }
  void Close(const std::string&) override {}
  std::string PeerAddress() const override { return "10.0.0.1"; }
  v1::StartRanks last_start() {
    absl::MutexLock lock(&mu_);
    return last_start_;
  }

 private:
  absl::Mutex mu_;
  v1::StartRanks last_start_ ABSL_GUARDED_BY(mu_);
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
};

// Waits for a callback-style answer, at most 10 s (a hang is a bug).
template <typename T>
class Answer {
 public:
  std::function<void(T)> Callback() {
    return [this](T v) {
      absl::MutexLock lock(&mu_);
      value_ = std::move(v);
      done_ = true;
    };
  }
  T Wait(const char* what) {
    absl::MutexLock lock(&mu_);
    const bool got = mu_.AwaitWithTimeout(absl::Condition(&done_),
                                          absl::Seconds(10));
    XL_FUZZ_CHECK(got, absl::StrCat(what, " never answered"));
    return std::move(value_);
  }

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  T value_ ABSL_GUARDED_BY(mu_);
};

// XL_FUZZ_VERBOSE=1 prints what reading calls answer (to check seeds).
bool Verbose() {
  static const bool verbose = getenv("XL_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

void CheckCode(const absl::Status& st, const char* what) {
  XL_FUZZ_CHECK(st.code() != absl::StatusCode::kInternal &&
                    st.code() != absl::StatusCode::kUnknown,
                absl::StrCat(what, ": ", st.ToString()));
}

class World {
 public:
  World() {
    static int n = 0;
    dir_ = absl::StrCat(fuzz::TempDir(), "/ctl-", n++);
    std::filesystem::create_directories(dir_);
    store::StoreOptions options;
    options.synchronous = "OFF";  // a fuzzing speed; the writes are the same
    auto opened = store::SqliteStore::Open(dir_ + "/x.db", options);
    XL_FUZZ_CHECK(opened.ok(), opened.status().ToString());
    store_ = std::move(*opened);
    ControllerOptions opts;
    opts.advertise_address = "127.0.0.1:7070";
    opts.self_pause = absl::InfiniteDuration();
    opts.max_output_bytes_per_job = 1 << 16;
    controller_ = std::make_unique<Controller>(store_.get(), &clock_, opts);
    XL_FUZZ_CHECK(controller_->Recover().ok(), "recover");
    AddNode("n1", 8);
    AddNode("n2", 0);
  }
  ~World() {
    controller_->Stop();
    store_.reset();
    controller_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void AddNode(const std::string& name, int gpus) {
    v1::Register reg;
    reg.set_name(name);
    reg.set_instance_id(name);
    reg.set_shared_env(true);
    auto* inv = reg.mutable_inventory();
    inv->set_hostname(name);
    inv->set_cpus(16);
    inv->set_memory_bytes(64ull << 30);
    for (int i = 0; i < gpus; ++i) {
      auto* g = inv->add_gpus();
      g->set_index(i);
      g->set_model("NVIDIA H100 80GB HBM3");
      g->set_memory_bytes(80ull << 30);
    }
    Register(reg);
  }

  void Register(const v1::Register& reg) {
    auto conn = std::make_shared<FakeConnection>();
    auto name = controller_->AgentRegister(reg, conn);
    if (!name.ok()) {
      CheckCode(name.status(), "Register");
      return;
    }
    conns_[*name] = conn;
    if (std::find(names_.begin(), names_.end(), *name) == names_.end()) {
      names_.push_back(*name);
    }
  }

  // Every write queued so far has committed and its callbacks have run.
  void Settle() {
    (void)store_->WriteSync([](store::Tx&) { return absl::OkStatus(); });
  }

  const std::string& Node(bool last) {
    return last ? names_.back() : names_.front();
  }

  void Run(uint8_t op, const std::string& payload);
  void Echo(const std::string& payload);
  void FillScope(v1::RendezvousScope* scope);

  Controller* controller() { return controller_.get(); }

 private:
  FakeClock clock_;
  std::string dir_;
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<Controller> controller_;
  std::map<std::string, std::shared_ptr<FakeConnection>> conns_;
  std::vector<std::string> names_;
};

template <typename M>
bool Parse(uint8_t op, const std::string& payload, M* msg) {
  if (op & 0x80) {
    google::protobuf::TextFormat::Parser parser;
    parser.AllowPartialMessage(true);
    return parser.ParseFromString(payload, msg);
  }
  return msg->ParseFromString(payload);
}

void World::FillScope(v1::RendezvousScope* scope) {
  if (!scope->job_id().empty() || !scope->token().empty()) return;
  for (auto& [name, conn] : conns_) {
    v1::StartRanks start = conn->last_start();
    if (start.job_id().empty()) continue;
    scope->set_job_id(start.job_id());
    scope->set_attempt(start.attempt());
    auto it = start.env().find("XL_RENDEZVOUS_TOKEN");
    if (it != start.env().end()) scope->set_token(it->second);
    for (const auto& r : start.ranks()) {
      auto t = r.env().find("XL_RENDEZVOUS_TOKEN");
      if (t != r.env().end()) scope->set_token(t->second);
    }
  }
}

// Each node reports the ranks it was last told to start: running when the
// payload's first byte is even, else exited with that byte as exit code.
void World::Echo(const std::string& payload) {
  const uint8_t b = payload.empty() ? 0 : static_cast<uint8_t>(payload[0]);
  for (auto& [name, conn] : conns_) {
    v1::StartRanks start = conn->last_start();
    if (start.job_id().empty()) continue;
    for (const auto& r : start.ranks()) {
      v1::AgentMessage msg;
      auto* st = msg.mutable_rank_status();
      st->set_job_id(start.job_id());
      st->set_attempt(start.attempt());
      st->set_rank(r.rank());
      st->set_state(b % 2 == 0 ? v1::RANK_RUNNING : v1::RANK_EXITED);
      st->set_exit_code(b % 2 == 0 ? 0 : b / 2);
      controller_->AgentMessage(name, conn.get(), msg);
    }
  }
}

void World::Run(uint8_t op, const std::string& payload) {
  const bool second = op & 0x40;
  const std::string user = second ? "bob" : "alice";
  switch (op & 0x1f) {
    case 0: {
      v1::SubmitJobRequest req;
      if (!Parse(op, payload, &req)) return;
      v1::JobSpec validated = req.spec();
      const bool valid = scheduler::ValidateJobSpec(&validated).ok();
      Answer<absl::StatusOr<v1::SubmitJobResponse>> answer;
      // alice submits as an admin, bob as a user (queue rules apply).
      controller_->Submit(scheduler::Submitter{user, {}, !second}, req,
                          answer.Callback());
      auto resp = answer.Wait("SubmitJob");
      if (!resp.ok()) {
        CheckCode(resp.status(), "SubmitJob");
        if (!valid && !req.spec().has_model() && !req.spec().has_train()) {
          XL_FUZZ_CHECK(
              resp.status().code() == absl::StatusCode::kInvalidArgument,
              resp.status().ToString());
        }
        return;
      }
      auto job = controller_->GetJob(resp->job_id());
      XL_FUZZ_CHECK(job.ok(), job.status().ToString());
      return;
    }
    case 1: {
      v1::GetJobRequest req;
      if (!Parse(op, payload, &req)) return;
      auto job = controller_->GetJob(req.job_id());
      CheckCode(job.status(), "GetJob");
      if (Verbose()) {
        fprintf(stderr, "fuzz: job %s: %s\n", req.job_id().c_str(),
                job.ok() ? job->ShortDebugString().c_str()
                         : job.status().ToString().c_str());
      }
      return;
    }
    case 2: {
      v1::ListJobsRequest req;
      if (!Parse(op, payload, &req)) return;
      auto resp = controller_->ListJobs(req);
      CheckCode(resp.status(), "ListJobs");
      if (resp.ok()) {
        XL_FUZZ_CHECK(resp->jobs_size() <= 1000, "a page over 1000 jobs");
      }
      return;
    }
    case 3: {
      v1::CancelJobRequest req;
      if (!Parse(op, payload, &req)) return;
      Answer<absl::StatusOr<v1::Job>> answer;
      controller_->Cancel(user, req, answer.Callback());
      CheckCode(answer.Wait("CancelJob").status(), "CancelJob");
      return;
    }
    case 4:
      (void)controller_->GetQueue();
      return;
    case 5: {
      v1::WatchJobRequest req;
      if (!Parse(op, payload, &req)) return;
      std::vector<v1::JobEvent> events;
      bool finished = false;
      CheckCode(controller_->ReadEvents(req.job_id(), req.after_seq(), &events,
                                        &finished),
                "WatchJob");
      return;
    }
    case 6: {
      v1::GetJobMetricsRequest req;
      if (!Parse(op, payload, &req)) return;
      CheckCode(controller_->GetJobMetrics(req).status(), "GetJobMetrics");
      return;
    }
    case 7: {
      v1::ListNodesRequest req;
      if (!Parse(op, payload, &req)) return;
      CheckCode(controller_->ListNodes(req).status(), "ListNodes");
      return;
    }
    case 8: {
      v1::GetNodeRequest req;
      if (!Parse(op, payload, &req)) return;
      CheckCode(controller_->GetNode(req.name()).status(), "GetNode");
      return;
    }
    case 9:
    case 10: {
      const bool drain = (op & 0x1f) == 9;
      v1::DrainNodeRequest req;
      if (!Parse(op, payload, &req)) return;
      Answer<absl::StatusOr<v1::Node>> answer;
      controller_->SetDrained(req.name(), drain, req.reason(),
                              answer.Callback());
      CheckCode(answer.Wait("DrainNode").status(), "DrainNode");
      return;
    }
    case 11: {
      v1::Register reg;
      if (!Parse(op, payload, &reg)) return;
      Register(reg);
      return;
    }
    case 12: {
      v1::AgentMessage msg;
      if (!Parse(op, payload, &msg)) return;
      const std::string& node = Node(second);
      controller_->AgentMessage(node, conns_[node].get(), msg);
      return;
    }
    case 13: {
      const std::string& node = Node(second);
      controller_->AgentDisconnected(node, conns_[node]);
      return;
    }
    case 14: {
      v1::RendezvousPutRequest req;
      if (!Parse(op, payload, &req)) return;
      FillScope(req.mutable_scope());
      CheckCode(controller_->rendezvous()->Put(req), "RendezvousPut");
      return;
    }
    case 15: {
      v1::RendezvousGetRequest req;
      if (!Parse(op, payload, &req)) return;
      FillScope(req.mutable_scope());
      // Answered now, at a tick past its deadline, or when the attempt ends.
      controller_->rendezvous()->Get(
          req, [](absl::StatusOr<std::vector<std::string>> r) {
            CheckCode(r.status(), "RendezvousGet");
          });
      return;
    }
    case 16: {
      // Time passes (0 to 65 s, from the first two bytes), then a tick.
      uint32_t ms = 0;
      if (payload.size() >= 2) {
        ms = static_cast<uint8_t>(payload[0]) |
             (static_cast<uint8_t>(payload[1]) << 8);
      }
      clock_.Advance(absl::Milliseconds(ms));
      controller_->Tick();
      return;
    }
    case 17: {
      v1::PlanResourcesRequest req;
      if (!Parse(op, payload, &req)) return;
      CheckCode(controller_->PlanResources(req.model()).status(),
                "PlanResources");
      return;
    }
    case 18:
      Echo(payload);
      return;
    case 19: {
      v1::StreamLogsRequest req;
      if (!Parse(op, payload, &req)) return;
      int64_t id = state::JobTable::ParseId(req.job_id());
      auto logs = store_->ReadLogs(id, req.after_seq(),
                                   req.all_ranks() ? -1 : req.rank(), 256);
      CheckCode(logs.status(), "StreamLogs");
      return;
    }
    case 20: {
      v1::ExplainJobRequest req;
      if (!Parse(op, payload, &req)) return;
      auto explained = controller_->ExplainJob(req.job_id());
      CheckCode(explained.status(), "ExplainJob");
      if (explained.ok()) {
        XL_FUZZ_CHECK(explained->position() <= explained->pending(),
                      explained->DebugString());
      }
      return;
    }
    default:
      return;
  }
}

World* GetWorld(bool fresh) {
  static World* world = nullptr;
  if (fresh || world == nullptr) {
    delete world;
    world = new World();
  }
  return world;
}

}  // namespace
}  // namespace xl::control

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using xl::control::GetWorld;
  // A fresh scheduler every 256 inputs keeps the model and database small
  // (later inputs see what earlier ones left, as a live scheduler would).
  static int64_t runs = 0;
  xl::control::World* world = GetWorld(runs++ % 256 == 0);
  size_t at = 0;
  int ops = 0;
  while (at + 3 <= size && ops++ < 64) {
    const uint8_t op = data[at];
    const size_t len = std::min<size_t>(
        data[at + 1] | (static_cast<size_t>(data[at + 2]) << 8),
        size - at - 3);
    const std::string payload(reinterpret_cast<const char*>(data + at + 3),
                              len);
    at += 3 + len;
    world->Run(op, payload);
  }
  world->Settle();
  absl::Status writable = world->controller()->Writable();
  XL_FUZZ_CHECK(writable.ok(), writable.ToString());
  return 0;
}
