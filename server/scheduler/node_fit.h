// How one resource request meets one node: the request as plain numbers, which
// of a node's GPUs match it, and the first resource a node is short of as a
// small value (`Misfit`) that a pass compares and counts before it puts it
// into words, so reasons are formatted once per kind of misfit, not per node.
// Private to the scheduling core. Pure and stateless; safe from any thread.
#ifndef XL_SERVER_SCHEDULER_NODE_FIT_H_
#define XL_SERVER_SCHEDULER_NODE_FIT_H_

#include <cstdint>
#include <string>

#include "server/scheduler/placement.h"
#include "xl/v1/job.pb.h"

namespace xl::scheduler {

// Bandwidth is a double: sums of shares may miss the total by rounding.
inline constexpr double kNicSlackGbps = 1e-9;

// A request's per-node needs, read out of the proto once per class. `req`
// must outlive it.
struct Needs {
  explicit Needs(const v1::ResourceRequest& r);

  const v1::ResourceRequest* req;
  int32_t nodes;
  int32_t gpus;
  int64_t cpus;
  uint64_t memory;
  uint64_t nvme;
  double nic_gbps;
};

// The numbers of a NodeCapacity, without the shared parts.
struct FreeCapacity {
  uint64_t gpus = 0;  // bit i: GPU position i is free
  int64_t cpus = 0;
  uint64_t memory = 0;
  uint64_t nvme = 0;
  double nic_gbps = 0;
};

// Returns the number of set bits. Inline arithmetic: without -mpopcnt the
// builtin is a library call, and this sits in the innermost loops.
inline int CountBits(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return static_cast<int>((x * 0x0101010101010101ull) >> 56);
}

// Returns the GPU positions of `info` that `req` may use (bit i: gpus[i]).
uint64_t MatchingGpus(const NodeInfo& info, const v1::ResourceRequest& req);

// Returns the lowest `n` set bits of `mask` (all of them when it has fewer).
uint64_t LowestBits(uint64_t mask, int n);

// True when an available node with `free` and `matching` GPUs takes one
// share. Inline: it runs once per node and class.
inline bool FitsNow(const FreeCapacity& free, uint64_t matching,
                    const Needs& needs) {
  if (needs.gpus > 0 && CountBits(matching & free.gpus) < needs.gpus) {
    return false;
  }
  return needs.cpus <= free.cpus && needs.memory <= free.memory &&
         needs.nvme <= free.nvme &&
         needs.nic_gbps <= free.nic_gbps + kNicSlackGbps;
}

// Why a node does not take one share now: the first resource short, in
// numbers. Equal values read the same in words.
struct Misfit {
  enum Kind : uint8_t {
    kFits,
    kUnavailable,  // text: the node's own reason
    kTooFewGpus,   // a: matching GPUs the node has at all
    kGpusBusy,     // a: matching GPUs free, b: matching GPUs
    kCpus,         // a: CPUs free
    kMemory,       // a: bytes free
    kNvme,         // a: bytes free
    kNic,          // gbps: bandwidth free
  };
  Kind kind = kFits;
  uint64_t a = 0;
  uint64_t b = 0;
  double gbps = 0;
  const std::string* text = nullptr;  // kUnavailable; owned by the node

  bool operator==(const Misfit& o) const;
};

// Returns the first resource short on a node (kFits when it takes a share).
Misfit Classify(const std::string& unavailable, const FreeCapacity& free,
                uint64_t matching, const Needs& needs);

// Returns the misfit in words ("1 of 2 matching GPUs free, needs 2").
std::string MisfitText(const Misfit& m, const Needs& needs);

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_NODE_FIT_H_
