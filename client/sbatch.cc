#include "client/sbatch.h"

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace xl::client {
namespace {

// Run by bash -c before the script ($0 is the script's path, $1 its text as
// submitted, the rest its arguments): Slurm's per-task variables from xl's,
// and `srun` as a function that runs its command in place, skipping srun's
// own options. The text runs, not the file: as sbatch copies the script, a
// later edit or removal changes no queued job, and nodes need not see the
// path.
constexpr char kPrelude[] = R"sh(
export SLURM_JOB_ID="$XL_JOB_ID" SLURM_JOBID="$XL_JOB_ID"
export SLURM_PROCID="$RANK" SLURM_NTASKS="$WORLD_SIZE" SLURM_NPROCS="$WORLD_SIZE"
export SLURM_LOCALID="$LOCAL_RANK" SLURM_NODEID="$GROUP_RANK"
export SLURM_NNODES="$GROUP_WORLD_SIZE" SLURM_JOB_NUM_NODES="$GROUP_WORLD_SIZE"
export SLURM_NTASKS_PER_NODE="$LOCAL_WORLD_SIZE" SLURMD_NODENAME="$XL_NODE"
export SLURM_RESTART_COUNT="$((${XL_ATTEMPT:-1} - 1))"
srun() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --) shift; break ;;
      --*=*) shift ;;
      --ntasks|--nodes|--cpus-per-task|--cpus-per-gpu|--gpus|--gres|--mpi|\
--ntasks-per-node|--export|--time|--job-name|--output|--error|--input|\
--cpu-bind|--distribution|--gpus-per-task|--gpus-per-node|--mem|\
--mem-per-cpu|--mem-per-gpu|--nodelist|--exclude|--partition|--chdir|\
--account|--qos|--constraint|--dependency|--label-format) shift 2 ;;
      -[nNcCtJpoeGwxmBDd]) shift 2 ;;
      -*) shift ;;
      *) break ;;
    esac
  done
  "$@"
}
export -f srun
script_text="$1"
shift
exec /bin/bash -c "$script_text" "$0" "$@"
)sh";

// One argument of a command may hold at most 128 KiB (MAX_ARG_STRLEN).
constexpr size_t kMaxScriptBytes = 100 << 10;

// Counts (nodes, tasks, CPUs, GPUs) above this are refused as typos; it
// also keeps every product of two counts within int64.
constexpr int64_t kMaxCount = 1'000'000;
// resources.exclude_nodes holds at most this many names.
constexpr size_t kMaxExcluded = 1000;

// One #SBATCH line: its number and its text, to name it in a refusal.
struct ScriptLine {
  int number = 0;
  std::string text;
};

// A value and the line that asked for it.
template <typename T>
struct Said {
  T value{};
  ScriptLine line;
};

// What the #SBATCH lines ask for that becomes the ResourceRequest only once
// every line is read: tasks, nodes and GPUs depend on each other.
struct Request {
  std::optional<Said<int>> nodes;  // the most nodes
  int min_nodes = 0;               // below nodes: an elastic job
  std::optional<Said<int>> ntasks;
  std::optional<Said<int>> ntasks_per_node;
  std::optional<Said<int>> cpus_per_task;
  // GPUs per node as --gres=gpu and --gpus-per-node say them; as in
  // Slurm, an option given twice keeps its last value.
  std::optional<Said<int>> gres_gpus;
  std::optional<Said<int>> gpus_per_node;
  std::optional<Said<int>> gpus;  // --gpus: over the whole job
  std::optional<Said<int>> gpus_per_task;
  std::optional<Said<std::string>> gpu_model;
  std::optional<Said<int>> switches;
};

// Returns the refusal of `line` in `path`: "path:4: `#SBATCH ...`: why".
absl::Status Refusal(const std::string& path, const ScriptLine& line,
                     absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ":", line.number, ": `", line.text, "`: ", why));
}

