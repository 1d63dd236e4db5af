#include "common/argv.h"

#include <cstring>

namespace xl {

int HideArgumentValues(int argc, char** argv,
                       std::initializer_list<const char*> flags) {
  int hidden = 0;
  auto hide = [&hidden](char* value) {
    if (*value == '\0') return;
    std::memset(value, 'x', std::strlen(value));
    ++hidden;
  };
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;  // the job's own arguments
    for (const char* flag : flags) {
      const size_t n = std::strlen(flag);
      if (std::strcmp(argv[i], flag) == 0 && i + 1 < argc) {
        hide(argv[++i]);
        break;
      }
      if (std::strncmp(argv[i], flag, n) == 0 && argv[i][n] == '=') {
        hide(argv[i] + n + 1);
        break;
      }
    }
  }
  return hidden;
}

}  // namespace xl
