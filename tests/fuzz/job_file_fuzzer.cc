// Fuzzes the job-file parser of xlctl: LoadJobFile (YAML/JSON file to
// JobSpec), then ApplyOverrides and ParseDurationFlag through BuildJobSpec.
// The input is the job file, optionally followed by override sections, each
// after a line "%%" and written "flag=value" (name, queue, priority, nodes,
// ranks_per_node, gpus_per_node, max_retries, time_limit, env, working_dir,
// command; env and command may repeat).
// Properties: every error is INVALID_ARGUMENT; an accepted spec has a
// command or a train section and an absolute working directory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "client/job_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void ApplyLine(const std::string& line, xl::client::JobOverrides* o) {
  size_t eq = line.find('=');
  if (eq == std::string::npos) return;
  const std::string flag = line.substr(0, eq);
  const std::string value = line.substr(eq + 1);
  int32_t n = 0;
  const bool is_int = absl::SimpleAtoi(value, &n);
  if (flag == "name") o->name = value;
  if (flag == "queue") o->queue = value;
  if (flag == "priority" && is_int) o->priority = n;
  if (flag == "nodes" && is_int) o->nodes = n;
  if (flag == "ranks_per_node" && is_int) o->ranks_per_node = n;
  if (flag == "gpus_per_node" && is_int) o->gpus_per_node = n;
  if (flag == "max_retries" && is_int) o->max_retries = n;
  if (flag == "time_limit") o->time_limit = value;
  if (flag == "env") o->env.push_back(value);
  if (flag == "working_dir") o->working_dir = value;
  if (flag == "command") o->command.push_back(value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts = xl::fuzz::Split(input, "\n%%\n");
  const std::string path = xl::fuzz::TempDir() + "/job.yaml";
  xl::fuzz::WriteFile(path, parts[0]);

  xl::client::JobOverrides overrides;
  for (size_t i = 1; i < parts.size(); ++i) {
    for (const std::string& line : xl::fuzz::Split(parts[i], "\n")) {
      ApplyLine(line, &overrides);
    }
  }

  auto spec = xl::client::BuildJobSpec(path, overrides);
  if (!spec.ok()) {
    XL_FUZZ_CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument,
                  spec.status().ToString());
    XL_FUZZ_CHECK(!spec.status().message().empty(), "an error says nothing");
    return 0;
  }
  XL_FUZZ_CHECK(spec->command_size() > 0 || spec->has_train(),
                spec->DebugString());
  XL_FUZZ_CHECK(spec->working_dir().empty() || spec->working_dir()[0] == '/',
                spec->working_dir());

  if (overrides.time_limit) {
    auto d = xl::client::ParseDurationFlag("--time-limit", *overrides.time_limit);
    XL_FUZZ_CHECK(d.ok(), "BuildJobSpec took a time limit ParseDurationFlag refuses");
    XL_FUZZ_CHECK(*d >= absl::ZeroDuration(), *overrides.time_limit);
  }
  return 0;
}