// Splits what follows #SBATCH into arguments the way sbatch does: blanks
// separate them, single or double quotes group (and are dropped), a
// backslash takes the next character as it is, and a '#' outside quotes
// starts a comment. Returns false when a quote is left open.
bool SplitArguments(absl::string_view text, std::vector<std::string>* words) {
  std::string word;
  bool in_word = false;
  char quote = '\0';
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
      in_word = true;
    } else if (quote != '\0') {
      if (c == quote) {
        quote = '\0';
      } else {
        word += c;
      }
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == '#') {
      break;
    } else if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      if (in_word) words->push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != '\0') return false;
  if (in_word) words->push_back(std::move(word));
  return true;
}

// The long option a short one stands for (sbatch's letters), or "".
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

// Options xl honours that take a value.
bool TakesValue(absl::string_view name) {
  for (absl::string_view known :
       {"nodes",     "ntasks",    "ntasks-per-node", "cpus-per-task",
        "gres",      "gpus",      "gpus-per-node",   "gpus-per-task",
        "time",      "job-name",  "partition",       "mem",
        "export",    "chdir",     "dependency",      "exclude",
        "switches",  "output",    "error",           "account",
        "mail-type", "mail-user", "comment",         "open-mode",
        "wckey"}) {
    if (name == known) return true;
  }
  return false;
}

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

// Parses a count between 1 and kMaxCount.
bool ParseCount(absl::string_view text, int* n) {
  return absl::SimpleAtoi(text, n) && *n >= 1 && *n <= kMaxCount;
}

// Parses "[TYPE:]N" (--gpus, --gpus-per-node, --gpus-per-task): the count
// (0 allowed) and the GPU type, unchanged when none is given.
bool ParseTypedCount(absl::string_view text, int* count, std::string* type) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() > 2 || !absl::SimpleAtoi(parts.back(), count) ||
      *count < 0 || *count > kMaxCount) {
    return false;
  }
  if (parts.size() == 2) {
    if (parts[0].empty()) return false;
    *type = std::string(parts[0]);
  }
  return true;
}

// Slurm's sizes: a whole number, then K, M (the default), G or T.
bool ParseSlurmMemory(absl::string_view text, uint64_t* bytes) {
  uint64_t unit = uint64_t{1} << 20;
  if (!text.empty() &&
      !absl::ascii_isdigit(static_cast<unsigned char>(text.back()))) {
    switch (absl::ascii_toupper(static_cast<unsigned char>(text.back()))) {
      case 'K':
        unit = uint64_t{1} << 10;
        break;
      case 'M':
        break;
      case 'G':
        unit = uint64_t{1} << 30;
        break;
      case 'T':
        unit = uint64_t{1} << 40;
        break;
      default:
        return false;
    }
    text.remove_suffix(1);
  }
  uint64_t n = 0;
  if (text.empty() ||
      !absl::ascii_isdigit(static_cast<unsigned char>(text[0])) ||
      !absl::SimpleAtoi(text, &n) ||
      n > std::numeric_limits<uint64_t>::max() / unit) {
    return false;
  }
  *bytes = n * unit;
  return true;
}

// Expands a Slurm host list, "n1,gpu[01-03,7]": names joined by commas,
// each with at most one bracketed list of numbers and ranges (leading zeros
// kept). Returns false for anything else or more than kMaxExcluded names.
bool ExpandHostList(absl::string_view text, std::vector<std::string>* names) {
  // Commas inside brackets separate numbers, not names.
  std::vector<absl::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      items.push_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      --depth;
    }
  }
  for (absl::string_view item : items) {
    if (item.empty() || item.find('/') != absl::string_view::npos) {
      return false;
    }
    const size_t open = item.find('[');
    if (open == absl::string_view::npos) {
      if (item.find(']') != absl::string_view::npos) return false;
      names->emplace_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    if (close == absl::string_view::npos) return false;
    const absl::string_view prefix = item.substr(0, open);
    const absl::string_view suffix = item.substr(close + 1);
    if (suffix.find_first_of("[]") != absl::string_view::npos) return false;
    for (absl::string_view range :
         absl::StrSplit(item.substr(open + 1, close - open - 1), ',')) {
      std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
      int64_t lo = 0, hi = 0;
      if (ends.size() > 2 || ends[0].empty() ||
          !absl::ascii_isdigit(static_cast<unsigned char>(ends[0][0])) ||
          !absl::SimpleAtoi(ends[0], &lo) ||
          !absl::SimpleAtoi(ends.back(), &hi) || lo < 0 || hi < lo ||
          hi - lo >= static_cast<int64_t>(kMaxExcluded)) {
        return false;
      }
      for (int64_t n = lo; n <= hi; ++n) {
        std::string digits = absl::StrCat(n);
        if (digits.size() < ends[0].size()) {
          digits.insert(0, ends[0].size() - digits.size(), '0');
        }
        names->push_back(absl::StrCat(prefix, digits, suffix));
        if (names->size() > kMaxExcluded) return false;
      }
    }
  }
  return names->size() <= kMaxExcluded;
}

