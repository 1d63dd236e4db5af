// Fuzzes the decoding of the replicated log's entries (store/change_codec.h):
// bytes from a peer or a damaged disk. Properties: decoding never crashes;
// a refusal is DATA_LOSS or FAILED_PRECONDITION; what decodes encodes again
// to bytes that decode to the same kinds of change, in the same order, and
// encode to the same bytes again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/store/change_codec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto changes = xl::store::DecodeChanges(bytes);
  if (!changes.ok()) {
    const absl::StatusCode code = changes.status().code();
    XL_FUZZ_CHECK(code == absl::StatusCode::kDataLoss ||
                      code == absl::StatusCode::kFailedPrecondition,
                  changes.status().ToString());
    return 0;
  }
  auto encoded = xl::store::EncodeChanges(*changes);
  XL_FUZZ_CHECK(encoded.ok(), encoded.status().ToString());
  auto again = xl::store::DecodeChanges(*encoded);
  XL_FUZZ_CHECK(again.ok(), again.status().ToString());
  auto bytes_again = xl::store::EncodeChanges(*again);
  XL_FUZZ_CHECK(bytes_again.ok() && *bytes_again == *encoded,
                "encoding is not deterministic");
  XL_FUZZ_CHECK(again->size() == changes->size(), "a change lost");
  for (size_t i = 0; i < changes->size(); ++i) {
    XL_FUZZ_CHECK((*again)[i].index() == (*changes)[i].index(),
                  "a change changed kind");
  }
  return 0;
}
