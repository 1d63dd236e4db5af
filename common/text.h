// Text that other people's terminals will show: finding the control
// characters that must not be in names, labels and inventories. Pure;
// thread-safe.
#ifndef XL_COMMON_TEXT_H_
#define XL_COMMON_TEXT_H_

#include <google/protobuf/message.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace xl {

// The byte offset of the first C0 control character, DEL or C1 control
// (U+0080..U+009F, as UTF-8) in `s`; npos if none.
size_t FindControlCharacter(absl::string_view s);

// INVALID_ARGUMENT naming the first string field (as "<path>.gpus[2].model",
// map keys and values included) of `message` that holds a control
// character; OK if none does.
absl::Status CheckNoControlCharacters(const google::protobuf::Message& message,
                                      const std::string& path);

}  // namespace xl

#endif  // XL_COMMON_TEXT_H_