// A name the scheduler takes as an environment variable.
bool IsEnvName(absl::string_view name) {
  if (name.empty() ||
      absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

// Applies one option (its long name, and its value where it takes one) to
// `req` and `spec`.
absl::Status ApplyOption(const std::string& path, const ScriptLine& line,
                         const std::string& name, const std::string& value,
                         Request* req, v1::JobSpec* spec) {
  auto refuse = [&](absl::string_view why) { return Refusal(path, line, why); };
  auto count = [&](std::optional<Said<int>>* out) -> absl::Status {
    int n = 0;
    if (!ParseCount(value, &n)) {
      return refuse(absl::StrCat("--", name, " takes a whole number from 1 to ",
                                 kMaxCount, ", not '", value, "'"));
    }
    *out = Said<int>{n, line};
    return absl::OkStatus();
  };
  // A GPU type from any GPU option; two different ones contradict.
  auto gpu_type = [&](const std::string& type) -> absl::Status {
    if (type.empty()) return absl::OkStatus();
    if (req->gpu_model && req->gpu_model->value != type) {
      return refuse(absl::StrCat("asks for GPU type ", type, ", but line ",
                                 req->gpu_model->line.number, " asks for ",
                                 req->gpu_model->value,
                                 "; a job gets one type, keep one"));
    }
    // xl matches GPUs by their exact NVML model name, as `xlctl nodes`
    // shows it ("NVIDIA H100 80GB HBM3"; quote it in the line): a site's
    // short gres type such as "h100" matches none, and the job then waits
    // with a reason that says so.
    req->gpu_model = Said<std::string>{type, line};
    return absl::OkStatus();
  };

  if (name == "nodes") {
    // Slurm's N or MIN-MAX; a range becomes an elastic job that runs on as
    // few as MIN nodes and grows to MAX.
    std::vector<absl::string_view> range = absl::StrSplit(value, '-');
    int lo = 0, hi = 0;
    if (range.size() == 1 && ParseCount(range[0], &hi)) {
      lo = hi;
    } else if (range.size() != 2 || !ParseCount(range[0], &lo) ||
               !ParseCount(range[1], &hi) || hi < lo) {
      return refuse("--nodes takes N or MIN-MAX, like 4 or 2-4");
    }
    req->nodes = Said<int>{hi, line};
    req->min_nodes = lo < hi ? lo : 0;
  } else if (name == "ntasks") {
    return count(&req->ntasks);
  } else if (name == "ntasks-per-node") {
    return count(&req->ntasks_per_node);
  } else if (name == "cpus-per-task") {
    return count(&req->cpus_per_task);
  } else if (name == "gres") {
    if (absl::AsciiStrToLower(value) == "none") {
      req->gres_gpus = Said<int>{0, line};
      return absl::OkStatus();
    }
    bool gpu_seen = false;
    for (absl::string_view item : absl::StrSplit(value, ',')) {
      // gpu, gpu:N, gpu:TYPE or gpu:TYPE:N; the count is per node.
      std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
      if (parts[0] != "gpu") {
        return refuse(absl::StrCat(
            "only GPUs are generic resources in xl, '", parts[0],
            "' has no equivalent; ask for GPUs with --gres=gpu:N or "
            "--gres=gpu:MODEL:N and remove the rest"));
      }
      if (gpu_seen) return refuse("names gpu twice; give one gpu:[TYPE:]N");
      gpu_seen = true;
      int n = 1;
      std::string type;
      bool ok = parts.size() <= 3;
      if (ok && parts.size() == 3) {
        type = std::string(parts[1]);
        ok = !type.empty() && absl::SimpleAtoi(parts[2], &n);
      } else if (ok && parts.size() == 2 && !absl::SimpleAtoi(parts[1], &n)) {
        type = std::string(parts[1]);  // gpu:TYPE is one GPU of that type
        n = 1;
        ok = !type.empty() &&
             !absl::ascii_isdigit(static_cast<unsigned char>(type[0]));
      }
      if (!ok || n < 0 || n > kMaxCount) {
        return refuse(
            "--gres takes gpu, gpu:N, gpu:TYPE or gpu:TYPE:N (GPUs per node)");
      }
      req->gres_gpus = Said<int>{n, line};
      if (absl::Status st = gpu_type(type); !st.ok()) return st;
    }
  } else if (name == "gpus-per-node" || name == "gpus" ||
             name == "gpus-per-task") {
    int n = 0;
    std::string type;
    if (!ParseTypedCount(value, &n, &type)) {
      return refuse(absl::StrCat("--", name,
                                 " takes N or TYPE:N, like 8 or "
                                 "h100:8"));
    }
    std::optional<Said<int>>* out = name == "gpus-per-node"
                                        ? &req->gpus_per_node
                                    : name == "gpus" ? &req->gpus
                                                     : &req->gpus_per_task;
    *out = Said<int>{n, line};
    return gpu_type(type);
  } else if (name == "time") {
    int64_t seconds = 0;
    if (!ParseSlurmTime(value, &seconds)) {
      return refuse(
          "--time takes minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS "
          "or UNLIMITED");
    }
    // Slurm counts limits in whole minutes and rounds seconds up; xl keeps
    // the seconds as given.
    if (seconds > 0) {
      spec->mutable_time_limit()->set_seconds(seconds);
    } else {
      spec->clear_time_limit();
    }
  } else if (name == "job-name") {
    spec->set_name(value);
  } else if (name == "partition") {
    // Slurm takes the first of several partitions that can run the job; an
    // xl job is accounted to exactly one queue.
    if (value.empty() || value.find(',') != std::string::npos) {
      return refuse("a job goes to one queue in xl; name one partition");
    }
    spec->set_queue(value);
  } else if (name == "mem") {
    uint64_t bytes = 0;
    if (!ParseSlurmMemory(value, &bytes)) {
      return refuse(
          "--mem takes a size per node: a whole number with K, M (the "
          "default), G or T, such as 500M or 64G");
    }
    // --mem=0 asks Slurm for all of each node's memory; in xl 0 reserves
    // none and sets no limit, so the job may still use all of it.
    spec->mutable_resources()->set_memory_bytes_per_node(bytes);
  } else if (name == "chdir") {
    if (value.empty()) return refuse("--chdir needs a directory");
    // As sbatch: a relative directory is taken from where it runs.
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::absolute(value, ec);
    if (ec) return refuse(absl::StrCat("--chdir: ", ec.message()));
    spec->set_working_dir(dir.lexically_normal().string());
  } else if (name == "dependency") {
    // afterok:ID[:ID...], several joined by ',' (all must hold). '?' (any
    // may hold) and the other kinds have no equivalent.
    if (value.find('?') != std::string::npos) {
      return refuse(
          "xl waits for all of the jobs a job depends on; join them with "
          "',' or ':' instead of '?'");
    }
    std::vector<std::string> ids;
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      if (!absl::ConsumePrefix(&part, "afterok:")) {
        return refuse(
            "only --dependency=afterok:ID[:ID...] has an equivalent in xl "
            "(after_ok); for other kinds, submit once the jobs have ended");
      }
      for (absl::string_view id : absl::StrSplit(part, ':')) {
        if (id.empty() || id.find_first_of("+_") != absl::string_view::npos) {
          return refuse(absl::StrCat("'", id,
                                     "' is not a job id; give afterok:ID "
                                     "with the ids xlctl submit printed"));
        }
        ids.emplace_back(id);
      }
    }
    for (std::string& id : ids) spec->add_after_ok(std::move(id));
  } else if (name == "export") {
    // Slurm's default, ALL, copies the submitter's whole environment into
    // the job. xl never does: xlctl usually runs on a laptop whose
    // environment means nothing on the nodes (and may hold secrets), so the
    // ranks get the agent's environment, xl's variables and `env`. ALL is
    // therefore accepted as "the default", and NONE is what xl does anyway.
    for (absl::string_view item : absl::StrSplit(value, ',')) {
      const std::string upper = absl::AsciiStrToUpper(item);
      if (upper == "ALL" || upper == "NONE" || upper == "NIL") continue;
      const size_t eq = item.find('=');
      const absl::string_view var = item.substr(0, eq);
      if (!IsEnvName(var)) {
        return refuse(
            absl::StrCat("'", var,
                         "' is not a variable name; use letters, digits and "
                         "'_', not starting with a digit"));
      }
      if (eq != absl::string_view::npos) {
        (*spec->mutable_env())[std::string(var)] =
            std::string(item.substr(eq + 1));
        continue;
      }
      const char* v = std::getenv(std::string(var).c_str());
      if (v == nullptr) {
        return refuse(absl::StrCat("--export names ", var,
                                   ", which is not set here; set it, or give ",
                                   var, "=VALUE"));
      }
      (*spec->mutable_env())[std::string(var)] = v;
    }
  } else if (name == "exclude") {
    std::vector<std::string> nodes;
    if (!ExpandHostList(value, &nodes)) {
      return refuse(absl::StrCat(
          "--exclude takes node names such as n1,n2 or gpu[01-04] (at most ",
          kMaxExcluded, " nodes), not a file"));
    }
    for (std::string& node : nodes) {
      spec->mutable_resources()->add_exclude_nodes(std::move(node));
    }
  } else if (name == "switches") {
    // N[@MAX-TIME]: xl's max_switches and max_switches_wait are this.
    std::vector<absl::string_view> parts = absl::StrSplit(value, '@');
    int n = 0;
    int64_t wait = 0;
    if (parts.size() > 2 || !ParseCount(parts[0], &n) ||
        (parts.size() == 2 && !ParseSlurmTime(parts[1], &wait))) {
      return refuse("--switches takes N or N@TIME, like 1 or 1@30:00");
    }
    req->switches = Said<int>{n, line};
    v1::ResourceRequest* res = spec->mutable_resources();
    res->set_max_switches(n);
    if (wait > 0) {
      res->mutable_max_switches_wait()->set_seconds(wait);
    } else {
      res->clear_max_switches_wait();
    }
  } else if (name == "output" || name == "error" || name == "open-mode" ||
             name == "account" || name == "wckey" || name == "comment" ||
             name == "mail-type" || name == "mail-user" || name == "requeue" ||
             name == "parsable" || name == "quiet") {
    // Accepted without effect. The scheduler keeps every rank's output
    // (xlctl logs), so no output or error file is written on the node; xl
    // accounts to the queue (--partition), has no mail, and requeues a
    // preempted job always (after a lost node only with xlctl submit
    // --max-retries).
  } else if (absl::string_view why = WhyRefused(name); !why.empty()) {
    return refuse(why);
  } else {
    return refuse(absl::StrCat("--", name,
                               " is not an option xl can honour; remove it "
                               "(xlctl submit --help lists what xl can do)"));
  }
  return absl::OkStatus();
}

// Applies every argument of one #SBATCH line.
absl::Status ApplyLine(const std::string& path, const ScriptLine& line,
                       const std::vector<std::string>& words, Request* req,
                       v1::JobSpec* spec) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    std::string name, value;
    bool has_value = false;
    if (absl::StartsWith(w, "--") && w.size() > 2) {
      const size_t eq = w.find('=');
      name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (eq != std::string::npos) {
        value = w.substr(eq + 1);
        has_value = true;
      }
    } else if (w.size() >= 2 && w[0] == '-' && w[1] != '-') {
      name = std::string(LongName(w[1]));
      if (name.empty()) {
        return Refusal(path, line,
                       absl::StrCat("-", w.substr(1, 1),
                                    " is not an sbatch option xl knows; "
                                    "remove it or use its long form"));
      }
      if (w.size() > 2) {  // -N2, and -N=2 as a courtesy
        value = w.substr(w[2] == '=' ? 3 : 2);
        has_value = true;
      }
    } else if (w == "hetjob" || w == "packjob") {
      return Refusal(path, line,
                     "heterogeneous jobs are not supported; submit each "
                     "component as its own job");
    } else {
      return Refusal(path, line, absl::StrCat("'", w, "' is not an option"));
    }
    if (!has_value && TakesValue(name)) {
      if (i + 1 >= words.size()) {
        return Refusal(path, line, absl::StrCat("--", name, " needs a value"));
      }
      value = words[++i];
    }
    if (absl::Status st = ApplyOption(path, line, name, value, req, spec);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// Turns the counts into spec->resources(): nodes, ranks per node, GPUs and
// CPUs per node. Refuses counts that contradict each other, naming the line
// of the later one.
absl::Status ResolveResources(const std::string& path, const Request& req,
                              v1::JobSpec* spec) {
  v1::ResourceRequest* res = spec->mutable_resources();
  const bool elastic = req.min_nodes > 0;
  int64_t nodes = req.nodes ? req.nodes->value : 1;
  // Slurm runs one task per node unless told otherwise; xl's own default
  // would be one rank per GPU. A Slurm script expects Slurm's (its srun or
  // torchrun starts the per-GPU processes), so it is set explicitly.
  int64_t per_node = 1;
  if (req.ntasks && elastic) {
    return Refusal(
        path, req.ntasks->line,
        absl::StrCat("--ntasks fixes the number of tasks, but an elastic job "
                     "(--nodes=",
                     req.min_nodes, "-", nodes,
                     ") runs as many tasks on every node it gets; give "
                     "--ntasks-per-node instead"));
  }
  if (req.ntasks_per_node) {
    per_node = req.ntasks_per_node->value;
    if (req.ntasks && !req.nodes) {
      // As Slurm: the node count follows from the other two.
      if (req.ntasks->value % per_node != 0) {
        return Refusal(
            path, req.ntasks->line,
            absl::StrCat("--ntasks=", req.ntasks->value,
                         " is not a multiple of --ntasks-per-node=", per_node,
                         "; xl runs as many tasks on every node: give a "
                         "multiple, or --nodes"));
      }
      nodes = req.ntasks->value / per_node;
    } else if (req.ntasks && req.ntasks->value != nodes * per_node) {
      const ScriptLine& later =
          req.ntasks->line.number >= req.ntasks_per_node->line.number
              ? req.ntasks->line
              : req.ntasks_per_node->line;
      return Refusal(
          path, later,
          absl::StrCat("--ntasks=", req.ntasks->value, " is not --nodes (",
                       nodes, ") x --ntasks-per-node (", per_node,
                       "); give two of the three"));
    }
  } else if (req.ntasks) {
    if (req.ntasks->value % nodes != 0) {
      return Refusal(
          path, req.ntasks->line,
          absl::StrCat("--ntasks=", req.ntasks->value,
                       " does not divide evenly over ", nodes,
                       " nodes; xl runs as many tasks on every node: give a "
                       "multiple of --nodes, or --ntasks-per-node"));
    }
    per_node = req.ntasks->value / nodes;
  }
  if (nodes * per_node > kMaxCount) {
    const ScriptLine& line = req.ntasks  ? req.ntasks->line
                             : req.nodes ? req.nodes->line
                                         : req.ntasks_per_node->line;
    return Refusal(path, line,
                   absl::StrCat("asks for ", nodes * per_node,
                                " tasks; at most ", kMaxCount));
  }
  res->set_nodes(static_cast<int>(nodes));
  res->set_min_nodes(req.min_nodes);
  res->set_ranks_per_node(static_cast<int>(per_node));
  if (elastic && req.switches) {
    return Refusal(path, req.switches->line,
                   "an elastic job (--nodes=MIN-MAX) cannot also limit its "
                   "switches; remove one of them");
  }

  // GPUs per node, from whichever options gave them; they must agree.
  std::optional<Said<int>> gpn;
  auto agree = [&](int64_t n, const ScriptLine& line) -> absl::Status {
    if (gpn && gpn->value != n) {
      const bool later = line.number >= gpn->line.number;
      return Refusal(
          path, later ? line : gpn->line,
          absl::StrCat("makes ", later ? n : gpn->value,
                       " GPUs per node, but line ",
                       (later ? gpn->line : line).number, " makes ",
                       later ? gpn->value : n, "; keep one of them"));
    }
    if (n > kMaxCount) {
      return Refusal(path, line, absl::StrCat("makes ", n, " GPUs per node"));
    }
    gpn = Said<int>{static_cast<int>(n), line};
    return absl::OkStatus();
  };
  for (const std::optional<Said<int>>* given :
       {&req.gres_gpus, &req.gpus_per_node}) {
    if (!*given) continue;
    if (absl::Status st = agree((*given)->value, (*given)->line); !st.ok()) {
      return st;
    }
  }
  if (req.gpus) {
    if (elastic) {
      return Refusal(path, req.gpus->line,
                     "--gpus counts the whole job's GPUs, but an elastic job "
                     "(--nodes=MIN-MAX) gets the same GPUs on every node it "
                     "runs on; give --gpus-per-node instead");
    }
    if (req.gpus->value % nodes != 0) {
      return Refusal(path, req.gpus->line,
                     absl::StrCat("--gpus=", req.gpus->value,
                                  " does not divide evenly over ", nodes,
                                  " nodes; xl gives every node as many GPUs: "
                                  "give --gpus-per-node instead"));
    }
    if (absl::Status st = agree(req.gpus->value / nodes, req.gpus->line);
        !st.ok()) {
      return st;
    }
  }
  if (req.gpus_per_task) {
    if (absl::Status st = agree(int64_t{req.gpus_per_task->value} * per_node,
                                req.gpus_per_task->line);
        !st.ok()) {
      return st;
    }
  }
  const int gpus = gpn ? gpn->value : 0;
  res->set_gpus_per_node(gpus);
  res->clear_gpu_models();
  if (req.gpu_model) {
    if (gpus == 0) {
      return Refusal(path, req.gpu_model->line,
                     "names a GPU type but asks for no GPU; give a count");
    }
    res->add_gpu_models(req.gpu_model->value);
  }
  // Without --cpus-per-task Slurm gives each task one CPU; xl then
  // reserves none, and the ranks share the node's CPUs.
  if (req.cpus_per_task) {
    const int64_t cpus = int64_t{req.cpus_per_task->value} * per_node;
    if (cpus > kMaxCount) {
      return Refusal(path, req.cpus_per_task->line,
                     absl::StrCat("makes ", cpus, " CPUs per node"));
    }
    res->set_cpus_per_node(static_cast<int>(cpus));
  }
  return absl::OkStatus();
}

}  // namespace

bool ParseSlurmTime(absl::string_view text, int64_t* seconds) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "unlimited" || lower == "infinite" || lower == "-1") {
    *seconds = 0;
    return true;
  }
  // Bounds every part so that the sum cannot overflow.
  constexpr int64_t kMaxPart = 1'000'000'000;
  absl::string_view rest = text;
  int64_t days = 0;
  const size_t dash = rest.find('-');
  const bool has_days = dash != absl::string_view::npos;
  if (has_days) {
    const absl::string_view d = rest.substr(0, dash);
    if (d.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(d[0])) ||
        !absl::SimpleAtoi(d, &days) || days > 1'000'000) {
      return false;
    }
    rest = rest.substr(dash + 1);
  }
  std::vector<int64_t> v;
  for (absl::string_view p : absl::StrSplit(rest, ':')) {
    int64_t n = 0;
    if (p.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(p[0])) ||
        !absl::SimpleAtoi(p, &n) || n > kMaxPart) {
      return false;
    }
    v.push_back(n);
  }
  int64_t s = 0;
  if (has_days) {
    // D-HH, D-HH:MM, D-HH:MM:SS
    if (v.size() > 3) return false;
    s = v[0] * 3600 + (v.size() > 1 ? v[1] * 60 : 0) +
        (v.size() > 2 ? v[2] : 0);
  } else if (v.size() == 1) {
    s = v[0] * 60;  // minutes
  } else if (v.size() == 2) {
    s = v[0] * 60 + v[1];  // MM:SS
  } else if (v.size() == 3) {
    s = v[0] * 3600 + v[1] * 60 + v[2];  // HH:MM:SS
  } else {
    return false;
  }
  s += days * 86400;
  if (s > 1'000'000 * int64_t{86400}) return false;
  *seconds = s;
  return true;
}

