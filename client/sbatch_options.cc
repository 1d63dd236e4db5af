// The #SBATCH options: a table of those xl honours, each with the function
// that applies it to the Request and the JobSpec, and the reasons for
// refusing those it cannot honour.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/sbatch.h"
#include "client/sbatch_request.h"

namespace xl::client::sbatch {
namespace {

// One option as a line gives it, and what it changes.
struct GivenOption {
  const std::string& path;
  const ScriptLine& line;
  // The long name, and the value where it takes one.
  const std::string& name;
  const std::string& value;
  Request* req;
  v1::JobSpec* spec;

  absl::Status Refuse(absl::string_view why) const {
    return Refusal(path, line, why);
  }
};

// Options refused whatever their value, and what to do instead. "" for
// any other option.
absl::string_view WhyRefused(absl::string_view name) {
  if (name == "array") {
    return "job arrays are not supported; submit one job per index (a shell "
           "loop over xlctl submit --sbatch, the index given after --)";
  }
  if (name == "exclusive") {
    // xl places jobs side by side on a node and has no notion of holding
    // one whole; accepting the line would promise what xl does not do.
    return "xl shares nodes between jobs and cannot hold one for a job "
           "alone; ask for all of a node's GPUs (--gres=gpu:N), CPUs and "
           "memory to have it to yourself, or remove the line";
  }
  if (name == "nodelist" || name == "nodefile") {
    return "xl chooses the nodes itself; remove the line (--exclude is "
           "honoured, and --gres=gpu:MODEL:N asks for a GPU model)";
  }
  if (name == "constraint" || name == "prefer") {
    return "node features have no equivalent in xl; remove the line, and "
           "ask for a GPU model with --gres=gpu:MODEL:N if that is what the "
           "feature meant";
  }
  if (name == "mem-per-cpu" || name == "mem-per-gpu") {
    return "xl reserves memory per node; give --mem=SIZE for the whole node "
           "(the amount per CPU or GPU times how many a node gets) instead";
  }
  if (name == "qos") {
    return "xl has no QOS; its queues (--partition) carry priority and "
           "quotas: remove the line";
  }
  if (name == "begin" || name == "deadline" || name == "hold") {
    return "xl starts a job as soon as it fits; submit it when it should "
           "start instead";
  }
  if (name == "signal") {
    return "xl sends SIGTERM, then SIGKILL after the job's grace period; "
           "remove the line and checkpoint on SIGTERM";
  }
  if (name == "ntasks-per-socket" || name == "ntasks-per-core" ||
      name == "ntasks-per-gpu" || name == "sockets-per-node" ||
      name == "cores-per-socket" || name == "threads-per-core" ||
      name == "hint" || name == "distribution" || name == "cpu-bind" ||
      name == "gpu-bind" || name == "mem-bind") {
    return "xl does not place tasks on sockets, cores or GPUs by hand; "
           "remove the line and ask with --ntasks-per-node and "
           "--cpus-per-task";
  }
  return "";
}

// Slurm's N or MIN-MAX; a range becomes an elastic job that runs on as few
// as MIN nodes and grows to MAX.
absl::Status ApplyNodes(const GivenOption& o) {
  std::vector<absl::string_view> range = absl::StrSplit(o.value, '-');
  int lo = 0, hi = 0;
  if (range.size() == 1 && ParseCount(range[0], &hi)) {
    lo = hi;
  } else if (range.size() != 2 || !ParseCount(range[0], &lo) ||
             !ParseCount(range[1], &hi) || hi < lo) {
    return o.Refuse("--nodes takes N or MIN-MAX, like 4 or 2-4");
  }
  o.req->nodes = Said<int>{hi, o.line};
  o.req->min_nodes = lo < hi ? lo : 0;
  return absl::OkStatus();
}

// --ntasks, --ntasks-per-node and --cpus-per-task: a count, kept in
// `field` until every line is read.
template <std::optional<Said<int>> Request::*field>
absl::Status ApplyCount(const GivenOption& o) {
  int n = 0;
  if (!ParseCount(o.value, &n)) {
    return o.Refuse(absl::StrCat("--", o.name,
                                 " takes a whole number from 1 to ", kMaxCount,
                                 ", not '", o.value, "'"));
  }
  o.req->*field = Said<int>{n, o.line};
  return absl::OkStatus();
}

// A GPU type from any GPU option; two different ones contradict.
absl::Status RecordGpuType(const GivenOption& o, const std::string& type) {
  if (type.empty()) return absl::OkStatus();
  Request* req = o.req;
  if (req->gpu_model && req->gpu_model->value != type) {
    return o.Refuse(absl::StrCat("asks for GPU type ", type, ", but line ",
                                 req->gpu_model->line.number, " asks for ",
                                 req->gpu_model->value,
                                 "; a job gets one type, keep one"));
  }
  // xl matches GPUs by their exact NVML model name, as `xlctl nodes`
  // shows it ("NVIDIA H100 80GB HBM3"; quote it in the line): a site's
  // short gres type such as "h100" matches none, and the job then waits
  // with a reason that says so.
  req->gpu_model = Said<std::string>{type, o.line};
  return absl::OkStatus();
}

// Parses the parts of gpu, gpu:N, gpu:TYPE or gpu:TYPE:N after "gpu": the
// count per node (1 when not given) and the type ("" when not given).
bool ParseGpuGres(const std::vector<absl::string_view>& parts, int* n,
                  std::string* type) {
  *n = 1;
  bool ok = parts.size() <= 3;
  if (ok && parts.size() == 3) {
    *type = std::string(parts[1]);
    ok = !type->empty() && absl::SimpleAtoi(parts[2], n);
  } else if (ok && parts.size() == 2 && !absl::SimpleAtoi(parts[1], n)) {
    *type = std::string(parts[1]);  // gpu:TYPE is one GPU of that type
    *n = 1;
    ok = !type->empty() &&
         !absl::ascii_isdigit(static_cast<unsigned char>((*type)[0]));
  }
  return ok && *n >= 0 && *n <= kMaxCount;
}

// --gres: GPUs per node, and their type; no other generic resource.
absl::Status ApplyGres(const GivenOption& o) {
  if (absl::AsciiStrToLower(o.value) == "none") {
    o.req->gres_gpus = Said<int>{0, o.line};
    return absl::OkStatus();
  }
  bool gpu_seen = false;
  for (absl::string_view item : absl::StrSplit(o.value, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    if (parts[0] != "gpu") {
      return o.Refuse(
          absl::StrCat("only GPUs are generic resources in xl, '", parts[0],
                       "' has no equivalent; ask for GPUs with --gres=gpu:N or "
                       "--gres=gpu:MODEL:N and remove the rest"));
    }
    if (gpu_seen) return o.Refuse("names gpu twice; give one gpu:[TYPE:]N");
    gpu_seen = true;
    int n = 0;
    std::string type;
    if (!ParseGpuGres(parts, &n, &type)) {
      return o.Refuse(
          "--gres takes gpu, gpu:N, gpu:TYPE or gpu:TYPE:N (GPUs per node)");
    }
    o.req->gres_gpus = Said<int>{n, o.line};
    if (absl::Status st = RecordGpuType(o, type); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// --gpus-per-node, --gpus and --gpus-per-task: [TYPE:]N, the count kept
// in `field` until every line is read.
template <std::optional<Said<int>> Request::*field>
absl::Status ApplyGpuCount(const GivenOption& o) {
  int n = 0;
  std::string type;
  if (!ParseTypedCount(o.value, &n, &type)) {
    return o.Refuse(absl::StrCat("--", o.name,
                                 " takes N or TYPE:N, like 8 or "
                                 "h100:8"));
  }
  o.req->*field = Said<int>{n, o.line};
  return RecordGpuType(o, type);
}

absl::Status ApplyTime(const GivenOption& o) {
  int64_t seconds = 0;
  if (!ParseSlurmTime(o.value, &seconds)) {
    return o.Refuse(
        "--time takes minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS "
        "or UNLIMITED");
  }
  // Slurm counts limits in whole minutes and rounds seconds up; xl keeps
  // the seconds as given.
  if (seconds > 0) {
    o.spec->mutable_time_limit()->set_seconds(seconds);
  } else {
    o.spec->clear_time_limit();
  }
  return absl::OkStatus();
}

absl::Status ApplyJobName(const GivenOption& o) {
  o.spec->set_name(o.value);
  return absl::OkStatus();
}

absl::Status ApplyPartition(const GivenOption& o) {
  // Slurm takes the first of several partitions that can run the job; an
  // xl job is accounted to exactly one queue.
  if (o.value.empty() || o.value.find(',') != std::string::npos) {
    return o.Refuse("a job goes to one queue in xl; name one partition");
  }
  o.spec->set_queue(o.value);
  return absl::OkStatus();
}

absl::Status ApplyMem(const GivenOption& o) {
  uint64_t bytes = 0;
  if (!ParseSlurmMemory(o.value, &bytes)) {
    return o.Refuse(
        "--mem takes a size per node: a whole number with K, M (the "
        "default), G or T, such as 500M or 64G");
  }
  // --mem=0 asks Slurm for all of each node's memory; in xl 0 reserves
  // none and sets no limit, so the job may still use all of it.
  o.spec->mutable_resources()->set_memory_bytes_per_node(bytes);
  return absl::OkStatus();
}

absl::Status ApplyChdir(const GivenOption& o) {
  if (o.value.empty()) return o.Refuse("--chdir needs a directory");
  // As sbatch: a relative directory is taken from where it runs.
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(o.value, ec);
  if (ec) return o.Refuse(absl::StrCat("--chdir: ", ec.message()));
  o.spec->set_working_dir(dir.lexically_normal().string());
  return absl::OkStatus();
}

absl::Status ApplyDependency(const GivenOption& o) {
  // afterok:ID[:ID...], several joined by ',' (all must hold). '?' (any
  // may hold) and the other kinds have no equivalent.
  if (o.value.find('?') != std::string::npos) {
    return o.Refuse(
        "xl waits for all of the jobs a job depends on; join them with "
        "',' or ':' instead of '?'");
  }
  std::vector<std::string> ids;
  for (absl::string_view part : absl::StrSplit(o.value, ',')) {
    if (!absl::ConsumePrefix(&part, "afterok:")) {
      return o.Refuse(
          "only --dependency=afterok:ID[:ID...] has an equivalent in xl "
          "(after_ok); for other kinds, submit once the jobs have ended");
    }
    for (absl::string_view id : absl::StrSplit(part, ':')) {
      if (id.empty() || id.find_first_of("+_") != absl::string_view::npos) {
        return o.Refuse(absl::StrCat("'", id,
                                     "' is not a job id; give afterok:ID "
                                     "with the ids xlctl submit printed"));
      }
      ids.emplace_back(id);
    }
  }
  for (std::string& id : ids) o.spec->add_after_ok(std::move(id));
  return absl::OkStatus();
}

absl::Status ApplyExport(const GivenOption& o) {
  // Slurm's default, ALL, copies the submitter's whole environment into
  // the job. xl never does: xlctl usually runs on a laptop whose
  // environment means nothing on the nodes (and may hold secrets), so the
  // ranks get the agent's environment, xl's variables and `env`. ALL is
  // therefore accepted as "the default", and NONE is what xl does anyway.
  for (absl::string_view item : absl::StrSplit(o.value, ',')) {
    const std::string upper = absl::AsciiStrToUpper(item);
    if (upper == "ALL" || upper == "NONE" || upper == "NIL") continue;
    const size_t eq = item.find('=');
    const absl::string_view var = item.substr(0, eq);
    if (!IsEnvName(var)) {
      return o.Refuse(
          absl::StrCat("'", var,
                       "' is not a variable name; use letters, digits and "
                       "'_', not starting with a digit"));
    }
    if (eq != absl::string_view::npos) {
      (*o.spec->mutable_env())[std::string(var)] =
          std::string(item.substr(eq + 1));
      continue;
    }
    const char* v = std::getenv(std::string(var).c_str());
    if (v == nullptr) {
      return o.Refuse(absl::StrCat("--export names ", var,
                                   ", which is not set here; set it, or give ",
                                   var, "=VALUE"));
    }
    (*o.spec->mutable_env())[std::string(var)] = v;
  }
  return absl::OkStatus();
}

absl::Status ApplyExclude(const GivenOption& o) {
  std::vector<std::string> nodes;
  if (!ExpandHostList(o.value, &nodes)) {
    return o.Refuse(absl::StrCat(
        "--exclude takes node names such as n1,n2 or gpu[01-04] (at most ",
        kMaxExcluded, " nodes), not a file"));
  }
  for (std::string& node : nodes) {
    o.spec->mutable_resources()->add_exclude_nodes(std::move(node));
  }
  return absl::OkStatus();
}

absl::Status ApplySwitches(const GivenOption& o) {
  // N[@MAX-TIME]: xl's max_switches and max_switches_wait are this.
  std::vector<absl::string_view> parts = absl::StrSplit(o.value, '@');
  int n = 0;
  int64_t wait = 0;
  if (parts.size() > 2 || !ParseCount(parts[0], &n) ||
      (parts.size() == 2 && !ParseSlurmTime(parts[1], &wait))) {
    return o.Refuse("--switches takes N or N@TIME, like 1 or 1@30:00");
  }
  o.req->switches = Said<int>{n, o.line};
  v1::ResourceRequest* res = o.spec->mutable_resources();
  res->set_max_switches(n);
  if (wait > 0) {
    res->mutable_max_switches_wait()->set_seconds(wait);
  } else {
    res->clear_max_switches_wait();
  }
  return absl::OkStatus();
}

// Accepted without effect. The scheduler keeps every rank's output (xlctl
// logs), so no output or error file is written on the node; xl accounts to
// the queue (--partition), has no mail, and requeues a preempted job always
// (after a lost node only with xlctl submit --max-retries).
absl::Status AcceptWithoutEffect(const GivenOption&) {
  return absl::OkStatus();
}

// An option xl honours: its long name, whether it takes a value (so that
// "--time 10" reads the next word), and what applies it.
struct KnownOption {
  absl::string_view name;
  bool takes_value;
  absl::Status (*apply)(const GivenOption&);
};

constexpr KnownOption kKnownOptions[] = {
    {"nodes", true, ApplyNodes},
    {"ntasks", true, ApplyCount<&Request::ntasks>},
    {"ntasks-per-node", true, ApplyCount<&Request::ntasks_per_node>},
    {"cpus-per-task", true, ApplyCount<&Request::cpus_per_task>},
    {"gres", true, ApplyGres},
    {"gpus-per-node", true, ApplyGpuCount<&Request::gpus_per_node>},
    {"gpus", true, ApplyGpuCount<&Request::gpus>},
    {"gpus-per-task", true, ApplyGpuCount<&Request::gpus_per_task>},
    {"time", true, ApplyTime},
    {"job-name", true, ApplyJobName},
    {"partition", true, ApplyPartition},
    {"mem", true, ApplyMem},
    {"chdir", true, ApplyChdir},
    {"dependency", true, ApplyDependency},
    {"export", true, ApplyExport},
    {"exclude", true, ApplyExclude},
    {"switches", true, ApplySwitches},
    {"output", true, AcceptWithoutEffect},
    {"error", true, AcceptWithoutEffect},
    {"open-mode", true, AcceptWithoutEffect},
    {"account", true, AcceptWithoutEffect},
    {"wckey", true, AcceptWithoutEffect},
    {"comment", true, AcceptWithoutEffect},
    {"mail-type", true, AcceptWithoutEffect},
    {"mail-user", true, AcceptWithoutEffect},
    {"requeue", false, AcceptWithoutEffect},
    {"parsable", false, AcceptWithoutEffect},
    {"quiet", false, AcceptWithoutEffect},
};

// The entry of `name` in kKnownOptions, or null.
const KnownOption* FindKnownOption(absl::string_view name) {
  for (const KnownOption& known : kKnownOptions) {
    if (known.name == name) return &known;
  }
  return nullptr;
}

}  // namespace

absl::string_view LongName(char letter) {
  static constexpr std::pair<char, absl::string_view> kShort[] = {
      {'A', "account"},       {'a', "array"},     {'C', "constraint"},
      {'c', "cpus-per-task"}, {'D', "chdir"},     {'d', "dependency"},
      {'e', "error"},         {'G', "gpus"},      {'H', "hold"},
      {'J', "job-name"},      {'N', "nodes"},     {'n', "ntasks"},
      {'o', "output"},        {'p', "partition"}, {'q', "qos"},
      {'s', "oversubscribe"}, {'t', "time"},      {'w', "nodelist"},
      {'x', "exclude"}};
  for (const auto& [short_name, long_name] : kShort) {
    if (short_name == letter) return long_name;
  }
  return "";
}

bool TakesValue(absl::string_view name) {
  const KnownOption* known = FindKnownOption(name);
  return known != nullptr && known->takes_value;
}

absl::Status ApplyOption(const std::string& path, const ScriptLine& line,
                         const std::string& name, const std::string& value,
                         Request* req, v1::JobSpec* spec) {
  const GivenOption option{path, line, name, value, req, spec};
  if (const KnownOption* known = FindKnownOption(name)) {
    return known->apply(option);
  }
  if (absl::string_view why = WhyRefused(name); !why.empty()) {
    return option.Refuse(why);
  }
  return option.Refuse(
      absl::StrCat("--", name,
                   " is not an option xl can honour; remove it "
                   "(xlctl submit --help lists what xl can do)"));
}

}  // namespace xl::client::sbatch
