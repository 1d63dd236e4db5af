#include "client/output_text.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/duration.h"
#include "common/text.h"

namespace xl::client {

void TextTable::AddRow(std::vector<std::string> row) {
  for (std::string& cell : row) cell = Printable(cell);
  rows_.push_back(std::move(row));
}

std::string TextTable::Render() const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  // Cells are escaped as they are added (AddRow), so widths count what is
  // printed.
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i + 1 == row.size()) {
        absl::StrAppend(&line, row[i]);
      } else {
        absl::StrAppend(&line, row[i],
                        std::string(width[i] - row[i].size() + 2, ' '));
      }
    }
    absl::StripTrailingAsciiWhitespace(&line);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

void KeyValueBlock::Add(std::string key, const std::string& value) {
  lines_.emplace_back(std::move(key), Printable(value));
}

std::string KeyValueBlock::Render() const {
  size_t width = 0;
  for (const auto& [key, value] : lines_) width = std::max(width, key.size());
  std::string out;
  for (const auto& [key, value] : lines_) {
    absl::StrAppend(&out, key, ":", std::string(width - key.size() + 2, ' '),
                    value.empty() ? "-" : value, "\n");
  }
  return out;
}

std::string Truncate(const std::string& s, size_t width) {
  // A reason may span lines; a table row must not. Escaped first, so the
  // cut counts what is printed, and never inside a UTF-8 sequence.
  std::string one_line = s;
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  one_line = Printable(one_line);
  if (one_line.size() <= width) return one_line;
  size_t cut = width - 3;
  while (cut > 0 && (static_cast<uint8_t>(one_line[cut]) & 0xC0) == 0x80) --cut;
  return one_line.substr(0, cut) + "...";
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

bool IsSet(const google::protobuf::Timestamp& t) {
  return t.seconds() != 0 || t.nanos() != 0;
}

int32_t RanksPerNode(const xl::v1::ResourceRequest& r) {
  if (r.ranks_per_node() > 0) return r.ranks_per_node();
  return r.gpus_per_node() > 0 ? r.gpus_per_node() : 1;
}

std::string Gbps(double gbps) { return absl::StrFormat("%g", gbps); }

std::string TimeWithAge(const google::protobuf::Timestamp& t,
                        const RenderContext& context) {
  if (!IsSet(t)) return "-";
  const absl::Duration age = context.now - xl::FromProto(t);
  if (age < absl::ZeroDuration()) {
    return absl::StrCat(FormatTimestamp(t, context), " (in ", FormatAge(-age),
                        ")");
  }
  return absl::StrCat(FormatTimestamp(t, context), " (", FormatAge(age),
                      " ago)");
}

std::string Milliseconds(double seconds) {
  return absl::StrFormat("%.2f", seconds * 1e3);
}

std::string Loss(double loss) {
  // A converged loss must not print as 0.0000.
  if (loss != 0 && std::fabs(loss) < 1e-3) {
    return absl::StrFormat("%.3e", loss);
  }
  return absl::StrFormat("%.4f", loss);
}

std::string SamplesPerSecond(double rate) {
  return absl::StrFormat("%.1f", rate);
}

std::string BusGbps(double gbps) {
  return gbps > 0 ? absl::StrFormat("%.2f", gbps) : "-";
}

std::string StepOfTotal(const xl::v1::TrainMetrics& m) {
  if (m.total_steps() <= 0) return absl::StrCat(m.step());
  return absl::StrCat(m.step(), "/", m.total_steps());
}

}  // namespace xl::client
