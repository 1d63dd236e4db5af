#include "server/store/changes.h"

#include "common/status.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace xl::store {
namespace {

// One overload per kind of change: a new kind that is not written here does
// not compile (std::visit needs them all).
struct Writer {
  Tx& tx;

  absl::Status operator()(const change::PutJob& c) { return tx.PutJob(*c.job); }
  absl::Status operator()(const change::AddEvent& c) {
    return tx.AddEvent(c.event);
  }
  absl::Status operator()(const change::PutRankExit& c) {
    return tx.PutRankExit(c.job_id, c.attempt, c.exit);
  }
  absl::Status operator()(const change::PutToken& c) {
    return tx.PutToken(c.job_id, c.token);
  }
  absl::Status operator()(const change::PutNode& c) { return tx.PutNode(c.node); }
  absl::Status operator()(const change::PutHold& c) { return tx.PutHold(c.hold); }
  absl::Status operator()(const change::DeleteHold& c) {
    return tx.DeleteHold(c.node, c.job_id, c.attempt);
  }
  absl::Status operator()(const change::AppendLog& c) {
    return tx.AppendLog(c.chunk.get());
  }
  absl::Status operator()(const change::AppendMetrics& c) {
    return tx.AppendMetrics(*c.point);
  }
  absl::Status operator()(const change::TrimOutput& c) {
    ASSIGN_OR_RETURN(Tx::Trimmed trimmed, tx.TrimOutput(c.job_id, c.bytes));
    if (c.trimmed) *c.trimmed = trimmed;
    return absl::OkStatus();
  }
  absl::Status operator()(const change::DeleteLogs& c) {
    return tx.DeleteLogs(c.job_id);
  }
  absl::Status operator()(const change::DeleteJob& c) {
    return tx.DeleteJob(c.job_id);
  }
  absl::Status operator()(const change::PutQueue& c) {
    return tx.PutQueue(c.queue);
  }
  absl::Status operator()(const change::DeleteQueue& c) {
    return tx.DeleteQueue(c.name);
  }
  absl::Status operator()(const change::AddQueueChange& c) {
    return tx.AddQueueChange(c.change);
  }
  absl::Status operator()(const change::PutUsage& c) {
    return tx.PutUsage(c.usage);
  }
  absl::Status operator()(const change::PutAuthToken& c) {
    return tx.PutAuthToken(c.token);
  }
};

}  // namespace

std::string DeterministicBytes(const google::protobuf::MessageLite& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  return out;
}

void Store::WriteChanges(std::shared_ptr<const ChangeBatch> batch,
                         DoneFn done) {
  Write(
      [batch = std::move(batch)](Tx& tx) {
        return store::WriteChanges(batch->changes, tx);
      },
      std::move(done));
}

absl::Status WriteChanges(const Changes& changes, Tx& tx) {
  Writer writer{tx};
  for (const Change& c : changes) RETURN_IF_ERROR(std::visit(writer, c));
  return absl::OkStatus();
}

}  // namespace xl::store
