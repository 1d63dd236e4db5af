// The agent's log: one line per event on stderr, prefixed "xl-agent[name]: ".
// Each line is written with a single write(2), so lines from different
// threads never interleave. Safe from any thread.
#ifndef XL_AGENT_LOG_H_
#define XL_AGENT_LOG_H_

#include <string>

#include "absl/strings/string_view.h"

namespace xl::agent {

// Sets the name shown in the prefix (the node name). Before the first call the
// prefix is "xl-agent: ".
void SetLogName(absl::string_view name);

// Writes "xl-agent[name]: <message>\n" to stderr.
void LogLine(absl::string_view message);

// The text of an errno value ("No such file or directory"); thread-safe,
// unlike strerror().
std::string ErrnoString(int err);

}  // namespace xl::agent

#endif  // XL_AGENT_LOG_H_
