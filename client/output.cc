// The formats, the names and times every renderer uses, and LogPrinter; the
// renderers of jobs, training, nodes and queues are in output_*.cc.
#include "client/output.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/exit_code.h"
#include "client/output_text.h"
#include "common/duration.h"
#include "common/proto_text.h"

namespace xl::client {

using google::protobuf::RepeatedPtrField;

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view text) {
  std::string lower = absl::AsciiStrToLower(text);
  if (lower == "table") return OutputFormat::kTable;
  if (lower == "json") return OutputFormat::kJson;
  if (lower == "yaml") return OutputFormat::kYaml;
  if (lower == "csv") return OutputFormat::kCsv;
  return UsageError(absl::StrCat("-o: unknown output format \"", text,
                                 "\"; use table, json, yaml or csv"));
}

std::string RenderMessage(const google::protobuf::Message& message,
                          OutputFormat format) {
  if (format == OutputFormat::kYaml) return xl::MessageToYaml(message);
  return xl::MessageToJson(message, /*pretty=*/true) + "\n";
}

std::string RenderStreamItem(const google::protobuf::Message& message,
                             OutputFormat format) {
  if (format == OutputFormat::kYaml) {
    return absl::StrCat("---\n", xl::MessageToYaml(message));
  }
  return xl::MessageToJson(message, /*pretty=*/false) + "\n";
}

std::string JobStateName(xl::v1::JobState state) {
  if (state == xl::v1::JOB_STATE_UNSPECIFIED) return "-";
  std::string name = xl::v1::JobState_Name(state);
  return name.empty() ? absl::StrCat(static_cast<int>(state)) : name;
}

std::string NodeStateName(xl::v1::NodeState state) {
  if (state == xl::v1::NODE_STATE_UNSPECIFIED) return "-";
  std::string name = xl::v1::NodeState_Name(state);
  return name.empty() ? absl::StrCat(static_cast<int>(state)) : name;
}

std::string FormatTimestamp(const google::protobuf::Timestamp& t,
                            const RenderContext& context) {
  if (!IsSet(t)) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", xl::FromProto(t), context.zone);
}

std::string FormatAge(absl::Duration age) {
  if (age < absl::ZeroDuration()) age = absl::ZeroDuration();
  int64_t s = absl::ToInt64Seconds(age);
  if (s < 120) return absl::StrCat(s, "s");
  if (s < int64_t{2} * 3600) return absl::StrCat(s / 60, "m");
  if (s < int64_t{48} * 3600) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

std::string ShellJoin(const RepeatedPtrField<std::string>& argv) {
  std::vector<std::string> words;
  for (const std::string& arg : argv) {
    bool plain = !arg.empty() &&
                 arg.find_first_not_of(
                     "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789_-./=:,+@%") == std::string::npos;
    if (plain) {
      words.push_back(arg);
    } else {
      std::string quoted = "'";
      for (char c : arg) {
        if (c == '\'') {
          quoted += "'\\''";
        } else {
          quoted += c;
        }
      }
      words.push_back(quoted + "'");
    }
  }
  return absl::StrJoin(words, " ");
}

namespace {

// `text` with its lines and tabs kept and every other control character
// escaped.
std::string EscapeLog(absl::string_view text) {
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '\n' && text[i] != '\t') continue;
    out += Printable(text.substr(start, i - start));
    if (i < text.size()) out += text[i];
    start = i + 1;
  }
  return out;
}

}  // namespace

std::string LogPrinter::Add(const xl::v1::LogChunk& chunk) {
  if (!prefix_ranks_) {
    if (!escape_) return chunk.data();
    // A UTF-8 character split across chunks waits for its rest, so that it
    // is not escaped as stray bytes.
    std::string& held =
        partial_[{chunk.rank(), static_cast<int>(chunk.stream())}];
    std::string text = held + chunk.data();
    held.clear();
    for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
      const unsigned char c =
          static_cast<unsigned char>(text[text.size() - back]);
      if ((c & 0xC0) == 0x80) continue;  // a continuation byte
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (need > back) {
        held = text.substr(text.size() - back);
        text.resize(text.size() - back);
      }
      break;
    }
    return EscapeLog(text);
  }
  std::string& pending =
      partial_[{chunk.rank(), static_cast<int>(chunk.stream())}];
  pending += chunk.data();
  std::string out;
  const std::string prefix = absl::StrCat("[rank ", chunk.rank(), "] ");
  size_t start = 0;
  for (size_t nl = pending.find('\n'); nl != std::string::npos;
       nl = pending.find('\n', start)) {
    absl::string_view line =
        absl::string_view(pending).substr(start, nl + 1 - start);
    absl::StrAppend(&out, prefix, escape_ ? EscapeLog(line) : line);
    start = nl + 1;
  }
  pending.erase(0, start);
  return out;
}

std::string LogPrinter::Flush() {
  std::string out;
  for (auto& [key, pending] : partial_) {
    if (pending.empty()) continue;
    if (prefix_ranks_) {
      absl::StrAppend(&out, "[rank ", key.first, "] ",
                      escape_ ? EscapeLog(pending) : pending, "\n");
    } else {
      out += EscapeLog(pending);  // an unfinished character: its bytes
    }
    pending.clear();
  }
  return out;
}

}  // namespace xl::client
