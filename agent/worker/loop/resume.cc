#include "agent/worker/loop/resume.h"

#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace xl::worker {
namespace {

// What every rank learns of rank 0's checkpoint before the state itself:
// found (0 or 1) and loss_scale as floats, then step, adam_t, good_steps
// and batch_per_rank as the bits of four int64 (a broadcast copies bytes,
// never does arithmetic, so they arrive exact at any size).
constexpr size_t kInts = 4;
constexpr size_t kWireFloats = 2 + kInts * sizeof(int64_t) / sizeof(float);

void Pack(const ResumePoint& p, float* wire) {
  wire[0] = p.found ? 1.0f : 0.0f;
  wire[1] = p.state.loss_scale;
  const int64_t ints[kInts] = {p.state.step, p.state.adam_t, p.state.good_steps,
                               p.state.batch_per_rank};
  std::memcpy(&wire[2], ints, sizeof(ints));
}

void Unpack(const float* wire, ResumePoint* p) {
  p->found = wire[0] == 1.0f;
  p->state.loss_scale = wire[1];
  int64_t ints[kInts];
  std::memcpy(ints, &wire[2], sizeof(ints));
  p->state.step = ints[0];
  p->state.adam_t = ints[1];
  p->state.good_steps = ints[2];
  p->state.batch_per_rank = static_cast<int32_t>(ints[3]);
}

// Whether any rank failed (`own_failed` on this one); the collective's
// error when the all-reduce fails.
absl::StatusOr<bool> AnyRankFailed(Collective* collective, bool own_failed) {
  float failed = own_failed ? 1.0f : 0.0f;
  if (collective != nullptr) {
    RETURN_IF_ERROR(collective->AllReduceMean(&failed, 1));
  }
  return failed > 0.0f;
}

}  // namespace

absl::Status AgreeAllOk(Collective* collective, const absl::Status& own,
                        absl::string_view what, absl::string_view fix) {
  absl::StatusOr<bool> any = AnyRankFailed(collective, !own.ok());
  // A failed rank's own error says more than the collective's.
  if (!own.ok()) return own;
  if (!any.ok()) return any.status();
  if (*any) {
    return absl::FailedPreconditionError(
        absl::StrCat("another rank failed ", what,
                     " (its own error says which and why); ", fix));
  }
  return absl::OkStatus();
}

absl::StatusOr<ResumePoint> AgreeResumePoint(Collective* collective,
                                             const std::string& dir,
                                             uint64_t fingerprint,
                                             int64_t count) {
  const int rank = collective != nullptr ? collective->rank() : 0;
  ResumePoint point;
  point.count = count;
  absl::Status read = absl::OkStatus();
  if (rank == 0 && !dir.empty()) {
    absl::StatusOr<LoadedCheckpoint> r =
        LoadNewestCheckpoint(dir, fingerprint, count);
    if (!r.ok()) {
      read = r.status();
    } else if (r->state.has_value()) {
      point.found = true;
      point.state = *std::move(r->state);
      point.path = r->path;
      std::printf("xl-train: resuming from %s (step %lld)\n",
                  point.path.c_str(), static_cast<long long>(point.state.step));
      std::fflush(stdout);
    }
  }
  // Rank 0 says even a failure, so that its peers end now naming it rather
  // than at the collective timeout.
  absl::StatusOr<bool> any = AnyRankFailed(collective, !read.ok());
  if (!read.ok()) return read;
  if (!any.ok()) return any.status();
  if (*any) {
    return absl::FailedPreconditionError(
        "rank 0 could not read the checkpoint directory (its error says "
        "why); fix checkpoint_dir or its mount");
  }
  float wire[kWireFloats];
  Pack(point, wire);
  if (collective != nullptr) {
    RETURN_IF_ERROR(collective->Broadcast(wire, kWireFloats, 0));
  }
  Unpack(wire, &point);
  return point;
}

absl::Status ShareResumeState(Collective* collective, ResumePoint* point,
                              std::vector<float>* params, std::vector<float>* m,
                              std::vector<float>* v) {
  if (!point->found) return absl::OkStatus();
  const int rank = collective != nullptr ? collective->rank() : 0;
  std::vector<float>* from[3] = {&point->state.params, &point->state.m,
                                 &point->state.v};
  std::vector<float>* to[3] = {params, m, v};
  for (int i = 0; i < 3; ++i) {
    if (rank == 0) {
      *to[i] = std::move(*from[i]);
      from[i]->clear();
    }
    // On rank 0 a no-op (ReadCheckpoint checked the count); elsewhere the
    // broadcast's destination, reusing the vector's memory.
    to[i]->resize(static_cast<size_t>(point->count));
    if (collective != nullptr) {
      RETURN_IF_ERROR(collective->Broadcast(to[i]->data(), point->count, 0));
    }
  }
  return absl::OkStatus();
}

}  // namespace xl::worker
