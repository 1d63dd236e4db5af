// The per-pass memo of the filter and score phases: one entry per distinct
// resource request (a class), holding the RequestClass that filters the
// fleet's nodes and picks a gang's nodes, and, once the class failed, why
// (capacity only shrinks within a pass, so later jobs of the class are told
// the same without a search). Private to the scheduling core; one object
// per pass, not thread-safe.
#ifndef XL_SERVER_SCHEDULER_PASS_CLASS_TABLE_H_
#define XL_SERVER_SCHEDULER_PASS_CLASS_TABLE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>

#include "server/scheduler/request_class.h"
#include "xl/v1/job.pb.h"

namespace xl::scheduler {

// The classes of one pass. Jobs with equal requests share one entry: the
// control layer shares one request object between equal requests, so the
// pointer answers first and the serialized request only for new pointers.
class ClassTable {
 public:
  struct Entry {
    std::shared_ptr<const v1::ResourceRequest> request;
    std::unique_ptr<RequestClass> live;  // built at the class's first job
    std::shared_ptr<const std::string> reason;  // set once it failed
    // Nodes that fit one share when it failed (an upper bound after).
    int64_t fitting = -1;
    // Elastic: `reason` already says what even its minimum finds.
    bool elastic_told = false;
  };

  // Returns the entry of `request`'s class (made on first use). A null
  // request has one entry, failed with "the job has no resource request".
  Entry& Find(const std::shared_ptr<const v1::ResourceRequest>& request);

 private:
  std::unordered_map<const v1::ResourceRequest*, int32_t> by_pointer_;
  std::unordered_map<std::string, int32_t> by_content_;
  // A deque: an entry found stays where it is while more are added.
  std::deque<Entry> entries_;
  Entry no_request_;
};

}  // namespace xl::scheduler

#endif  // XL_SERVER_SCHEDULER_PASS_CLASS_TABLE_H_
