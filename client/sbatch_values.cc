// The values of #SBATCH options as Slurm writes them: counts, GPU counts
// with a type, memory sizes, host lists, variable names and times.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/sbatch.h"
#include "client/sbatch_request.h"

namespace xl::client {
namespace sbatch {

bool ParseCount(absl::string_view text, int* n) {
  return absl::SimpleAtoi(text, n) && *n >= 1 && *n <= kMaxCount;
}

bool ParseTypedCount(absl::string_view text, int* count, std::string* type) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() > 2 || !absl::SimpleAtoi(parts.back(), count) ||
      *count < 0 || *count > kMaxCount) {
    return false;
  }
  if (parts.size() == 2) {
    if (parts[0].empty()) return false;
    *type = std::string(parts[0]);
  }
  return true;
}

bool ParseSlurmMemory(absl::string_view text, uint64_t* bytes) {
  uint64_t unit = uint64_t{1} << 20;
  if (!text.empty() &&
      !absl::ascii_isdigit(static_cast<unsigned char>(text.back()))) {
    switch (absl::ascii_toupper(static_cast<unsigned char>(text.back()))) {
      case 'K':
        unit = uint64_t{1} << 10;
        break;
      case 'M':
        break;
      case 'G':
        unit = uint64_t{1} << 30;
        break;
      case 'T':
        unit = uint64_t{1} << 40;
        break;
      default:
        return false;
    }
    text.remove_suffix(1);
  }
  uint64_t n = 0;
  if (text.empty() ||
      !absl::ascii_isdigit(static_cast<unsigned char>(text[0])) ||
      !absl::SimpleAtoi(text, &n) ||
      n > std::numeric_limits<uint64_t>::max() / unit) {
    return false;
  }
  *bytes = n * unit;
  return true;
}

bool ExpandHostList(absl::string_view text, std::vector<std::string>* names) {
  // Commas inside brackets separate numbers, not names.
  std::vector<absl::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      items.push_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      --depth;
    }
  }
  for (absl::string_view item : items) {
    if (item.empty() || item.find('/') != absl::string_view::npos) {
      return false;
    }
    const size_t open = item.find('[');
    if (open == absl::string_view::npos) {
      if (item.find(']') != absl::string_view::npos) return false;
      names->emplace_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    if (close == absl::string_view::npos) return false;
    const absl::string_view prefix = item.substr(0, open);
    const absl::string_view suffix = item.substr(close + 1);
    if (suffix.find_first_of("[]") != absl::string_view::npos) return false;
    for (absl::string_view range :
         absl::StrSplit(item.substr(open + 1, close - open - 1), ',')) {
      std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
      int64_t lo = 0, hi = 0;
      if (ends.size() > 2 || ends[0].empty() ||
          !absl::ascii_isdigit(static_cast<unsigned char>(ends[0][0])) ||
          !absl::SimpleAtoi(ends[0], &lo) ||
          !absl::SimpleAtoi(ends.back(), &hi) || lo < 0 || hi < lo ||
          hi - lo >= static_cast<int64_t>(kMaxExcluded)) {
        return false;
      }
      for (int64_t n = lo; n <= hi; ++n) {
        std::string digits = absl::StrCat(n);
        if (digits.size() < ends[0].size()) {
          digits.insert(0, ends[0].size() - digits.size(), '0');
        }
        names->push_back(absl::StrCat(prefix, digits, suffix));
        if (names->size() > kMaxExcluded) return false;
      }
    }
  }
  return names->size() <= kMaxExcluded;
}

bool IsEnvName(absl::string_view name) {
  if (name.empty() ||
      absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

}  // namespace sbatch

bool ParseSlurmTime(absl::string_view text, int64_t* seconds) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "unlimited" || lower == "infinite" || lower == "-1") {
    *seconds = 0;
    return true;
  }
  // Bounds every part so that the sum cannot overflow.
  constexpr int64_t kMaxPart = 1'000'000'000;
  absl::string_view rest = text;
  int64_t days = 0;
  const size_t dash = rest.find('-');
  const bool has_days = dash != absl::string_view::npos;
  if (has_days) {
    const absl::string_view d = rest.substr(0, dash);
    if (d.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(d[0])) ||
        !absl::SimpleAtoi(d, &days) || days > 1'000'000) {
      return false;
    }
    rest = rest.substr(dash + 1);
  }
  std::vector<int64_t> v;
  for (absl::string_view p : absl::StrSplit(rest, ':')) {
    int64_t n = 0;
    if (p.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(p[0])) ||
        !absl::SimpleAtoi(p, &n) || n > kMaxPart) {
      return false;
    }
    v.push_back(n);
  }
  int64_t s = 0;
  if (has_days) {
    // D-HH, D-HH:MM, D-HH:MM:SS
    if (v.size() > 3) return false;
    s = v[0] * 3600 + (v.size() > 1 ? v[1] * 60 : 0) +
        (v.size() > 2 ? v[2] : 0);
  } else if (v.size() == 1) {
    s = v[0] * 60;  // minutes
  } else if (v.size() == 2) {
    s = v[0] * 60 + v[1];  // MM:SS
  } else if (v.size() == 3) {
    s = v[0] * 3600 + v[1] * 60 + v[2];  // HH:MM:SS
  } else {
    return false;
  }
  s += days * 86400;
  if (s > 1'000'000 * int64_t{86400}) return false;
  *seconds = s;
  return true;
}

}  // namespace xl::client
