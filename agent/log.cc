#include "agent/log.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace xl::agent {
namespace {

absl::Mutex g_mu(absl::kConstInit);
std::string* g_name ABSL_GUARDED_BY(g_mu) = nullptr;

}  // namespace

void SetLogName(absl::string_view name) {
  absl::MutexLock lock(&g_mu);
  if (g_name == nullptr) g_name = new std::string();
  g_name->assign(name.data(), name.size());
}

std::string ErrnoString(int err) {
  char buf[256];
  // The GNU strerror_r returns a pointer to the text, in buf or static.
  return strerror_r(err, buf, sizeof(buf));
}

void LogLine(absl::string_view message) {
  std::string line;
  {
    absl::MutexLock lock(&g_mu);
    if (g_name == nullptr || g_name->empty()) {
      line = "xl-agent: ";
    } else {
      line = absl::StrCat("xl-agent[", *g_name, "]: ");
    }
  }
  absl::StrAppend(&line, message);
  if (line.empty() || line.back() != '\n') line.push_back('\n');
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // Nowhere left to report a failing stderr.
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace xl::agent
