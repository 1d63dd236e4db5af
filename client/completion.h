// `xlctl completion bash|zsh`: shell completion scripts generated from the
// command line's own definition (CLI11's tree of subcommands and options),
// so they never drift from what xlctl accepts. zsh uses the bash function
// through bashcompinit. Pure: no I/O.
#ifndef XL_CLIENT_COMPLETION_H_
#define XL_CLIENT_COMPLETION_H_

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace xl::client {

// The completion script for `shell` ("bash" or "zsh"), for the program
// `app` describes.
std::string CompletionScript(const CLI::App& app, const std::string& shell);

}  // namespace xl::client

#endif  // XL_CLIENT_COMPLETION_H_
