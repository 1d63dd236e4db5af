// Checkpoint writing (atomic, fsynced) and the scan for the newest valid
// one. Stateless; the caller serializes writes to one directory.
#include "agent/worker/loop/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace xl::worker {
namespace {

constexpr char kMagic[4] = {'X', 'L', 'C', '1'};
constexpr size_t kHeaderBytesV1 = 4 + 4 + 8 * 4;
constexpr size_t kHeaderBytes = kHeaderBytesV1 + 4 + 4 + 8;

absl::Status Errno(int err, const std::string& what) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (err == ENOSPC || err == EDQUOT)
    code = absl::StatusCode::kResourceExhausted;
  if (err == ENOENT) code = absl::StatusCode::kNotFound;
  if (err == EACCES || err == EPERM || err == EROFS) {
    code = absl::StatusCode::kPermissionDenied;
  }
  return absl::Status(code, absl::StrCat(what, ": ", std::strerror(err)));
}

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
T ReadAt(const std::string& buf, size_t off) {
  T v;
  std::memcpy(&v, buf.data() + off, sizeof(v));
  return v;
}

absl::Status WriteAll(int fd, const char* p, size_t n,
                      const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "write " + path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, "open " + dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Errno(err, "fsync " + dir);
  return absl::OkStatus();
}

// Steps of the ckpt-<step>.xlc files in dir, ascending.
absl::StatusOr<std::vector<int64_t>> ListSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return steps;
    return Errno(errno, "opendir " + dir);
  }
  while (struct dirent* e = ::readdir(d)) {
    absl::string_view name = e->d_name;
    if (!absl::ConsumePrefix(&name, "ckpt-")) continue;
    if (!absl::ConsumeSuffix(&name, ".xlc")) continue;
    int64_t step;
    if (absl::SimpleAtoi(name, &step) && step >= 0) steps.push_back(step);
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

uint64_t Fnv1a64(const void* data, size_t size, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t ConfigFingerprint(const TrainConfig& config) {
  std::vector<int32_t> w;
  for (int x : config.Widths()) w.push_back(x);
  return Fnv1a64(w.data(), w.size() * sizeof(int32_t));
}

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/ckpt-", step, ".xlc");
}

absl::Status WriteCheckpoint(const std::string& dir, const TrainState& state,
                             uint64_t fingerprint, int keep) {
  const uint64_t count = state.params.size();
  if (state.m.size() != count || state.v.size() != count) {
    return absl::InvalidArgumentError("checkpoint: params, m, v sizes differ");
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Errno(errno, "mkdir " + dir);
  }
  // Streamed: the header, then each vector from where it lies, with the
  // checksum carried along (never the whole state as one more copy).
  std::string header;
  header.reserve(kHeaderBytes);
  header.append(kMagic, 4);
  Append<uint32_t>(&header, kCheckpointVersion);
  Append<uint64_t>(&header, static_cast<uint64_t>(state.step));
  Append<uint64_t>(&header, fingerprint);
  Append<uint64_t>(&header, count);
  Append<uint64_t>(&header, static_cast<uint64_t>(state.adam_t));
  Append<float>(&header, state.loss_scale);
  Append<uint32_t>(&header, static_cast<uint32_t>(state.batch_per_rank));
  Append<uint64_t>(&header, static_cast<uint64_t>(state.good_steps));

  const std::string path = CheckpointPath(dir, state.step);
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(errno, "open " + tmp);
  uint64_t sum = Fnv1a64(header.data(), header.size());
  absl::Status st = WriteAll(fd, header.data(), header.size(), tmp);
  for (const auto* vec : {&state.params, &state.m, &state.v}) {
    if (!st.ok()) break;
    // In pieces, so the checksum of a piece is taken while it is in cache.
    const char* p = reinterpret_cast<const char*>(vec->data());
    size_t left = count * sizeof(float);
    while (st.ok() && left > 0) {
      const size_t n = std::min<size_t>(left, size_t{1} << 20);
      sum = Fnv1a64(p, n, sum);
      st = WriteAll(fd, p, n, tmp);
      p += n;
      left -= n;
    }
  }
  if (st.ok()) {
    std::string tail;
    Append<uint64_t>(&tail, sum);
    st = WriteAll(fd, tail.data(), tail.size(), tmp);
  }
  if (st.ok() && ::fsync(fd) != 0) st = Errno(errno, "fsync " + tmp);
  if (::close(fd) != 0 && st.ok()) st = Errno(errno, "close " + tmp);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = Errno(errno, "rename " + tmp);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  if (absl::Status s = FsyncDir(dir); !s.ok()) return s;

  auto steps = ListSteps(dir);
  if (!steps.ok()) return steps.status();
  for (size_t i = 0; i + keep < steps->size(); ++i) {
    ::unlink(CheckpointPath(dir, (*steps)[i]).c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainState> ReadCheckpoint(const std::string& path,
                                          uint64_t fingerprint, int64_t count) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, "open " + path);
  // Read as written: the header, then each vector straight into its
  // place, with the checksum carried along.
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    return Errno(err, "stat " + path);
  }
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  // Fills `n` bytes at `p` (false at the end of the file or on an error).
  auto read_exact = [&](void* p, size_t n, absl::Status* err) {
    auto* out = static_cast<char*>(p);
    while (n > 0) {
      const ssize_t r = ::read(fd, out, n);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        *err = Errno(errno, "read " + path);
        return false;
      }
      if (r == 0) {
        *err = absl::DataLossError("truncated");
        return false;
      }
      out += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  };
  auto fail = [&](absl::Status st) {
    ::close(fd);
    return st;
  };
  std::string buf(kHeaderBytes, '\0');
  absl::Status err;
  if (file_size < kHeaderBytesV1 + 8 ||
      !read_exact(buf.data(), kHeaderBytesV1, &err) ||
      std::memcmp(buf.data(), kMagic, 4) != 0) {
    if (!err.ok() && err.code() != absl::StatusCode::kDataLoss) return fail(err);
    return fail(absl::DataLossError("not a checkpoint (bad magic or too short)"));
  }
  const uint32_t version = ReadAt<uint32_t>(buf, 4);
  if (version != 1 && version != kCheckpointVersion) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("version ", version, ", expected 1 to ",
                     kCheckpointVersion, " (written by a newer xl-train?)")));
  }
  const size_t header = version == 1 ? kHeaderBytesV1 : kHeaderBytes;
  const uint64_t n = ReadAt<uint64_t>(buf, 24);
  const uint64_t want = header + 3 * n * sizeof(float) + 8;
  if (n > (1ull << 40) || file_size != want) {
    return fail(absl::DataLossError(absl::StrCat(
        "size ", file_size, " bytes, ", "expected ", want, " (truncated?)")));
  }
  if (ReadAt<uint64_t>(buf, 16) != fingerprint ||
      n != static_cast<uint64_t>(count)) {
    return fail(absl::FailedPreconditionError(
        "model shape differs from this job's (config fingerprint mismatch)"));
  }
  if (header > kHeaderBytesV1 &&
      !read_exact(buf.data() + kHeaderBytesV1, header - kHeaderBytesV1, &err)) {
    return fail(err);
  }
  uint64_t sum = Fnv1a64(buf.data(), header);
  TrainState s;
  s.step = static_cast<int64_t>(ReadAt<uint64_t>(buf, 8));
  s.adam_t = static_cast<int64_t>(ReadAt<uint64_t>(buf, 32));
  if (version >= 2) {
    s.loss_scale = ReadAt<float>(buf, kHeaderBytesV1);
    s.batch_per_rank =
        static_cast<int32_t>(ReadAt<uint32_t>(buf, kHeaderBytesV1 + 4));
    s.good_steps = static_cast<int64_t>(ReadAt<uint64_t>(buf, kHeaderBytesV1 + 8));
  }
  for (auto* vec : {&s.params, &s.m, &s.v}) {
    vec->resize(n);
    if (!read_exact(vec->data(), n * sizeof(float), &err)) return fail(err);
    sum = Fnv1a64(vec->data(), n * sizeof(float), sum);
  }
  uint64_t stored = 0;
  if (!read_exact(&stored, sizeof(stored), &err)) return fail(err);
  ::close(fd);
  if (stored != sum) return absl::DataLossError("checksum mismatch (corrupt)");
  return s;
}

