// Small helpers shared by the fuzz harnesses: a private temp directory per
// process, writing a file, splitting an input into parts, and a check that
// aborts (so libFuzzer and the plain driver both report the input).
// Single-threaded, like the harnesses.
#ifndef XL_TESTS_FUZZ_FUZZ_UTIL_H_
#define XL_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "absl/strings/string_view.h"

namespace xl::fuzz {

// Protobuf logs every string field with invalid UTF-8 it parses: millions of
// lines in a campaign, most of its time. Silenced in every harness (its
// FATAL still aborts).
inline const bool kQuietProtobuf = [] {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return true;
}();

// A directory of this process's own, removed at exit.
inline const std::string& TempDir() {
  static const std::string* dir = [] {
    std::string t =
        (std::filesystem::temp_directory_path() / "xl-fuzz-XXXXXX").string();
    if (mkdtemp(t.data()) == nullptr) {
      perror("mkdtemp");
      abort();
    }
    auto* d = new std::string(t);
    atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(TempDir(), ec);
    });
    return d;
  }();
  return *dir;
}

inline void WriteFile(const std::string& path, absl::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Splits `data` at every `sep`; always at least one part.
inline std::vector<std::string> Split(absl::string_view data,
                                      absl::string_view sep) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (true) {
    size_t next = data.find(sep, at);
    if (next == absl::string_view::npos) {
      parts.emplace_back(data.substr(at));
      return parts;
    }
    parts.emplace_back(data.substr(at, next - at));
    at = next + sep.size();
  }
}

// A property the code under test must keep: abort with `what` when false.
#define XL_FUZZ_CHECK(cond, what)                                        \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: fuzz check failed: %s: %s\n", __FILE__,    \
              __LINE__, #cond, std::string(what).c_str());               \
      abort();                                                           \
    }                                                                    \
  } while (0)

}  // namespace xl::fuzz

#endif  // XL_TESTS_FUZZ_FUZZ_UTIL_H_
