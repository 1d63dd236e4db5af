#include "server/control/launch.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/scheduler/job_spec.h"

namespace xl::control {
namespace {

// Which network NCCL should use on a node, from its inventory: the
// variable to set and its value; no variable when the node reports no NIC.
struct NcclNetworkHint {
  std::string variable;
  std::string value;
};

// An 8-rail node has 8 HCAs of one speed (and often a slower one for
// storage or management): NCCL gets every HCA of the fastest speed, in the
// inventory's order, so each GPU can use the rail next to it; the slower
// ones are left out. A tie between an HCA and an Ethernet port (RoCE
// shows the card as both) goes to the HCA: verbs are NCCL's fast path.
// Otherwise one Ethernet interface, the first of the fastest: equal speed
// does not make Ethernet ports a data fabric (bond members, bridges, a
// storage network other nodes cannot reach), and NCCL's socket transport
// would open connections on every interface listed.
NcclNetworkHint NcclNetworkHintFor(const v1::NodeInventory& inv) {
  const v1::Nic* fastest = nullptr;
  for (const auto& nic : inv.nics()) {
    if (fastest == nullptr || nic.gbps() > fastest->gbps()) fastest = &nic;
  }
  if (fastest == nullptr) return {};
  std::vector<std::string> hcas;
  for (const auto& nic : inv.nics()) {
    if (nic.kind() == v1::INFINIBAND && nic.gbps() == fastest->gbps()) {
      hcas.push_back(nic.name());
    }
  }
  // A bare name, as before: scripts pass it on as an interface name
  // (GLOO_SOCKET_IFNAME), which a leading '=' would break; the price is
  // that NCCL also takes interfaces it prefixes (eth0.100 for eth0).
  if (hcas.empty()) return {"NCCL_SOCKET_IFNAME", fastest->name()};
  // NCCL matches each name as a prefix ("mlx5_1" would also take mlx5_10
  // to mlx5_19, slower cards included); a leading '=' makes every name in
  // the list an exact match.
  return {"NCCL_IB_HCA", absl::StrCat("=", absl::StrJoin(hcas, ","))};
}

}  // namespace

v1::SchedulerMessage BuildStartRanks(const v1::Job& job,
                                     const v1::Allocation& a,
                                     const v1::NodeInventory& inventory,
                                     const LaunchContext& context) {
  const auto& res = job.spec().resources();
  const int rpn = res.ranks_per_node();
  v1::SchedulerMessage msg;
  v1::StartRanks* start = msg.mutable_start_ranks();
  start->set_job_id(job.id());
  start->set_attempt(job.attempt());
  start->mutable_argv()->CopyFrom(job.spec().command());
  start->set_working_dir(job.spec().working_dir());
  *start->mutable_grace_period() = job.spec().grace_period();
  // The agent runs the ranks as the submitter and confines them to what
  // the job asked for on each node.
  start->set_user(job.user());
  v1::ResourceLimits* limits = start->mutable_limits();
  // A figure the planner derived counts tensors only: the process itself
  // needs more, so it is no limit.
  if (!job.memory_derived()) {
    limits->set_memory_bytes(res.memory_bytes_per_node());
  }
  limits->set_cpus(res.cpus_per_node());
  limits->set_max_processes(context.max_processes);
  limits->mutable_gpu_indices()->CopyFrom(a.gpu_indices());

  // What every rank of this node shares. The job's own variables come first
  // so that the scheduler's win (validation refuses them anyway).
  google::protobuf::Map<std::string, std::string> shared;
  if (NcclNetworkHint hint = NcclNetworkHintFor(inventory);
      !hint.variable.empty()) {
    shared[hint.variable] = hint.value;
  }
  for (const auto& [k, v] : job.spec().env()) shared[k] = v;
  shared["WORLD_SIZE"] = absl::StrCat(job.world_size());
  shared["ROLE_WORLD_SIZE"] = absl::StrCat(job.world_size());
  shared["LOCAL_WORLD_SIZE"] = absl::StrCat(rpn);
  shared["GROUP_RANK"] = absl::StrCat(a.group_rank());
  shared["GROUP_WORLD_SIZE"] = absl::StrCat(job.allocations_size());
  shared["MASTER_ADDR"] = job.master_addr();
  shared["MASTER_PORT"] = absl::StrCat(job.master_port());
  shared["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(a.gpu_indices(), ",");
  shared["TORCHELASTIC_RUN_ID"] = job.id();
  shared["TORCHELASTIC_RESTART_COUNT"] = absl::StrCat(job.attempt() - 1);
  shared["TORCHELASTIC_MAX_RESTARTS"] =
      absl::StrCat(job.spec().max_retries());
  shared["XL_JOB_ID"] = job.id();
  shared["XL_ATTEMPT"] = absl::StrCat(job.attempt());
  shared["XL_NODE"] = a.node();
  shared["XL_NODE_ADDRESS"] = a.address();
  // xl-train's batch_per_rank: auto on CPU sizes the batch from it: the
  // memory asked for, not a figure derived from the default batch.
  if (res.memory_bytes_per_node() > 0 && !job.memory_derived()) {
    shared["XL_MEMORY_BYTES_PER_NODE"] =
        absl::StrCat(res.memory_bytes_per_node());
  }
  shared["XL_SCHEDULER"] = context.scheduler_address;
  shared["XL_RENDEZVOUS_TOKEN"] = context.token;
  if (!job.spec().checkpoint_dir().empty()) {
    // Each rank creates it as the job's user (an agent that predates the
    // field still exports it).
    const std::string dir = scheduler::ExpandCheckpointDir(
        job.spec().checkpoint_dir(), job.id(), job.attempt(), job.user());
    start->set_checkpoint_dir(dir);
    shared["XL_CHECKPOINT_DIR"] = dir;
  }
  if (context.shared_env) *start->mutable_env() = shared;

  for (int l = 0; l < a.ranks_size(); ++l) {
    v1::RankLaunch* launch = start->add_ranks();
    launch->set_rank(a.ranks(l));
    launch->set_local_rank(l);
    auto& env = *launch->mutable_env();
    if (!context.shared_env) env = shared;
    env["RANK"] = absl::StrCat(a.ranks(l));
    env["ROLE_RANK"] = absl::StrCat(a.ranks(l));
    env["LOCAL_RANK"] = absl::StrCat(l);
  }
  return msg;
}

}  // namespace xl::control
