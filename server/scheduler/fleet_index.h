// One pass's view of the fleet. Nodes sit in "slots" laid out in ring order
// (switch, rack, fastest NIC first, name), cut into buckets of at most 64
// slots under one switch, so a class of requests can keep one bit per slot
// and a count per switch. Nodes with equal GPUs share a GPU layout, so GPU
// matching costs once per layout and class. The index also holds what the
// pass has not given away yet, and logs every bucket it takes from, so that
// classes re-check only what changed. Private to the scheduling core.
// Thread-compatible.
#ifndef XL_SERVER_SCHEDULER_FLEET_INDEX_H_
#define XL_SERVER_SCHEDULER_FLEET_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/scheduler/node_fit.h"
#include "server/scheduler/placement.h"

namespace xl::scheduler {

class FleetIndex {
 public:
  static constexpr int kBucketSlots = 64;

  struct Slot {
    FreeCapacity free;   // what the pass has left
    FreeCapacity idle;   // everything, as if nothing ran
    int32_t node = 0;    // index in the snapshot
    int32_t layout = 0;  // index into layouts()
    bool available = false;
    // Set while the node is held for a reservation: why (owned by the
    // caller of Hold, which outlives the pass).
    const std::string* held = nullptr;
  };

  // Builds the index in O(nodes log nodes). `nodes` must outlive it and stay
  // unchanged; the capacity the pass takes is kept here, not in `nodes`.
  explicit FleetIndex(const std::vector<NodeCapacity>& nodes);

  int size() const { return static_cast<int>(slots_.size()); }
  const Slot& slot(int s) const { return slots_[s]; }
  int slot_of_node(int node) const { return slot_of_node_[node]; }
  const NodeCapacity& node(int n) const { return (*nodes_)[n]; }
  const NodeCapacity& node_at(int s) const { return node(slots_[s].node); }

  // One NodeInfo per distinct GPU list (models and memory by position).
  const std::vector<const NodeInfo*>& layouts() const { return layouts_; }
  // How many nodes have each layout.
  const std::vector<int32_t>& layout_nodes() const { return layout_nodes_; }

  // Switch ids follow label order; a node without a switch label gets the
  // id of "", which sorts first.
  int num_switches() const { return static_cast<int>(labelled_.size()); }
  bool labelled(int sw) const { return labelled_[sw]; }
  int num_buckets() const { return static_cast<int>(bucket_begin_.size()); }
  // The buckets of switch `sw` are [first_bucket(sw), first_bucket(sw + 1)).
  int first_bucket(int sw) const { return switch_first_bucket_[sw]; }
  int bucket_begin(int b) const { return bucket_begin_[b]; }
  int bucket_switch(int b) const { return bucket_switch_[b]; }
  int bucket_of(int s) const { return bucket_of_[s]; }

  // Takes GPU positions `gpus` and the other per-node needs from slot `s`
  // (the caller has checked they fit) and logs the slot's bucket.
  void Take(int s, uint64_t gpus, const Needs& needs);
  // Takes everything slot `s` has left (a node held for a reservation);
  // `why` ("held for job 12 ...") is what waiting jobs are told.
  void Hold(int s, const std::string* why);
  // The bucket of every take, in order.
  const std::vector<int32_t>& taken() const { return taken_; }

 private:
  void InternLayouts();
  void LayOutRing();

  const std::vector<NodeCapacity>* nodes_;
  std::vector<Slot> slots_;
  std::vector<int32_t> slot_of_node_;
  std::vector<int32_t> node_layout_;  // by snapshot index, before slots exist
  std::vector<const NodeInfo*> layouts_;
  std::vector<int32_t> layout_nodes_;
  std::vector<bool> labelled_;
  std::vector<int32_t> switch_first_bucket_;
  std::vector<int32_t> bucket_begin_;
  std::vector<int32_t> bucket_switch_;
  std::vector<int32_t> bucket_of_;
  std::vector<int32_t> taken_;
};

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_FLEET_INDEX_H_
