// Shard format I/O and the prefetching reader (one background thread per
// reader, a bounded queue under mu_).
#include "agent/worker/data/data_shards.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/worker/data/data.h"

namespace xl::worker {
namespace {

constexpr char kShardMagic[4] = {'X', 'L', 'S', '1'};

absl::Status IoError(const std::string& what) {
  return absl::Status(errno == ENOSPC   ? absl::StatusCode::kResourceExhausted
                      : errno == ENOENT ? absl::StatusCode::kNotFound
                                        : absl::StatusCode::kInternal,
                      absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status PreadAll(int fd, char* p, size_t n, off_t off,
                      const std::string& path) {
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return IoError("read " + path);
    }
    if (r == 0) return absl::DataLossError(absl::StrCat(path, ": truncated"));
    p += r;
    n -= static_cast<size_t>(r);
    off += r;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteShard(const std::string& path, int input_dim, int classes,
                        const float* x, const int32_t* labels, uint64_t count) {
  std::string buf;
  const size_t rec = (static_cast<size_t>(input_dim) + 1) * 4;
  buf.reserve(kShardHeaderBytes + count * rec);
  buf.append(kShardMagic, 4);
  uint32_t dims[2] = {static_cast<uint32_t>(input_dim),
                      static_cast<uint32_t>(classes)};
  buf.append(reinterpret_cast<const char*>(dims), sizeof(dims));
  buf.append(reinterpret_cast<const char*>(&count), sizeof(count));
  for (uint64_t i = 0; i < count; ++i) {
    buf.append(reinterpret_cast<const char*>(x + i * input_dim),
               sizeof(float) * input_dim);
    buf.append(reinterpret_cast<const char*>(&labels[i]), sizeof(int32_t));
  }
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("open " + tmp);
  const char* p = buf.data();
  size_t n = buf.size();
  absl::Status st;
  while (n > 0 && st.ok()) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno != EINTR) st = IoError("write " + tmp);
      continue;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  if (st.ok() && ::fsync(fd) != 0) st = IoError("fsync " + tmp);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = IoError("rename " + tmp);
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

absl::StatusOr<std::vector<std::string>> WriteSyntheticShards(
    const std::string& dir, const TrainConfig& config, uint64_t count,
    uint64_t per_file) {
  if (per_file == 0) per_file = count;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoError("mkdir " + dir);
  }
  SyntheticData data(config);
  std::vector<std::string> paths;
  std::vector<float> x;
  std::vector<int32_t> labels;
  for (uint64_t first = 0, file = 0; first < count; first += per_file, ++file) {
    const uint64_t n = std::min(per_file, count - first);
    x.resize(n * config.input_dim);
    labels.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      data.Sample(first + i, &x[i * config.input_dim], &labels[i]);
    }
    std::string path = absl::StrFormat("%s/shard-%05d.xls", dir, file);
    absl::Status st = WriteShard(path, config.input_dim, config.classes,
                                 x.data(), labels.data(), n);
    if (!st.ok()) return st;
    paths.push_back(std::move(path));
  }
  return paths;
}

ShardReader::ShardReader(const TrainConfig& config, int rank, int world,
                         int64_t step, int depth)
    : config_(config),
      rank_(rank),
      world_(world),
      depth_(std::max(1, depth)),
      next_read_step_(step) {}

absl::StatusOr<std::unique_ptr<ShardReader>> ShardReader::Open(
    const std::string& pattern, const TrainConfig& config, int rank, int world,
    int64_t first_step, int depth) {
  std::unique_ptr<ShardReader> r(
      new ShardReader(config, rank, world, first_step, depth));
  glob_t g;
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.push_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (paths.empty()) {
    return absl::NotFoundError(
        absl::StrCat("train.data.shards: no file matches \"", pattern, "\""));
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& path : paths) {
    File f;
    f.path = path;
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) return IoError("open " + path);
    r->files_.push_back(f);  // owned from here on, closed by ~ShardReader
    char h[kShardHeaderBytes];
    if (absl::Status st = PreadAll(f.fd, h, sizeof(h), 0, path); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", path, ": short header"));
    }
    uint32_t input_dim, classes;
    uint64_t count;
    std::memcpy(&input_dim, h + 4, 4);
    std::memcpy(&classes, h + 8, 4);
    std::memcpy(&count, h + 12, 8);
    if (std::memcmp(h, kShardMagic, 4) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", path, ": not an XLS1 shard"));
    }
    if (input_dim != static_cast<uint32_t>(config.input_dim) ||
        classes != static_cast<uint32_t>(config.classes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", path, ": input_dim ", input_dim, " classes ",
                       classes, ", but train.input_dim is ", config.input_dim,
                       " and train.classes ", config.classes));
    }
    struct stat sb;
    const uint64_t rec = (static_cast<uint64_t>(input_dim) + 1) * 4;
    if (::fstat(f.fd, &sb) != 0 ||
        static_cast<uint64_t>(sb.st_size) < kShardHeaderBytes + count * rec) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard ", path, ": shorter than its ", count, " records"));
    }
    r->files_.back().first = r->total_;
    r->files_.back().count = count;
    r->total_ += count;
  }
  if (r->total_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train.data.shards: \"", pattern, "\" holds no samples"));
  }
  r->thread_ = std::thread([raw = r.get()] { raw->Run(); });
  return r;
}

