// GlooCollective: Gloo TCP + our Rendezvous as its Store, pairs in Gloo's
// synchronous mode, a segmented ring in the caller's thread. Gloo reports
// errors by exceptions; every call here catches them and returns UNAVAILABLE
// with the rank and host. One caller thread per instance.
//
// Why not gloo::allreduce: with the asynchronous pairs every message goes
// through Gloo's device thread and, for its unbound buffers, waits for a
// "ready to receive" notice from the peer first; on loopback that costs
// 0.3-0.7 ms per message, which made a 1 MiB all-reduce 2.7x slower than
// Open MPI over the same TCP (tests/bench/allreduce_bench.py).
//
// Deadlock freedom: every rank writes a segment to its right neighbour
// before it reads one from its left, and a synchronous write blocks until
// the kernel has taken it. That cannot wedge the ring as long as a link
// holds two unread segments, so segments are at most half of what the
// socket buffers take: Gloo sizes SO_SNDBUF to the largest message sent,
// which Create() makes 4 MiB (capped by net.core.wmem_max) with a first
// exchange ordered so that it cannot block.
#include "agent/worker/comm/gloo_collective.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <stdexcept>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace xl::worker {
namespace {

// gloo::rendezvous::Store over Rendezvous. Store has no error returns, so
// failures are thrown and turned back into a Status by Create().
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  RendezvousStore(Rendezvous* rdv, std::string prefix, absl::Duration timeout)
      : rdv_(rdv), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status st =
        rdv_->Put(prefix_ + key, std::string(data.begin(), data.end()));
    if (!st.ok()) throw std::runtime_error(std::string(st.message()));
  }

  std::vector<char> get(const std::string& key) override {
    auto v = rdv_->Get({prefix_ + key}, timeout_);
    if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
    return std::vector<char>((*v)[0].begin(), (*v)[0].end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    auto v = rdv_->Get(full, absl::Milliseconds(timeout.count()));
    if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
  }

 private:
  Rendezvous* rdv_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

// Measured on loopback: segments of 64-127 KiB run at the best rate, and
// from 128 KiB the write of each segment takes twice as long (a larger
// default receive buffer did not change that; the cause is not pinned down).
constexpr size_t kMaxSegmentBytes = 120 << 10;
// The first message: sets each link's SO_SNDBUF (Gloo sizes it to the
// largest message sent, capped by net.core.wmem_max).
constexpr size_t kWarmupBytes = 4 << 20;

// This rank's segment size: at most half the send buffer the kernel grants
// (twice min(requested, net.core.wmem_max)), see the deadlock note above.
// The ranks then agree on the smallest (Create), since both ends of a link
// must cut the data the same way.
size_t LocalSegmentFloats(size_t asked_bytes) {
  size_t wmem_max = 212992;  // Linux's default
  std::ifstream f("/proc/sys/net/core/wmem_max");
  if (f) f >> wmem_max;
  size_t bytes = std::clamp<size_t>(wmem_max / 2, 4096, kMaxSegmentBytes);
  if (asked_bytes > 0) bytes = std::min(bytes, std::max<size_t>(asked_bytes, 4));
  return bytes / sizeof(float);
}

// The descriptor of a connected Gloo TCP pair, found by the pair's local
// address among this process's sockets (Gloo keeps it private); -1 when not
// found. Used only to poll for readability, never to read or write.
int PairSocket(gloo::transport::Pair* pair) {
  const auto* tcp =
      dynamic_cast<const gloo::transport::tcp::Address*>(&pair->address());
  if (tcp == nullptr) return -1;
  const sockaddr_storage& want = tcp->getSockaddr();
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1, matches = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    sockaddr_storage got{};
    socklen_t len = sizeof(got);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len) != 0 ||
        got.ss_family != want.ss_family) {
      continue;
    }
    bool same = false;
    if (got.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&got);
      const auto* b = reinterpret_cast<const sockaddr_in*>(&want);
      same = a->sin_port == b->sin_port &&
             a->sin_addr.s_addr == b->sin_addr.s_addr;
    } else if (got.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&got);
      const auto* b = reinterpret_cast<const sockaddr_in6*>(&want);
      same = a->sin6_port == b->sin6_port &&
             std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(in6_addr)) == 0;
    }
    sockaddr_storage peer{};
    socklen_t plen = sizeof(peer);
    if (same && getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) == 0) {
      found = fd;
      ++matches;
    }
  }
  closedir(dir);
  // Two connected sockets may share a local port (different peers): then
  // polling is skipped rather than done on the wrong one.
  return matches == 1 ? found : -1;
}

