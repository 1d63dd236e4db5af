#include "server/store/change_codec.h"

#include <climits>
#include <limits>
#include <memory>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "xl/replica/v1/log.pb.h"

namespace xl::store {
namespace {

namespace pb = ::xl::replica::v1;

// A new kind of change that is not encoded here does not compile.
static_assert(std::variant_size_v<Change> == 17,
              "a new kind of change: encode and decode it here, and give "
              "it a field of its own in log.proto");

struct Encoder {
  pb::Change* out;

  void operator()(const change::PutJob& c) { *out->mutable_put_job() = *c.job; }
  void operator()(const change::AddEvent& c) {
    *out->mutable_add_event() = c.event;
  }
  void operator()(const change::PutRankExit& c) {
    pb::PutRankExit* e = out->mutable_put_rank_exit();
    e->set_job_id(c.job_id);
    e->set_attempt(c.attempt);
    *e->mutable_exit() = c.exit;
  }
  void operator()(const change::PutToken& c) {
    out->mutable_put_token()->set_job_id(c.job_id);
    out->mutable_put_token()->set_token(c.token);
  }
  void operator()(const change::PutNode& c) {
    pb::StoredNode* n = out->mutable_put_node();
    n->set_name(c.node.name);
    *n->mutable_inventory() = c.node.inventory;
    n->set_drained(c.node.drained);
    n->set_state_reason(c.node.state_reason);
    n->set_register_time_us(absl::ToUnixMicros(c.node.register_time));
  }
  void operator()(const change::PutHold& c) {
    pb::StoredHold* h = out->mutable_put_hold();
    h->set_job_id(c.hold.job_id);
    h->set_attempt(c.hold.attempt);
    *h->mutable_allocation() = c.hold.allocation;
  }
  void operator()(const change::DeleteHold& c) {
    pb::DeleteHold* d = out->mutable_delete_hold();
    d->set_node(c.node);
    d->set_job_id(c.job_id);
    d->set_attempt(c.attempt);
  }
  void operator()(const change::AppendLog& c) {
    *out->mutable_append_log() = *c.chunk;
    out->mutable_append_log()->clear_seq();  // each replica's write sets it
  }
  void operator()(const change::AppendMetrics& c) {
    *out->mutable_append_metrics() = *c.point;
  }
  void operator()(const change::TrimOutput& c) {
    out->mutable_trim_output()->set_job_id(c.job_id);
    out->mutable_trim_output()->set_bytes(c.bytes);
  }
  void operator()(const change::DeleteLogs& c) {
    out->set_delete_logs(c.job_id);
  }
  void operator()(const change::DeleteJob& c) { out->set_delete_job(c.job_id); }
  void operator()(const change::PutQueue& c) {
    *out->mutable_put_queue() = c.queue;
  }
  void operator()(const change::DeleteQueue& c) {
    out->set_delete_queue(c.name);
  }
  void operator()(const change::AddQueueChange& c) {
    *out->mutable_add_queue_change() = c.change;
  }
  void operator()(const change::PutUsage& c) {
    pb::StoredUsage* u = out->mutable_put_usage();
    u->set_queue(c.usage.queue);
    u->set_user(c.usage.user);
    u->set_gpu_seconds(c.usage.gpu_seconds);
    u->set_as_of_us(absl::ToUnixMicros(c.usage.as_of));
  }
  void operator()(const change::PutAuthToken& c) {
    pb::StoredAuthToken* t = out->mutable_put_auth_token();
    t->set_id(c.token.id);
    t->set_kind(c.token.kind);
    t->set_user(c.token.user);
    t->set_admin(c.token.admin);
    t->set_hash(c.token.hash);
    t->set_created(c.token.created);
    t->set_expires(c.token.expires);
    t->set_revoked(c.token.revoked);
    t->set_used_by(c.token.used_by);
    t->set_groups(c.token.groups);
  }
};

// ToUnixMicros saturates the infinite times at the ends of int64: read
// back as what they were.
absl::Time FromMicros(int64_t us) {
  if (us == std::numeric_limits<int64_t>::min()) return absl::InfinitePast();
  if (us == std::numeric_limits<int64_t>::max()) return absl::InfiniteFuture();
  return absl::FromUnixMicros(us);
}

absl::StatusOr<Change> Decode(pb::Change* c, int i) {
  switch (c->change_case()) {
    case pb::Change::kPutJob:
      return change::PutJob{
          std::make_shared<const v1::Job>(std::move(*c->mutable_put_job()))};
    case pb::Change::kAddEvent:
      return change::AddEvent{std::move(*c->mutable_add_event())};
    case pb::Change::kPutRankExit: {
      pb::PutRankExit* e = c->mutable_put_rank_exit();
      return change::PutRankExit{e->job_id(), e->attempt(),
                                 std::move(*e->mutable_exit())};
    }
    case pb::Change::kPutToken:
      return change::PutToken{
          c->put_token().job_id(),
          std::move(*c->mutable_put_token()->mutable_token())};
    case pb::Change::kPutNode: {
      pb::StoredNode* n = c->mutable_put_node();
      StoredNode node;
      node.name = std::move(*n->mutable_name());
      node.inventory = std::move(*n->mutable_inventory());
      node.drained = n->drained();
      node.state_reason = std::move(*n->mutable_state_reason());
      node.register_time = FromMicros(n->register_time_us());
      return change::PutNode{std::move(node)};
    }
    case pb::Change::kPutHold: {
      pb::StoredHold* h = c->mutable_put_hold();
      StoredHold hold;
      hold.job_id = h->job_id();
      hold.attempt = h->attempt();
      hold.allocation = std::move(*h->mutable_allocation());
      return change::PutHold{std::move(hold)};
    }
    case pb::Change::kDeleteHold: {
      pb::DeleteHold* d = c->mutable_delete_hold();
      return change::DeleteHold{std::move(*d->mutable_node()), d->job_id(),
                                d->attempt()};
    }
    case pb::Change::kAppendLog:
      return change::AppendLog{
          std::make_shared<v1::LogChunk>(std::move(*c->mutable_append_log()))};
    case pb::Change::kAppendMetrics:
      return change::AppendMetrics{std::make_shared<const v1::TrainMetrics>(
          std::move(*c->mutable_append_metrics()))};
    case pb::Change::kTrimOutput:
      return change::TrimOutput{c->trim_output().job_id(),
                                c->trim_output().bytes(), nullptr};
    case pb::Change::kDeleteLogs:
      return change::DeleteLogs{c->delete_logs()};
    case pb::Change::kDeleteJob:
      return change::DeleteJob{c->delete_job()};
    case pb::Change::kPutQueue:
      return change::PutQueue{std::move(*c->mutable_put_queue())};
    case pb::Change::kDeleteQueue:
      return change::DeleteQueue{std::move(*c->mutable_delete_queue())};
    case pb::Change::kAddQueueChange:
      return change::AddQueueChange{std::move(*c->mutable_add_queue_change())};
    case pb::Change::kPutUsage: {
      pb::StoredUsage* u = c->mutable_put_usage();
      StoredUsage usage;
      usage.queue = std::move(*u->mutable_queue());
      usage.user = std::move(*u->mutable_user());
      usage.gpu_seconds = u->gpu_seconds();
      usage.as_of = FromMicros(u->as_of_us());
      return change::PutUsage{std::move(usage)};
    }
    case pb::Change::kPutAuthToken: {
      pb::StoredAuthToken* t = c->mutable_put_auth_token();
      StoredAuthToken token;
      token.id = std::move(*t->mutable_id());
      token.kind = std::move(*t->mutable_kind());
      token.user = std::move(*t->mutable_user());
      token.admin = t->admin();
      token.hash = std::move(*t->mutable_hash());
      token.created = t->created();
      token.expires = t->expires();
      token.revoked = t->revoked();
      token.used_by = std::move(*t->mutable_used_by());
      token.groups = std::move(*t->mutable_groups());
      return change::PutAuthToken{std::move(token)};
    }
    case pb::Change::CHANGE_NOT_SET:
      break;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "change batch: change ", i,
      " is of no kind this scheduler knows (written by a newer release?); "
      "run the same release on every replica"));
}

}  // namespace

