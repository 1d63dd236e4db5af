#include "server/scheduler/wait_reason.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace xl::scheduler {
namespace {

constexpr int kNamesShown = 4;

// Nodes short of the same thing.
struct Group {
  Misfit misfit;
  int64_t count = 0;
  int32_t first[kNamesShown] = {};  // the first nodes, by snapshot index
  std::string text;
};

struct MisfitHash {
  size_t operator()(const Misfit& m) const {
    uint64_t gbps_bits;
    std::memcpy(&gbps_bits, &m.gbps, sizeof gbps_bits);
    size_t h = m.kind;
    h = h * 1000003 ^ std::hash<uint64_t>()(m.a);
    h = h * 1000003 ^ std::hash<uint64_t>()(m.b);
    h = h * 1000003 ^ std::hash<uint64_t>()(gbps_bits);
    if (m.text != nullptr) h = h * 1000003 ^ std::hash<std::string>()(*m.text);
    return h;
  }
};

// Classifies every node, in snapshot order. Returns the nodes that fit.
int64_t GroupMisfits(const FleetIndex& fleet, const Needs& needs,
                     const std::vector<uint64_t>& layout_gpus,
                     std::vector<Group>* groups) {
  std::unordered_map<Misfit, int32_t, MisfitHash> index;
  int64_t fits = 0;
  int32_t last = -1;
  for (int n = 0; n < fleet.size(); ++n) {
    const FleetIndex::Slot& slot = fleet.slot(fleet.slot_of_node(n));
    Misfit m = Classify(slot.held != nullptr ? *slot.held
                                             : fleet.node(n).unavailable,
                        slot.free, layout_gpus[slot.layout], needs);
    if (m.kind == Misfit::kFits) {
      ++fits;
      continue;
    }
    // Neighbours are often short of the same thing: skip the hash.
    if (last < 0 || !((*groups)[last].misfit == m)) {
      auto [it, added] = index.emplace(m, static_cast<int32_t>(groups->size()));
      if (added) {
        groups->emplace_back();
        groups->back().misfit = m;
      }
      last = it->second;
    }
    Group& g = (*groups)[last];
    if (g.count < kNamesShown) g.first[g.count] = n;
    ++g.count;
  }
  return fits;
}

// "a, b, c, d and 3 more: <text>" for each distinct text, in text order.
std::vector<std::string> GroupTexts(const FleetIndex& fleet,
                                    std::vector<Group>* groups) {
  std::vector<int32_t> order(groups->size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return (*groups)[a].text < (*groups)[b].text;
  });
  std::vector<std::string> parts;
  for (size_t i = 0; i < order.size();) {
    // Different numbers can read the same ("256.0 GiB" for two sizes near
    // it): such groups are one, as when reasons were grouped by their words.
    const std::string& text = (*groups)[order[i]].text;
    int64_t count = 0;
    std::vector<int32_t> names;
    size_t j = i;
    for (; j < order.size() && (*groups)[order[j]].text == text; ++j) {
      const Group& g = (*groups)[order[j]];
      count += g.count;
      names.insert(names.end(), g.first,
                   g.first + std::min<int64_t>(g.count, kNamesShown));
    }
    std::sort(names.begin(), names.end());
    if (names.size() > kNamesShown) names.resize(kNamesShown);
    std::string who =
        absl::StrJoin(names, ", ", [&](std::string* out, int32_t n) {
          out->append(fleet.node(n).name());
        });
    if (count > static_cast<int64_t>(names.size())) {
      absl::StrAppend(&who, " and ", count - names.size(), " more");
    }
    parts.push_back(absl::StrCat(who, ": ", text));
    i = j;
  }
  return parts;
}

}  // namespace

std::string WaitReason(const FleetIndex& fleet, const Needs& needs,
                       const std::vector<uint64_t>& layout_gpus,
                       int32_t idle_fit) {
  std::vector<Group> groups;
  const int64_t fits = GroupMisfits(fleet, needs, layout_gpus, &groups);
  for (Group& g : groups) g.text = MisfitText(g.misfit, needs);
  std::vector<std::string> parts = GroupTexts(fleet, &groups);

  std::string text = absl::StrCat("needs ", DescribeRequest(*needs.req), "; ");
  if (idle_fit < needs.nodes) {
    absl::StrAppend(&text, "the fleet has only ", idle_fit, " such node",
                    idle_fit == 1 ? "" : "s", " of ", fleet.size(),
                    " even when idle, so it cannot start until nodes are "
                    "added (or shrink the request); ");
  }
  absl::StrAppend(&text, fits, " fit", fits == 1 ? "s" : "", " now");
  if (!parts.empty()) absl::StrAppend(&text, "; ", absl::StrJoin(parts, "; "));
  if (fleet.size() == 0) absl::StrAppend(&text, "; no node is registered");
  return text;
}

}  // namespace xl::scheduler