// Waits, for at most kSpin, until `fd` has bytes to read, yielding the core
// between looks: a peer that is a few microseconds behind is met without a
// sleep and wake-up, and a rank sharing its core with the peer it waits for
// hands the core over (Open MPI's progress loop does the same). After kSpin
// the caller's blocking read sleeps.
void SpinUntilReadable(int fd) {
  constexpr auto kSpin = std::chrono::microseconds(500);
  if (fd < 0) return;
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 0) == 0 && std::chrono::steady_clock::now() < deadline) {
    sched_yield();
  }
}

std::string DefaultHost() {
  for (const char* var : {"XL_NODE_ADDRESS", "MASTER_ADDR"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return v;
  }
  return "127.0.0.1";
}

}  // namespace

// One ring step over elements: segments of [sb, se) go right through
// `out` (to the same offset when in_place, else to the peer's segment
// buffer), segments of [rb, re) arrive from the left through `in`, and
// on_recv(offset, count) runs after each arrives. Sends run one segment
// ahead of receives, so the right neighbour reads the next segment while
// this rank is still reducing the last one.
template <typename OnRecv>
void RingStep(gloo::transport::Buffer* out, size_t sb, size_t se,
              bool in_place, gloo::transport::Buffer* in, size_t rb,
              size_t re, size_t seg, int left_fd, OnRecv on_recv) {
  auto send = [&](size_t k) {
    const size_t o = sb + k * seg;
    if (o >= se) return;
    const size_t off = o * sizeof(float);
    out->send(off, std::min(seg, se - o) * sizeof(float), in_place ? off : 0);
  };
  const size_t sends = (se - sb + seg - 1) / seg;
  const size_t recvs = (re - rb + seg - 1) / seg;
  send(0);
  for (size_t k = 0; k < std::max(sends, recvs); ++k) {
    send(k + 1);
    if (k < recvs) {
      const size_t o = rb + k * seg;
      SpinUntilReadable(left_fd);
      in->waitRecv();
      on_recv(o, std::min(seg, re - o));
    }
  }
}

GlooCollective::GlooCollective(int rank, int size, std::string host,
                               absl::Duration timeout)
    : rank_(rank), size_(size), host_(std::move(host)), timeout_(timeout) {}

GlooCollective::~GlooCollective() = default;

absl::StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Create(
    int rank, int size, Rendezvous* rendezvous, const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " of world ", size));
  }
  std::string host =
      options.hostname.empty() ? DefaultHost() : options.hostname;
  std::unique_ptr<GlooCollective> c(
      new GlooCollective(rank, size, host, options.timeout));
  if (size == 1) return c;
  // Gloo writes with writev, so a peer that vanishes mid-collective would
  // kill this process with SIGPIPE; ignored, it is an EPIPE error naming the
  // rank and host. A handler the program installed is left alone.
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(
        std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout)));
    RendezvousStore store(rendezvous, options.key_prefix, options.timeout);
    ctx->connectFullMesh(store, device);
    c->context_ = std::move(ctx);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "gloo: rank ", rank, " at ", host, " could not connect to its ",
        size - 1, " peers: ", e.what()));
  }
  try {
    for (int p = 0; p < size; ++p) {
      if (p != rank) c->context_->getPair(p)->setSync(true, false);
    }
    c->left_fd_ =
        PairSocket(c->context_->getPair((rank + size - 1) % size).get());
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "gloo: rank ", rank, " at ", host, " could not set up its pairs: ",
        e.what()));
  }
  // The segment size every rank proposes; all use the smallest.
  {
    const std::string key = absl::StrCat(options.key_prefix, "segment/");
    absl::Status st = rendezvous->Put(
        absl::StrCat(key, rank), absl::StrCat(LocalSegmentFloats(options.segment_bytes)));
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(absl::StrCat(key, r));
    absl::StatusOr<std::vector<std::string>> all =
        st.ok() ? rendezvous->Get(keys, options.timeout)
                : absl::StatusOr<std::vector<std::string>>(st);
    if (!all.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "gloo: rank ", rank, " at ", host,
          " could not agree on a segment size with its peers: ",
          all.status().message()));
    }
    size_t seg = 0;
    for (const std::string& v : *all) {
      size_t floats = 0;
      if (!absl::SimpleAtoi(v, &floats) || floats == 0) {
        return absl::InternalError(
            absl::StrCat("gloo: a peer proposed segment size '", v, "'"));
      }
      seg = seg == 0 ? floats : std::min(seg, floats);
    }
    c->scratch_.resize(seg);
  }
  try {
    // First exchange around the ring: grows each link's send buffer (see
    // above) and proves the ring carries data. Odd ranks read first, so at
    // least one rank is always reading and no write can block for good.
    std::vector<char> out(kWarmupBytes), in(kWarmupBytes);
    const int slot = c->NextSlots();
    auto from_left =
        c->context_->getPair((rank + size - 1) % size)->createRecvBuffer(
            slot, in.data(), in.size());
    auto to_right = c->context_->getPair((rank + 1) % size)->createSendBuffer(
        slot, out.data(), out.size());
    if (rank % 2 == 1) from_left->waitRecv();
    to_right->send();
    if (rank % 2 == 0) from_left->waitRecv();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "gloo: rank ", rank, " at ", host,
        " connected but its first exchange around the ring failed: ",
        e.what()));
  }
  return c;
}

