// The text the renderers of output.h build from, shared by output.cc and
// output_{jobs,training,nodes,queues}.cc: an aligned table, a block of
// "Key: value" lines, and the cell formats several of them print (dashes for
// nothing, times with ages, bandwidths, training metrics). Every cell is
// escaped (Printable) as it is added. No I/O; the functions are stateless and
// safe from any thread, a table or block is used by one thread.
#ifndef XL_CLIENT_OUTPUT_TEXT_H_
#define XL_CLIENT_OUTPUT_TEXT_H_

#include <google/protobuf/repeated_field.h>
#include <google/protobuf/timestamp.pb.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "client/output.h"
#include "xl/v1/job.pb.h"

namespace xl::client {

// Columns separated by two spaces, each as wide as its widest cell; the last
// column is not padded so lines carry no trailing blanks.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) {
    rows_.push_back(std::move(header));
  }
  // Adds a row, each cell escaped.
  void AddRow(std::vector<std::string> row);
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// "Key:  value" lines with the values aligned; an empty value prints "-".
class KeyValueBlock {
 public:
  // Adds a line, its value escaped.
  void Add(std::string key, const std::string& value);
  std::string Render() const;

 private:
  std::vector<std::pair<std::string, std::string>> lines_;
};

// `s` on one line, escaped, and cut to `width` with "..." when longer.
std::string Truncate(const std::string& s, size_t width);
// `s`, or "-" when it is empty.
std::string OrDash(const std::string& s);
// Whether `t` holds a time (not the zero Timestamp).
bool IsSet(const google::protobuf::Timestamp& t);

// The numbers joined by ",", or "-" for none.
template <typename T>
std::string JoinInts(const google::protobuf::RepeatedField<T>& values) {
  return OrDash(absl::StrJoin(values, ","));
}

// The ranks a job starts on each node: as given, or one per GPU, or 1.
int32_t RanksPerNode(const xl::v1::ResourceRequest& r);
// A bandwidth in Gbit/s, as short as it is exact ("%g").
std::string Gbps(double gbps);
// "2024-05-01 14:05:09 (5m ago)", or "(in 5m)" for a time to come; "-"
// when unset.
std::string TimeWithAge(const google::protobuf::Timestamp& t,
                        const RenderContext& context);

// Training metrics in the units and precision xl-train's own log line uses.
std::string Milliseconds(double seconds);
std::string Loss(double loss);
std::string SamplesPerSecond(double rate);
// "-" for 0: a one-rank job does no all-reduce.
std::string BusGbps(double gbps);
// "step/total", or the step alone when the total is not known.
std::string StepOfTotal(const xl::v1::TrainMetrics& m);

}  // namespace xl::client

#endif  // XL_CLIENT_OUTPUT_TEXT_H_