absl::StatusOr<v1::JobSpec> JobSpecFromSbatch(
    const std::string& path, absl::string_view text,
    const std::vector<std::string>& script_args) {
  std::string script = path;
  if (!script.empty() && script[0] != '/') {
    std::error_code ec;
    script = std::filesystem::absolute(path, ec).lexically_normal().string();
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", ec.message()));
    }
  }
  Request req;
  v1::JobSpec spec;
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    // As sbatch: a directive starts the line (an indented one is a
    // comment), and the first line that is neither blank nor a comment is
    // the first command, after which nothing is read.
    absl::string_view rest = raw;
    if (!absl::ConsumePrefix(&rest, "#SBATCH") &&
        !absl::ConsumePrefix(&rest, "#SLURM")) {
      const absl::string_view s = absl::StripLeadingAsciiWhitespace(raw);
      if (s.empty() || s[0] == '#') continue;
      break;
    }
    // "#SBATCHX" is a comment of its own, not a directive.
    if (!rest.empty() &&
        !absl::ascii_isspace(static_cast<unsigned char>(rest[0])) &&
        rest[0] != '-') {
      continue;
    }
    const ScriptLine line{number,
                          std::string(absl::StripTrailingAsciiWhitespace(raw))};
    std::vector<std::string> words;
    if (!SplitArguments(rest, &words)) {
      return Refusal(path, line, "a quote is not closed; close it");
    }
    if (absl::Status st = ApplyLine(path, line, words, &req, &spec); !st.ok()) {
      return st;
    }
  }
  if (absl::Status st = ResolveResources(path, req, &spec); !st.ok()) {
    return st;
  }

  // As sbatch: a job without a name is named after its script.
  if (spec.name().empty()) {
    const size_t slash = script.rfind('/');
    spec.set_name(slash == std::string::npos ? script
                                             : script.substr(slash + 1));
  }
  // Slurm's job-wide variables; --export wins where it set one.
  auto& env = *spec.mutable_env();
  env.insert({"SLURM_JOB_NAME", spec.name()});
  env.insert({"SLURM_JOB_PARTITION",
              spec.queue().empty() ? std::string("default") : spec.queue()});
  if (req.cpus_per_task) {
    env.insert({"SLURM_CPUS_PER_TASK", absl::StrCat(req.cpus_per_task->value)});
  }
  if (const int gpus = spec.resources().gpus_per_node(); gpus > 0) {
    env.insert({"SLURM_GPUS_ON_NODE", absl::StrCat(gpus)});
    env.insert({"SLURM_GPUS_PER_NODE", absl::StrCat(gpus)});
  }
  if (const uint64_t mem = spec.resources().memory_bytes_per_node(); mem > 0) {
    env.insert({"SLURM_MEM_PER_NODE", absl::StrCat(mem >> 20)});
  }
  if (text.size() > kMaxScriptBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        script, ": the script is ", text.size(), " bytes; xl carries it in "
        "the job, up to ", kMaxScriptBytes, ": move the bulk into a file the "
        "script runs"));
  }
  spec.add_command("/bin/bash");
  spec.add_command("-c");
  spec.add_command(kPrelude);
  spec.add_command(script);
  spec.add_command(std::string(text));
  for (const std::string& a : script_args) spec.add_command(a);
  return spec;
}

}  // namespace xl::client
