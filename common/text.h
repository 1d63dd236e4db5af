// Text that other people's terminals will show: escaping what must not
// reach a terminal (xlctl prints everything from the scheduler through
// Printable), and finding the control characters that must not be in
// names, labels and inventories. Pure; thread-safe.
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

// `text` made safe to print on a terminal: C0 control characters (newline
// included), DEL and the C1 controls U+0080..U+009F become visible escapes
// (\n, \t, \r, \e, \xNN, \u009b) and bytes that are not UTF-8 become \xNN;
// so do the characters that reorder or hide text (bidi overrides and
// isolates U+202A..U+202E, U+2066..U+2069, zero-width U+200B..U+200F, line
// and paragraph separators, U+FEFF); other UTF-8 passes unchanged. Escaping
// twice changes nothing. Job names, arguments, environment
// values and reasons come from other users: a table must never let them
// move the cursor, retitle the window or write the clipboard (OSC 52).
std::string Printable(absl::string_view text);

// INVALID_ARGUMENT naming the first string field (as "<path>.gpus[2].model",
// map keys and values included) of `message` that holds a control
// character; OK if none does.
absl::Status CheckNoControlCharacters(const google::protobuf::Message& message,
                                      const std::string& path);

}  // namespace xl

#endif  // XL_COMMON_TEXT_H_
