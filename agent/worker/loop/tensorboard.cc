#include "agent/worker/loop/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace xl::worker {
namespace {

const std::array<uint32_t, 256>& Crc32cTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void PutFixed32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

void PutFixed64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// A length-delimited field.
void PutBytes(std::string* out, int field, absl::string_view bytes) {
  PutVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  PutVarint(out, bytes.size());
  out->append(bytes.data(), bytes.size());
}

std::string EventHeader(double wall_time, int64_t step) {
  std::string event;
  PutVarint(&event, (1 << 3) | 1);  // wall_time: double
  uint64_t bits;
  std::memcpy(&bits, &wall_time, sizeof(bits));
  PutFixed64(&event, bits);
  PutVarint(&event, 2 << 3);  // step: int64
  PutVarint(&event, static_cast<uint64_t>(step));
  return event;
}

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  const auto& table = Crc32cTable();
  uint32_t c = 0xffffffffu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(absl::string_view data) {
  std::string length;
  PutFixed64(&length, data.size());
  std::string out = length;
  PutFixed32(&out, MaskedCrc32c(length));
  out.append(data.data(), data.size());
  PutFixed32(&out, MaskedCrc32c(data));
  return out;
}

std::string ScalarEvent(
    double wall_time, int64_t step,
    const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    PutBytes(&v, 1, tag);        // Summary.Value.tag
    PutVarint(&v, (2 << 3) | 5);  // Summary.Value.simple_value: float
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    PutFixed32(&v, bits);
    PutBytes(&summary, 1, v);  // Summary.value
  }
  std::string event = EventHeader(wall_time, step);
  PutBytes(&event, 5, summary);  // Event.summary
  return event;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(
    const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the TensorBoard directory ", dir, ": ", ec.message()));
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const std::string path =
      absl::StrCat(dir, "/events.out.tfevents.", std::time(nullptr), ".",
                   host, ".", getpid());
  std::FILE* file = std::fopen(path.c_str(), "wbx");
  if (file == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, file));
  std::string first = EventHeader(absl::ToDoubleSeconds(absl::Now() -
                                                        absl::UnixEpoch()),
                                  0);
  PutBytes(&first, 3, "brain.Event:2");  // Event.file_version
  absl::Status st = writer->Write(TfRecord(first));
  if (!st.ok()) return st;
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TensorBoardWriter::Write(const std::string& record) {
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::Add(
    double wall_time, int64_t step,
    const std::vector<std::pair<std::string, float>>& values) {
  return Write(TfRecord(ScalarEvent(wall_time, step, values)));
}

void TensorBoardSink::Report(const v1::TrainMetrics& m) {
  if (next_ != nullptr) next_->Report(m);
  if (writer_ == nullptr) return;
  const double wall =
      m.has_time() ? static_cast<double>(m.time().seconds()) +
                         m.time().nanos() * 1e-9
                   : absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  absl::Status st = writer_->Add(
      wall, m.step(),
      {{"train/loss", static_cast<float>(m.loss())},
       {"train/samples_per_second", static_cast<float>(m.samples_per_second())},
       {"train/learning_rate", static_cast<float>(learning_rate_)},
       {"time/step_seconds", static_cast<float>(m.step_seconds())},
       {"time/compute_seconds", static_cast<float>(m.compute_seconds())},
       {"time/allreduce_seconds", static_cast<float>(m.allreduce_seconds())},
       {"time/data_wait_seconds", static_cast<float>(m.data_wait_seconds())},
       {"allreduce/bus_gbps", static_cast<float>(m.allreduce_bus_gbps())},
       {"memory/peak_bytes", static_cast<float>(m.peak_memory_bytes())}});
  if (!st.ok()) {
    std::cerr << "xl-train: warning: " << st.message()
              << "; no more TensorBoard events\n";
    writer_.reset();
  }
}

}  // namespace xl::worker
