#include "server/scheduler/pass/class_table.h"

namespace xl::scheduler {

ClassTable::Entry& ClassTable::Find(
    const std::shared_ptr<const v1::ResourceRequest>& request) {
  if (request == nullptr) {
    if (no_request_.reason == nullptr) {
      no_request_.reason = std::make_shared<const std::string>(
          "the job has no resource request");
    }
    return no_request_;
  }
  auto by_pointer = by_pointer_.find(request.get());
  if (by_pointer != by_pointer_.end()) return entries_[by_pointer->second];
  auto [it, added] = by_content_.emplace(request->SerializeAsString(),
                                         static_cast<int32_t>(entries_.size()));
  if (added) entries_.push_back(Entry{request, nullptr, nullptr});
  by_pointer_.emplace(request.get(), it->second);
  return entries_[it->second];
}

}  // namespace xl::scheduler