void GlooCollective::RingAllReduce(float* data, size_t count, float scale) {
  const int n = size_;
  auto& to_right = context_->getPair((rank_ + 1) % n);
  auto& from_left = context_->getPair((rank_ + n - 1) % n);
  const size_t bytes = count * sizeof(float);
  const size_t seg = scratch_.size();
  const int slot = NextSlots();
  // Reduce-scatter segments land in scratch_; all-gather ones in place.
  auto rs_in = from_left->createRecvBuffer(slot, scratch_.data(),
                                           seg * sizeof(float));
  auto ag_in = from_left->createRecvBuffer(slot + 1, data, bytes);
  auto rs_out = to_right->createSendBuffer(slot, data, bytes);
  auto ag_out = to_right->createSendBuffer(slot + 1, data, bytes);
  // Chunk c is [begin(c), begin(c + 1)); every rank computes the same split,
  // so empty chunks (count < n) are skipped on both ends of a link.
  auto begin = [&](int c) { return count * static_cast<size_t>(c) / n; };
  // Reduce-scatter: at step s send chunk rank-s, add chunk rank-s-1 from
  // the left into ours; after n-1 steps chunk rank+1 holds the full sum,
  // scaled here once.
  for (int s = 0; s < n - 1; ++s) {
    const int sc = (rank_ - s + n) % n;
    const int rc = (rank_ - s - 1 + 2 * n) % n;
    const bool last = s == n - 2;
    RingStep(rs_out.get(), begin(sc), begin(sc + 1), /*in_place=*/false,
             rs_in.get(), begin(rc), begin(rc + 1), seg, left_fd_,
             [&](size_t off, size_t len) {
               float* d = data + off;
               const float* in = scratch_.data();
               if (last) {
                 for (size_t i = 0; i < len; ++i) d[i] = (d[i] + in[i]) * scale;
               } else {
                 for (size_t i = 0; i < len; ++i) d[i] += in[i];
               }
             });
  }
  // All-gather: pass each finished chunk on, straight into place.
  for (int s = 0; s < n - 1; ++s) {
    const int sc = (rank_ + 1 - s + n) % n;
    const int rc = (rank_ - s + n) % n;
    RingStep(ag_out.get(), begin(sc), begin(sc + 1), /*in_place=*/true,
             ag_in.get(), begin(rc), begin(rc + 1), seg, left_fd_,
             [](size_t, size_t) {});
  }
}

absl::Status GlooCollective::Fail(const std::string& what,
                                  const std::exception& e) {
  broken_ = absl::UnavailableError(absl::StrCat(
      "gloo ", what, " on rank ", rank_, " (", host_, ") of ", size_, ": ",
      e.what(),
      " (a peer died or is unreachable, or the ranks did not all call the "
      "same collectives with the same sizes)"));
  return broken_;
}

absl::Status GlooCollective::AllReduceMean(float* data, size_t count) {
  if (!broken_.ok()) return broken_;
  if (size_ == 1 || count == 0) return absl::OkStatus();
  try {
    RingAllReduce(data, count, 1.0f / static_cast<float>(size_));
  } catch (const std::exception& e) {
    return Fail("all-reduce", e);
  }
  return absl::OkStatus();
}

absl::Status GlooCollective::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root));
  }
  if (!broken_.ok()) return broken_;
  if (size_ == 1 || count == 0) return absl::OkStatus();
  try {
    const size_t bytes = count * sizeof(float);
    const int slot = NextSlots();
    if (rank_ == root) {
      // Each peer only reads here, so the blocking writes always drain.
      for (int p = 0; p < size_; ++p) {
        if (p == root) continue;
        context_->getPair(p)->createSendBuffer(slot, data, bytes)->send();
      }
    } else {
      context_->getPair(root)->createRecvBuffer(slot, data, bytes)->waitRecv();
    }
  } catch (const std::exception& e) {
    return Fail(absl::StrCat("broadcast from rank ", root), e);
  }
  return absl::OkStatus();
}

absl::Status GlooCollective::Barrier() {
  if (!broken_.ok()) return broken_;
  if (size_ == 1) return absl::OkStatus();
  // A one-element ring all-reduce: no rank gets the sum before every rank
  // has added to it.
  float token = 0;
  try {
    RingAllReduce(&token, 1, 1.0f);
  } catch (const std::exception& e) {
    return Fail("barrier", e);
  }
  return absl::OkStatus();
}

}  // namespace xl::worker