absl::StatusOr<std::string> EncodeChanges(const Changes& changes) {
  pb::ChangeBatch batch;
  batch.set_format(kChangeBatchFormat);
  for (const Change& c : changes) {
    std::visit(Encoder{batch.add_changes()}, c);
  }
  const size_t size = batch.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "change batch: ", size,
        " bytes, over the 2 GiB a batch may have; write in smaller steps"));
  }
  // Maps (a job's env, a node's labels) in key order: every replica gets
  // the same bytes.
  return DeterministicBytes(batch);
}

absl::StatusOr<Changes> DecodeChanges(absl::string_view bytes) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::DataLossError(absl::StrCat(
        "change batch: ", bytes.size(),
        " bytes, over the 2 GiB a batch may have; the log is damaged"));
  }
  pb::ChangeBatch batch;
  if (!batch.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError(absl::StrCat(
        "change batch: ", bytes.size(),
        " bytes that do not parse; the replicated log or the peer that sent "
        "them is damaged"));
  }
  if (batch.format() != kChangeBatchFormat) {
    return absl::FailedPreconditionError(absl::StrCat(
        "change batch: format ", batch.format(), ", this scheduler reads ",
        kChangeBatchFormat, "; run the same release on every replica"));
  }
  Changes out;
  out.reserve(batch.changes_size());
  for (int i = 0; i < batch.changes_size(); ++i) {
    absl::StatusOr<Change> c = Decode(batch.mutable_changes(i), i);
    if (!c.ok()) return c.status();
    out.push_back(*std::move(c));
  }
  return out;
}

}  // namespace xl::store
