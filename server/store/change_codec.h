// The changes of one store transaction (changes.h) as bytes and back: the
// entry a replicated log carries (proto/xl/replica/v1/log.proto). Decoding
// bytes from a peer or a disk checks what it reads: a batch that does not
// parse or is over 2 GiB is refused DATA_LOSS; one of a format, or with a
// kind of change, this release does not know, FAILED_PRECONDITION; either
// gives nothing. Encoding is deterministic (maps in key order): the same
// changes give the same bytes on every replica.
// What a write gives back (AppendLog's seq, TrimOutput's counts) is not
// carried: each replica's write sets it in its own database.
//
// Free functions; thread-safe.
#ifndef XL_SERVER_STORE_CHANGE_CODEC_H_
#define XL_SERVER_STORE_CHANGE_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/store/changes.h"

namespace xl::store {

inline constexpr uint32_t kChangeBatchFormat = 1;

// RESOURCE_EXHAUSTED for a batch over 2 GiB.
absl::StatusOr<std::string> EncodeChanges(const Changes& changes);

absl::StatusOr<Changes> DecodeChanges(absl::string_view bytes);

}  // namespace xl::store

#endif  // XL_SERVER_STORE_CHANGE_CODEC_H_