ShardReader::~ShardReader() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  for (File& f : files_) {
    if (f.fd >= 0) ::close(f.fd);
  }
}

absl::Status ShardReader::ReadBatch(int64_t step, Batch* out) {
  const int d = config_.input_dim;
  const uint64_t b = config_.StepBatch();
  const uint64_t rec = (static_cast<uint64_t>(d) + 1) * 4;
  out->x.resize(b * d);
  out->labels.resize(b);
  const uint64_t g = static_cast<uint64_t>(step) * world_ + rank_;
  std::vector<char> buf;
  uint64_t done = 0;
  while (done < b) {
    const uint64_t n = (g * b + done) % total_;
    auto it =
        std::upper_bound(files_.begin(), files_.end(), n,
                         [](uint64_t v, const File& f) { return v < f.first; });
    const File& f = *(it - 1);
    const uint64_t local = n - f.first;
    const uint64_t k = std::min(b - done, f.count - local);
    buf.resize(k * rec);
    absl::Status st = PreadAll(f.fd, buf.data(), buf.size(),
                               kShardHeaderBytes + local * rec, f.path);
    if (!st.ok()) return st;
    for (uint64_t i = 0; i < k; ++i) {
      const char* r = buf.data() + i * rec;
      std::memcpy(&out->x[(done + i) * d], r, sizeof(float) * d);
      int32_t label;
      std::memcpy(&label, r + sizeof(float) * d, 4);
      if (label < 0 || label >= config_.classes) {
        return absl::DataLossError(absl::StrCat("shard ", f.path, " record ",
                                                local + i, ": label ", label,
                                                " out of range"));
      }
      out->labels[done + i] = label;
    }
    done += k;
  }
  return absl::OkStatus();
}

void ShardReader::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || static_cast<int>(queue_.size()) < depth_;
      };
      mu_.Await(absl::Condition(&room));
      if (stop_) return;
    }
    Batch batch;
    absl::Status st = ReadBatch(next_read_step_++, &batch);
    absl::MutexLock lock(&mu_);
    if (!st.ok()) {
      error_ = st;
      return;
    }
    queue_.push_back(std::move(batch));
  }
}

absl::Status ShardReader::Next(float* x, int32_t* labels) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || !error_.ok();
  };
  mu_.Await(absl::Condition(&ready));
  if (queue_.empty()) return error_;
  Batch& b = queue_.front();
  std::memcpy(x, b.x.data(), b.x.size() * sizeof(float));
  std::memcpy(labels, b.labels.data(), b.labels.size() * sizeof(int32_t));
  queue_.pop_front();
  return absl::OkStatus();
}

}  // namespace xl::worker
