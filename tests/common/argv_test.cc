#include "common/argv.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace xl {
namespace {

std::vector<std::string> Hidden(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  HideArgumentValues(static_cast<int>(argv.size()), argv.data(),
                     {"--token", "--join-token"});
  return args;
}

TEST(HideArgumentValuesTest, OverwritesTheValuesOfTheNamedFlagsOnly) {
  EXPECT_EQ(Hidden({"xlctl", "--token", "xl_secret", "get", "7"}),
            (std::vector<std::string>{"xlctl", "--token", "xxxxxxxxx", "get",
                                      "7"}));
  EXPECT_EQ(Hidden({"xl-agent", "--join-token=abc", "--name", "n1"}),
            (std::vector<std::string>{"xl-agent", "--join-token=xxx",
                                      "--name", "n1"}));
  // Another flag that starts alike, a flag with no value, and what
  // follows "--" (the job's own command) stay.
  EXPECT_EQ(Hidden({"xlctl", "--tokens", "a", "--token"}),
            (std::vector<std::string>{"xlctl", "--tokens", "a", "--token"}));
  EXPECT_EQ(Hidden({"xlctl", "submit", "--", "prog", "--token", "mine"}),
            (std::vector<std::string>{"xlctl", "submit", "--", "prog",
                                      "--token", "mine"}));
}

}  // namespace
}  // namespace xl
