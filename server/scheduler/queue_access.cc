#include "server/scheduler/queue_access.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace xl::scheduler {
namespace {

constexpr int kMaxEntries = 1000;

bool Contains(const google::protobuf::RepeatedPtrField<std::string>& list,
              const std::string& name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

bool ValidName(const std::string& name) {
  if (name == "*") return true;
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
           c == '@';
  });
}

std::string List(const google::protobuf::RepeatedPtrField<std::string>& list) {
  constexpr int kShown = 8;
  std::vector<std::string> shown(list.begin(),
                                 list.begin() + std::min(list.size(), kShown));
  std::string out = absl::StrJoin(shown, ", ");
  if (list.size() > kShown) {
    absl::StrAppend(&out, " and ", list.size() - kShown, " more");
  }
  return out;
}

}  // namespace

int32_t UserPriorityCap(const v1::QueueSpec& q) {
  return q.has_max_priority() ? q.max_priority().value() : 0;
}

bool Admits(const v1::QueueSpec& q, const Submitter& who) {
  if (who.admin) return true;
  if (q.users().empty() && q.groups().empty()) return true;
  if (Contains(q.users(), "*") || Contains(q.groups(), "*")) return true;
  if (Contains(q.users(), who.user)) return true;
  return std::any_of(who.groups.begin(), who.groups.end(),
                     [&](const std::string& g) { return Contains(q.groups(), g); });
}

std::string DescribeAdmission(const v1::QueueSpec& q) {
  if ((q.users().empty() && q.groups().empty()) || Contains(q.users(), "*") ||
      Contains(q.groups(), "*")) {
    return "everyone";
  }
  std::string out;
  if (!q.users().empty()) absl::StrAppend(&out, "users ", List(q.users()));
  if (!q.groups().empty()) {
    absl::StrAppend(&out, out.empty() ? "" : " and ", "groups ",
                    List(q.groups()));
  }
  return out;
}

absl::Status CheckQueueAccess(const v1::QueueSpec& q, const Submitter& who,
                              int32_t priority) {
  if (who.admin) return absl::OkStatus();
  if (!Admits(q, who)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "queue: ", who.user, " may not submit to queue ", q.name(),
        ", which admits ", DescribeAdmission(q),
        "; submit to a queue you are admitted to (xlctl queue list), or ask "
        "an admin to add you (xlctl queue set ", q.name(), " --admit-user ",
        who.user, ")"));
  }
  const int32_t cap = UserPriorityCap(q);
  if (priority > cap) {
    return absl::PermissionDeniedError(absl::StrCat(
        "priority: ", priority, " is above what queue ", q.name(),
        " lets its users ask for (max_priority ", cap,
        q.has_max_priority() ? "" : ", the default where a queue sets none",
        "); ask for ", cap,
        " or less, or ask an admin to raise the job's priority (xlctl "
        "set-priority JOB N)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateQueueAdmission(const v1::QueueSpec& q) {
  for (const auto& [field, list] :
       {std::pair{"users", &q.users()}, {"groups", &q.groups()}}) {
    if (list->size() > kMaxEntries) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", list->size(), " entries; at most ", kMaxEntries,
          " (admit a group instead of its users one by one)"));
    }
    std::set<std::string> seen;
    for (int i = 0; i < list->size(); ++i) {
      const std::string& name = list->Get(i);
      if (!ValidName(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, "[", i, "]: not a name; give 1-64 letters, digits and "
            ". _ @ -, or \"*\" for everyone"));
      }
      if (!seen.insert(name).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, "[", i, "]: '", name, "' is listed twice; give it once"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace xl::scheduler
