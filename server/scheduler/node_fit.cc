#include "server/scheduler/node_fit.h"

#include "common/duration.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace xl::scheduler {
Needs::Needs(const v1::ResourceRequest& r)
    : req(&r),
      nodes(r.nodes()),
      gpus(r.gpus_per_node()),
      cpus(r.cpus_per_node()),
      memory(r.memory_bytes_per_node()),
      nvme(r.nvme_bytes_per_node()),
      nic_gbps(r.nic_gbps_per_node()) {}

uint64_t MatchingGpus(const NodeInfo& info, const v1::ResourceRequest& req) {
  const size_t n = std::min<size_t>(info.gpus.size(), 64);
  uint64_t mask = 0;
  for (size_t i = 0; i < n; ++i) {
    const NodeInfo::Gpu& gpu = info.gpus[i];
    if (gpu.memory_bytes < req.min_gpu_memory_bytes()) continue;
    bool model_ok = req.gpu_models_size() == 0;
    for (const auto& m : req.gpu_models()) {
      if (m == gpu.model) {
        model_ok = true;
        break;
      }
    }
    if (model_ok) mask |= uint64_t{1} << i;
  }
  return mask;
}

uint64_t LowestBits(uint64_t mask, int n) {
  uint64_t out = 0;
  for (; n > 0 && mask != 0; --n) {
    uint64_t low = mask & (~mask + 1);
    out |= low;
    mask ^= low;
  }
  return out;
}

bool Misfit::operator==(const Misfit& o) const {
  // Bitwise: 0 and -0 compare equal but read differently.
  if (kind != o.kind || a != o.a || b != o.b ||
      std::memcmp(&gbps, &o.gbps, sizeof gbps) != 0) {
    return false;
  }
  if (text == o.text) return true;
  return text != nullptr && o.text != nullptr && *text == *o.text;
}

Misfit Classify(const std::string& unavailable, const FreeCapacity& free,
                uint64_t matching, const Needs& needs) {
  Misfit m;
  if (!unavailable.empty()) {
    m.kind = Misfit::kUnavailable;
    m.text = &unavailable;
    return m;
  }
  if (needs.gpus > 0) {
    int have = CountBits(matching);
    int have_free = CountBits(matching & free.gpus);
    if (have < needs.gpus) {
      m.kind = Misfit::kTooFewGpus;
      m.a = have;
      return m;
    }
    if (have_free < needs.gpus) {
      m.kind = Misfit::kGpusBusy;
      m.a = have_free;
      m.b = have;
      return m;
    }
  }
  if (needs.cpus > free.cpus) {
    m.kind = Misfit::kCpus;
    m.a = static_cast<uint64_t>(free.cpus);
  } else if (needs.memory > free.memory) {
    m.kind = Misfit::kMemory;
    m.a = free.memory;
  } else if (needs.nvme > free.nvme) {
    m.kind = Misfit::kNvme;
    m.a = free.nvme;
  } else if (needs.nic_gbps > free.nic_gbps + kNicSlackGbps) {
    m.kind = Misfit::kNic;
    m.gbps = free.nic_gbps;
  }
  return m;
}

std::string MisfitText(const Misfit& m, const Needs& needs) {
  switch (m.kind) {
    case Misfit::kFits:
      return "";
    case Misfit::kUnavailable:
      return *m.text;
    case Misfit::kTooFewGpus: {
      const v1::ResourceRequest& r = *needs.req;
      bool filtered = r.min_gpu_memory_bytes() > 0 || r.gpu_models_size() > 0;
      return absl::StrFormat("has %d %s, needs %d", m.a,
                             filtered ? "matching GPUs" : "GPUs", needs.gpus);
    }
    case Misfit::kGpusBusy:
      return absl::StrFormat("%d of %d matching GPUs free, needs %d", m.a, m.b,
                             needs.gpus);
    case Misfit::kCpus:
      return absl::StrFormat("%d CPUs free, needs %d",
                             static_cast<int64_t>(m.a), needs.cpus);
    case Misfit::kMemory:
      return absl::StrCat(HumanBytes(m.a), " memory free, needs ",
                          HumanBytes(needs.memory));
    case Misfit::kNvme:
      return absl::StrCat(HumanBytes(m.a), " NVMe free, needs ",
                          HumanBytes(needs.nvme));
    case Misfit::kNic:
      return absl::StrFormat("%g Gbit/s NIC free, needs %g", m.gbps,
                             needs.nic_gbps);
  }
  return "";
}

}  // namespace xl::scheduler