absl::StatusOr<LoadedCheckpoint> LoadNewestCheckpoint(const std::string& dir,
                                                      uint64_t fingerprint,
                                                      int64_t count) {
  LoadedCheckpoint out;
  auto steps = ListSteps(dir);
  if (!steps.ok()) return steps.status();
  for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
    const std::string path = CheckpointPath(dir, *it);
    absl::StatusOr<TrainState> s = ReadCheckpoint(path, fingerprint, count);
    if (s.ok() && s->step != *it) {
      s = absl::DataLossError(
          absl::StrCat("holds step ", s->step, ", its name says ", *it));
    }
    if (!s.ok()) {
      std::string why = absl::StrCat(path, ": ", s.status().message());
      std::cerr << "xl-train: warning: skipping checkpoint " << why << "\n";
      out.skipped.push_back(std::move(why));
      continue;
    }
    out.state = *std::move(s);
    out.path = path;
    break;
  }
  return out;
}

CheckpointWriter::WriteFn PeriodicCheckpoints(std::string dir,
                                              uint64_t fingerprint, int keep) {
  return [dir = std::move(dir), fingerprint, keep](const TrainState& s) {
    absl::Status st = WriteCheckpoint(dir, s, fingerprint, keep);
    if (!st.ok()) {
      std::cerr << "xl-train: warning: checkpoint at step " << s.step
                << " failed: " << st.message() << "\n";
    }
    return st;
  };
}

void CheckpointWriter::Submit(TrainState state) {
  (void)Wait();  // Its failure was said when it happened.
  pending_ = std::async(
      std::launch::async,
      [this](TrainState s) { return write_(s); }, std::move(state));
}

bool CheckpointWriter::busy() const {
  return pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) !=
                                 std::future_status::ready;
}

absl::Status CheckpointWriter::Wait() {
  if (!pending_.valid()) return absl::OkStatus();
  return pending_.get();
}

}  // namespace xl::worker
