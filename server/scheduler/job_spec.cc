#include "server/scheduler/job_spec.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/limits.h"
#include "common/text.h"
#include "common/train_spec.h"

namespace xl::scheduler {
namespace {

absl::Status Bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

bool ValidEnvName(const std::string& s) {
  if (s.empty() || absl::ascii_isdigit(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

constexpr int kMaxNodes = 4096;
constexpr int kMaxRanksPerNode = 1024;
constexpr int kMaxGpusPerNode = 64;

// The built-in worker: its spec is checked here (so a bad one changes no
// state) and handed to xl-train as JSON on its command line.
absl::Status CheckTrainSpec(v1::JobSpec* spec) {
  if (spec->command_size() > 0) {
    return Bad("command",
               "must be empty when train is set: xl runs its xl-train worker; "
               "drop command, or drop train to run your own program");
  }
  const v1::TrainSpec& t = spec->train();
  const v1::ResourceRequest& r = spec->resources();
  const bool on_cpu =
      t.device() == "cpu" || (t.device().empty() && r.gpus_per_node() == 0);
  // Every field's bounds are xl-train's own (common/train_spec.h).
  if (absl::Status st = train_spec::Check(t, on_cpu); !st.ok()) return st;
  if (t.batch_per_rank_auto() && on_cpu && r.memory_bytes_per_node() == 0) {
    return Bad("train.batch_per_rank",
               "auto on CPU sizes the batch from the job's memory, and "
               "resources.memory_bytes_per_node is not set; set it (the "
               "node's ranks share it), or give batch_per_rank a number");
  }
  // With a fixed batch and a fixed world, the micro-batches per step must
  // come out whole; an elastic job's world is known only at start.
  const int64_t rpn = r.ranks_per_node() > 0   ? r.ranks_per_node()
                      : r.gpus_per_node() > 0 ? r.gpus_per_node()
                                              : 1;
  const int64_t world = std::max(1, r.nodes()) * rpn;
  if (t.global_batch() > 0 && !t.batch_per_rank_auto() &&
      r.min_nodes() == 0) {
    const int64_t per_step = world * (t.batch_per_rank() > 0
                                          ? t.batch_per_rank()
                                          : train_spec::kDefaultBatchPerRank);
    if (t.global_batch() % per_step != 0) {
      return Bad("train.global_batch",
                 absl::StrCat(t.global_batch(), " is not a multiple of ",
                              world, " ranks x batch_per_rank ",
                              per_step / world, " = ", per_step,
                              "; use a multiple of ", per_step,
                              ", or batch_per_rank: auto"));
    }
  }
  if (t.device() == "cuda" && spec->resources().gpus_per_node() == 0) {
    return Bad("resources.gpus_per_node",
               "is 0 but train.device is cuda; ask for GPUs (one rank each)");
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(t, &json, options).ok()) {
    return absl::InternalError("train: cannot be written as JSON for xl-train");
  }
  spec->add_command("xl-train");
  spec->add_command("--spec-json");
  spec->add_command(json);
  return absl::OkStatus();
}

}  // namespace

// A value the caller sent, as an error message shows it: cut to 64 bytes
// (the error is a header with a size limit, and a wall of text helps no
// one) with bytes outside printable ASCII as \xNN, so a message is one
// readable line whatever was sent.
std::string Shown(const std::string& value) {
  constexpr size_t kShown = 64;
  std::string out;
  for (size_t i = 0; i < value.size() && i < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    }
  }
  if (value.size() > kShown) {
    absl::StrAppend(&out, "... (", value.size(), " bytes)");
  }
  return out;
}

bool ValidQueueName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}


bool IsReservedEnv(const std::string& name) {
  static const std::set<std::string>* kReserved = new std::set<std::string>{
      "RANK",          "WORLD_SIZE",          "LOCAL_RANK",
      "LOCAL_WORLD_SIZE", "GROUP_RANK",       "GROUP_WORLD_SIZE",
      "ROLE_RANK",     "ROLE_WORLD_SIZE",     "MASTER_ADDR",
      "MASTER_PORT",   "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_RUN_ID",
      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"};
  return kReserved->count(name) > 0 || absl::StartsWith(name, "XL_");
}

absl::Status ValidateJobSpec(v1::JobSpec* spec) {
  if (spec->name().size() > 128) {
    return Bad("name", "longer than 128 characters; shorten it");
  }
  // All of it goes to every node (StartRanks): bounded, so that no agent
  // refuses it and no user fills the scheduler with a few jobs.
  int64_t launch = 0;
  for (const auto& arg : spec->command()) launch += arg.size() + 1;
  for (const auto& [k, v] : spec->env()) launch += k.size() + v.size() + 2;
  for (const auto& k : spec->secret_env()) launch += k.size() + 1;
  if (launch > kMaxLaunchBytes) {
    return Bad("env", absl::StrCat(
                          "command and env hold ", launch, " bytes; at most ",
                          kMaxLaunchBytes,
                          " go to the nodes; put large data in a file the "
                          "job reads (working_dir or a shared path)"));
  }
  // A name is a label in everyone's `xlctl list`: no control characters
  // (a newline would print a fake row, an escape would drive the terminal).
  if (size_t at = FindControlCharacter(spec->name()); at != std::string::npos) {
    return Bad("name", absl::StrCat("has a control character (byte ", at,
                                    ", \\x",
                                    absl::StrFormat("%02x", static_cast<unsigned char>(
                                                                spec->name()[at])),
                                    "); use printable characters"));
  }
  if (spec->queue().empty()) spec->set_queue("default");
  if (!ValidQueueName(spec->queue())) {
    return Bad("queue", absl::StrCat("'", Shown(spec->queue()),
                                     "' is not a queue name; use 1-64 "
                                     "letters, digits, '-', '_' or '.'"));
  }
  if (spec->has_train()) {
    absl::Status train = CheckTrainSpec(spec);
    if (!train.ok()) return train;
  }
  if (spec->command_size() == 0) {
    return Bad("command",
               "is empty; give the program and its arguments, for example "
               "[\"/usr/bin/python3\", \"train.py\"]");
  }
  for (int i = 0; i < spec->command_size(); ++i) {
    if (spec->command(i).find('\0') != std::string::npos) {
      return Bad(absl::StrCat("command[", i, "]"), "contains a NUL byte");
    }
  }
  if (spec->command(0).empty()) {
    return Bad("command[0]", "is empty; name the program to run");
  }
  for (const auto& [key, value] : spec->env()) {
    if (!ValidEnvName(key)) {
      return Bad(absl::StrCat("env.", Shown(key)),
                 "is not a variable name; use letters, digits and '_', not "
                 "starting with a digit");
    }
    if (IsReservedEnv(key)) {
      return Bad(absl::StrCat("env.", Shown(key)),
                 "is set by xl for every rank; remove it from env");
    }
    if (value.find('\0') != std::string::npos) {
      return Bad(absl::StrCat("env.", Shown(key)), "contains a NUL byte");
    }
  }
  for (int i = 0; i < spec->secret_env_size(); ++i) {
    if (spec->env().count(spec->secret_env(i)) == 0) {
      return Bad(absl::StrCat("secret_env[", i, "]"),
                 absl::StrCat("names '", Shown(spec->secret_env(i)),
                              "', which is not in env; list only the names "
                              "of env entries whose values are secret"));
    }
  }
  if (spec->after_ok_size() > 64) {
    return Bad("after_ok", absl::StrCat("lists ", spec->after_ok_size(),
                                        " jobs; at most 64"));
  }
  std::set<int64_t> deps;
  for (int i = 0; i < spec->after_ok_size(); ++i) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(spec->after_ok(i), &id) || id <= 0) {
      return Bad(absl::StrCat("after_ok[", i, "]"),
                 absl::StrCat("'", Shown(spec->after_ok(i)),
                              "' is not a job id; give ids as xlctl list "
                              "shows them"));
    }
    deps.insert(id);
  }
  // Stored as the ids read ("012" is 12), each once.
  if (spec->after_ok_size() > 0) {
    spec->clear_after_ok();
    for (int64_t id : deps) spec->add_after_ok(absl::StrCat(id));
  }
  auto* r = spec->mutable_resources();
  if (r->nodes() < 0 || r->nodes() > kMaxNodes) {
    return Bad("resources.nodes",
               absl::StrCat("must be between 1 and ", kMaxNodes, ", got ",
                            r->nodes()));
  }
  if (r->min_nodes() != 0 && r->nodes() == 0) {
    return Bad("resources.min_nodes",
               "is set but resources.nodes is not; give the most nodes the "
               "elastic job may use as nodes (in YAML nodes: {min: 2, max: "
               "8})");
  }
  if (r->nodes() == 0) r->set_nodes(1);
  if (r->min_nodes() < 0 || r->min_nodes() > r->nodes()) {
    return Bad("resources.min_nodes",
               absl::StrCat("must be between 1 and resources.nodes (",
                            r->nodes(), "), got ", r->min_nodes(),
                            "; or 0 for a job that is not elastic"));
  }
  // min == max is not elastic: one form, one class.
  if (r->min_nodes() == r->nodes()) r->set_min_nodes(0);
  if (r->min_nodes() > 0 && r->max_switches() > 0) {
    return Bad("resources.min_nodes",
               "an elastic job cannot also limit its switches "
               "(max_switches); drop one of them");
  }
  if (r->gpus_per_node() < 0 || r->gpus_per_node() > kMaxGpusPerNode) {
    return Bad("resources.gpus_per_node",
               absl::StrCat("must be between 0 and ", kMaxGpusPerNode, ", got ",
                            r->gpus_per_node()));
  }
  if (r->ranks_per_node() < 0 || r->ranks_per_node() > kMaxRanksPerNode) {
    return Bad("resources.ranks_per_node",
               absl::StrCat("must be between 1 and ", kMaxRanksPerNode,
                            ", got ", r->ranks_per_node()));
  }
  if (r->ranks_per_node() == 0) {
    r->set_ranks_per_node(r->gpus_per_node() > 0 ? r->gpus_per_node() : 1);
  }
  // Every rank of a node sees all of the node's GPUs and takes one by
  // LOCAL_RANK, so more ranks than GPUs puts two ranks on one GPU, which
  // NCCL refuses on every attempt: refused here, before the job queues.
  // xl-train on device cpu uses Gloo and no GPU, so it may have more.
  const bool cpu_train = spec->has_train() && spec->train().device() == "cpu";
  if (r->gpus_per_node() > 0 && r->ranks_per_node() > r->gpus_per_node() &&
      !cpu_train) {
    std::string fix =
        absl::StrCat("set ranks_per_node to ", r->gpus_per_node(), " or less");
    if (r->ranks_per_node() <= kMaxGpusPerNode) {
      absl::StrAppend(&fix, ", or gpus_per_node to ", r->ranks_per_node());
    }
    return Bad("resources.ranks_per_node",
               absl::StrCat(r->ranks_per_node(),
                            " ranks per node but gpus_per_node is ",
                            r->gpus_per_node(),
                            "; a GPU rank needs its own GPU (NCCL cannot put "
                            "two ranks of one job on one GPU): ",
                            fix));
  }
  if (r->cpus_per_node() < 0) {
    return Bad("resources.cpus_per_node", "must not be negative");
  }
  if (r->nic_gbps_per_node() < 0) {
    return Bad("resources.nic_gbps_per_node", "must not be negative");
  }
  for (int i = 0; i < r->gpu_models_size(); ++i) {
    if (r->gpu_models(i).empty()) {
      return Bad(absl::StrCat("resources.gpu_models[", i, "]"),
                 "is empty; give an NVML model name such as "
                 "\"NVIDIA H100 80GB HBM3\" (see xlctl nodes)");
    }
  }
  if ((r->min_gpu_memory_bytes() > 0 || r->gpu_models_size() > 0) &&
      r->gpus_per_node() == 0) {
    return Bad("resources.gpus_per_node",
               "is 0 but the job constrains GPU memory or models; set "
               "gpus_per_node");
  }
  if (spec->max_retries() < 0 || spec->max_retries() > 100) {
    return Bad("max_retries",
               absl::StrCat("must be between 0 and 100, got ",
                            spec->max_retries()));
  }
  if (spec->time_limit().seconds() < 0 || spec->time_limit().nanos() < 0) {
    return Bad("time_limit", "must not be negative; use for example 3600s");
  }
  if (spec->resources().max_switches() < 0 ||
      spec->resources().max_switches() > 10000) {
    return Bad("resources.max_switches",
               "give 0 (any) or how many switches the nodes may span");
  }
  if (spec->resources().max_switches_wait().seconds() < 0 ||
      spec->resources().max_switches_wait().nanos() < 0) {
    return Bad("resources.max_switches_wait",
               "must not be negative; 0 waits for ever, or give one such as "
               "30m");
  }
  if (spec->resources().exclude_nodes_size() > 1000) {
    return Bad("resources.exclude_nodes",
               absl::StrCat(spec->resources().exclude_nodes_size(),
                            " nodes; at most 1000"));
  }
  size_t excluded_bytes = 0;
  for (int i = 0; i < spec->resources().exclude_nodes_size(); ++i) {
    const std::string& n = spec->resources().exclude_nodes(i);
    excluded_bytes += n.size();
    if (n.empty() || n.size() > 253) {
      return Bad(absl::StrCat("resources.exclude_nodes[", i, "]"),
                 "give a node name as xlctl nodes shows it");
    }
  }
  if (excluded_bytes > 16384) {
    return Bad("resources.exclude_nodes",
               "the names add up to more than 16 KiB; drain nodes nobody "
               "should use instead (xlctl drain)");
  }
  {
    // One order, no repeats: equal lists make one class.
    auto* names = spec->mutable_resources()->mutable_exclude_nodes();
    std::sort(names->begin(), names->end());
    names->erase(std::unique(names->begin(), names->end()), names->end());
  }
  if (spec->grace_period().seconds() < 0 || spec->grace_period().nanos() < 0) {
    return Bad("grace_period", "must not be negative; use for example 30s");
  }
  // Nodes of a stopped job stay busy this long: a job preempting it, a
  // requeue and a cancel all wait for it.
  if (spec->grace_period().seconds() > 3600) {
    return Bad("grace_period",
               "at most 1h (3600s): a checkpoint that takes longer should be "
               "written periodically (xl-train: checkpoint_every)");
  }
  if (!spec->has_grace_period()) spec->mutable_grace_period()->set_seconds(10);
  // chdir() would stop at a NUL and run the job in another directory.
  if (spec->working_dir().find('\0') != std::string::npos) {
    return Bad("working_dir", "contains a NUL byte");
  }
  if (spec->working_dir().size() >= 4096) {
    return Bad("working_dir",
               absl::StrCat("is ", spec->working_dir().size(),
                            " bytes, longer than a path may be (4095); "
                            "give a shorter path"));
  }
  if (!spec->working_dir().empty() && spec->working_dir()[0] != '/') {
    return Bad("working_dir",
               absl::StrCat("'", Shown(spec->working_dir()),
                            "' is relative; give an absolute path"));
  }
  return ValidateCheckpointDir("checkpoint_dir", spec->checkpoint_dir());
}

absl::Status ValidateCheckpointDir(const std::string& field,
                                   const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  constexpr char kExample[] = "as /shared/ckpt/{job}";
  if (dir.size() > 1024) {
    return Bad(field, absl::StrCat("is ", dir.size(),
                                   " bytes; give a path of at most 1024"));
  }
  if (dir[0] != '/') {
    return Bad(field, absl::StrCat("'", Shown(dir),
                                   "' is relative; give an absolute path on "
                                   "a filesystem every node mounts, ",
                                   kExample));
  }
  for (const char c : dir) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Bad(field, absl::StrCat("'", Shown(dir),
                                     "' has a control character; give a "
                                     "plain path, ", kExample));
    }
  }
  for (absl::string_view part : absl::StrSplit(dir, '/')) {
    if (part == "..") {
      return Bad(field, absl::StrCat("'", Shown(dir),
                                     "' has a '..' component; give the "
                                     "path without it, ", kExample));
    }
  }
  // Only {job}, {attempt} and {user} expand; any other brace is a typo.
  std::string rest = absl::StrReplaceAll(
      dir, {{"{job}", ""}, {"{attempt}", ""}, {"{user}", ""}});
  if (rest.find_first_of("{}") != std::string::npos) {
    return Bad(field, absl::StrCat("'", Shown(dir),
                                   "' has a '{' or '}' that is not {job}, "
                                   "{attempt} or {user}; only those expand"));
  }
  return absl::OkStatus();
}

std::string ExpandCheckpointDir(const std::string& dir,
                                const std::string& job_id, int32_t attempt,
                                const std::string& user) {
  // One path component whatever the name holds, and a different one for
  // every name (two users must never share a directory): letters, digits,
  // '_', '-' and a '.' not first stay, every other byte is %XX ("a@b" is
  // "a%40b", ".." is "%2e.").
  std::string name;
  for (size_t i = 0; i < user.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(user[i]);
    if (absl::ascii_isalnum(c) || c == '_' || c == '-' || (c == '.' && i > 0)) {
      name.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&name, absl::StrFormat("%%%02x", c));
    }
  }
  if (name.empty()) name = "%";
  return absl::StrReplaceAll(dir, {{"{job}", job_id},
                                   {"{attempt}", absl::StrCat(attempt)},
                                   {"{user}", name}});
}

}  // namespace xl::scheduler
