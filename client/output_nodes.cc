// The renderers of nodes: `xlctl nodes` and `xlctl node`.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/output.h"
#include "client/output_text.h"
#include "common/duration.h"

namespace xl::client {
namespace {

using google::protobuf::RepeatedPtrField;

// JOBS is the last column of `xlctl nodes`; longer lists end in "...".
constexpr size_t kListJobsWidth = 32;

std::string Labels(
    const google::protobuf::Map<std::string, std::string>& labels) {
  std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  return OrDash(absl::StrJoin(sorted, ",", absl::PairFormatter("=")));
}

std::string GpuModels(const xl::v1::NodeInventory& inv) {
  std::vector<std::string> models;
  for (const xl::v1::Gpu& gpu : inv.gpus()) {
    if (std::find(models.begin(), models.end(), gpu.model()) == models.end()) {
      models.push_back(gpu.model());
    }
  }
  return OrDash(absl::StrJoin(models, ","));
}

uint64_t NvmeFree(const xl::v1::NodeInventory& inv) {
  uint64_t free = 0;
  for (const xl::v1::Nvme& nvme : inv.nvme()) free += nvme.free_bytes();
  return free;
}

std::string FastestNic(const xl::v1::NodeInventory& inv) {
  double best = 0;
  for (const xl::v1::Nic& nic : inv.nics()) best = std::max(best, nic.gbps());
  return inv.nics().empty() ? "-" : Gbps(best);
}

}  // namespace

std::string NodeTable(const RepeatedPtrField<xl::v1::Node>& nodes) {
  TextTable table({"NAME", "STATE", "GPUS", "GPU MODEL", "CPUS", "MEMORY",
                   "NVME FREE", "NIC GBIT/S", "LABELS", "JOBS"});
  for (const xl::v1::Node& node : nodes) {
    const xl::v1::NodeInventory& inv = node.inventory();
    const xl::v1::NodeUsage& use = node.usage();
    table.AddRow(
        {node.name(), NodeStateName(node.state()),
         absl::StrCat(use.gpus_in_use_size(), "/", inv.gpus_size()),
         GpuModels(inv), absl::StrCat(use.cpus_in_use(), "/", inv.cpus()),
         absl::StrCat(xl::HumanBytes(use.memory_bytes_in_use()), "/",
                      xl::HumanBytes(inv.memory_bytes())),
         inv.nvme().empty() ? "-" : xl::HumanBytes(NvmeFree(inv)),
         FastestNic(inv), Labels(inv.labels()),
         Truncate(OrDash(absl::StrJoin(use.job_ids(), ",")), kListJobsWidth)});
  }
  return table.Render();
}

std::string NodeDetails(const xl::v1::Node& node,
                        const RenderContext& context) {
  const xl::v1::NodeInventory& inv = node.inventory();
  const xl::v1::NodeUsage& use = node.usage();
  KeyValueBlock block;
  block.Add("Name", node.name());
  block.Add("State", NodeStateName(node.state()));
  block.Add("State reason", node.state_reason());
  block.Add("Hostname", inv.hostname());
  block.Add("Address", inv.address());
  block.Add("Labels", Labels(inv.labels()));
  block.Add("Agent version", node.agent_version());
  block.Add("Registered", TimeWithAge(node.register_time(), context));
  block.Add("Last heartbeat", TimeWithAge(node.last_heartbeat_time(), context));
  std::string gpus =
      absl::StrCat(use.gpus_in_use_size(), " of ", inv.gpus_size());
  if (!use.gpus_in_use().empty()) {
    absl::StrAppend(&gpus, " (", JoinInts(use.gpus_in_use()), ")");
  }
  block.Add("GPUs in use", gpus);
  block.Add("CPUs in use", absl::StrCat(use.cpus_in_use(), " of ", inv.cpus()));
  block.Add("Memory in use",
            absl::StrCat(xl::HumanBytes(use.memory_bytes_in_use()), " of ",
                         xl::HumanBytes(inv.memory_bytes())));
  block.Add("NVMe reserved", xl::HumanBytes(use.nvme_bytes_in_use()));
  block.Add("NIC reserved", Gbps(use.nic_gbps_in_use()) + " Gbit/s");
  block.Add("Jobs", absl::StrJoin(use.job_ids(), ", "));
  std::string out = block.Render();
  if (!inv.gpus().empty()) {
    absl::StrAppend(&out, "GPUs:\n");
    TextTable table({"  INDEX", "MODEL", "MEMORY", "CC", "IN USE", "UUID"});
    for (const xl::v1::Gpu& gpu : inv.gpus()) {
      bool in_use =
          std::find(use.gpus_in_use().begin(), use.gpus_in_use().end(),
                    gpu.index()) != use.gpus_in_use().end();
      table.AddRow({absl::StrCat("  ", gpu.index()), OrDash(gpu.model()),
                    xl::HumanBytes(gpu.memory_bytes()),
                    OrDash(gpu.compute_capability()), in_use ? "yes" : "no",
                    OrDash(gpu.uuid())});
    }
    absl::StrAppend(&out, table.Render());
  }
  if (!inv.nvme().empty()) {
    absl::StrAppend(&out, "NVMe:\n");
    TextTable table({"  DEVICE", "PATH", "CAPACITY", "FREE"});
    for (const xl::v1::Nvme& nvme : inv.nvme()) {
      table.AddRow({absl::StrCat("  ", OrDash(nvme.device())),
                    OrDash(nvme.path()), xl::HumanBytes(nvme.capacity_bytes()),
                    xl::HumanBytes(nvme.free_bytes())});
    }
    absl::StrAppend(&out, table.Render());
  }
  if (!inv.nics().empty()) {
    absl::StrAppend(&out, "NICs:\n");
    TextTable table({"  NAME", "KIND", "GBIT/S"});
    for (const xl::v1::Nic& nic : inv.nics()) {
      std::string kind = nic.kind() == xl::v1::NIC_KIND_UNSPECIFIED
                             ? "-"
                             : xl::v1::NicKind_Name(nic.kind());
      table.AddRow({absl::StrCat("  ", nic.name()), kind, Gbps(nic.gbps())});
    }
    absl::StrAppend(&out, table.Render());
  }
  return out;
}

}  // namespace xl::client
