#include "client/sbatch.h"

#include <cstdlib>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace xl::client {
namespace {

// Run by bash -c before the script (the script is $0, its arguments $@):
// Slurm's per-task variables from xl's, and `srun` as a function that runs
// its command in place, skipping srun's own options.
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
      --ntasks|--nodes|--cpus-per-task|--gpus|--gres|--mpi|--ntasks-per-node|\
--export|--time|--job-name|--output|--error|--cpu-bind|--distribution|\
--gpus-per-task|--gpus-per-node|--mem|--nodelist|--exclude|--partition|\
--chdir|--label-format) shift 2 ;;
      -[nNcCtJpoeGwxmBDd]) shift 2 ;;
      -*) shift ;;
      *) break ;;
    esac
  done
  "$@"
}
export -f srun
exec /bin/bash "$0" "$@"
)sh";

// An option xl takes as informational only: accepted, and said so.
bool Informational(absl::string_view name) {
  return name == "account" || name == "mail-type" || name == "mail-user" ||
         name == "comment" || name == "output" || name == "error" ||
         name == "open-mode" || name == "requeue" || name == "wckey";
}

// Short option letters and the long options they stand for.
const std::map<char, std::string>& ShortOptions() {
  static const auto* kShort = new std::map<char, std::string>{
      {'N', "nodes"},     {'n', "ntasks"},    {'c', "cpus-per-task"},
      {'t', "time"},      {'J', "job-name"},  {'p', "partition"},
      {'o', "output"},    {'e', "error"},     {'D', "chdir"},
      {'d', "dependency"}, {'G', "gpus"},     {'A', "account"},
      {'a', "array"},     {'w', "nodelist"},  {'x', "exclude"},
      {'C', "constraint"}, {'q', "qos"},      {'s', "oversubscribe"}};
  return *kShort;
}

// Options that take no value.
bool IsFlag(absl::string_view name) {
  return name == "exclusive" || name == "requeue" || name == "no-requeue" ||
         name == "oversubscribe" || name == "wait" || name == "hold";
}

// Slurm sizes: a number with K, M (the default), G or T.
bool ParseSlurmMemory(absl::string_view text, uint64_t* bytes) {
  if (text.empty()) return false;
  uint64_t unit = 1ull << 20;
  const char last = absl::ascii_toupper(text.back());
  if (!absl::ascii_isdigit(text.back())) {
    switch (last) {
      case 'K': unit = 1ull << 10; break;
      case 'M': unit = 1ull << 20; break;
      case 'G': unit = 1ull << 30; break;
      case 'T': unit = 1ull << 40; break;
      default: return false;
    }
    text.remove_suffix(1);
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(text, &n)) return false;
  *bytes = n * unit;
  return true;
}

// "gpu:4" or "gpu:a100:4" (Slurm's gres and --gpus-per-node without the
// "gpu:" prefix); the count and the model ("" for any).
bool ParseGpus(absl::string_view text, bool gres, int* count,
               std::string* model) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (gres) {
    if (parts.empty() || parts[0] != "gpu") return false;
    parts.erase(parts.begin());
    if (parts.empty()) {  // "gpu" alone is one GPU
      *count = 1;
      return true;
    }
  }
  if (parts.size() > 2 || !absl::SimpleAtoi(parts.back(), count) ||
      *count < 0) {
    return false;
  }
  if (parts.size() == 2) *model = parts[0];
  return true;
}

}  // namespace

bool ParseSlurmTime(absl::string_view text, int64_t* seconds) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "unlimited" || lower == "infinite") {
    *seconds = 0;
    return true;
  }
  int64_t days = 0;
  absl::string_view rest = text;
  const size_t dash = rest.find('-');
  const bool has_days = dash != absl::string_view::npos;
  if (has_days) {
    if (!absl::SimpleAtoi(rest.substr(0, dash), &days) || days < 0) {
      return false;
    }
    rest = rest.substr(dash + 1);
  }
  std::vector<absl::string_view> parts = absl::StrSplit(rest, ':');
  std::vector<int64_t> v;
  for (absl::string_view p : parts) {
    int64_t n = 0;
    if (p.empty() || !absl::SimpleAtoi(p, &n) || n < 0) return false;
    v.push_back(n);
  }
  int64_t s = 0;
  if (has_days) {
    // D-HH, D-HH:MM, D-HH:MM:SS
    if (v.size() > 3) return false;
    s = v[0] * 3600 + (v.size() > 1 ? v[1] * 60 : 0) + (v.size() > 2 ? v[2] : 0);
  } else if (v.size() == 1) {
    s = v[0] * 60;  // minutes
  } else if (v.size() == 2) {
    s = v[0] * 60 + v[1];  // MM:SS
  } else if (v.size() == 3) {
    s = v[0] * 3600 + v[1] * 60 + v[2];
  } else {
    return false;
  }
  *seconds = days * 86400 + s;
  return true;
}

absl::StatusOr<v1::JobSpec> JobSpecFromSbatch(
    const std::string& path, absl::string_view text,
    const std::vector<std::string>& args) {
  std::optional<int> nodes, min_nodes, ntasks, per_node, cpus_per_task,
      gpus_per_node, gpus_total, gpus_per_task;
  std::string gpu_model;
  v1::JobSpec spec;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    absl::string_view s = absl::StripAsciiWhitespace(line);
    if (line_no == 1 && absl::StartsWith(s, "#!")) continue;
    if (s.empty()) continue;
    if (s[0] != '#') break;  // the first command ends the options
    if (!absl::ConsumePrefix(&s, "#SBATCH")) continue;
    if (!s.empty() && !absl::ascii_isspace(s[0])) continue;  // "#SBATCHX"
    // A comment after the options ends them.
    if (size_t hash = s.find(" #"); hash != absl::string_view::npos) {
      s = s.substr(0, hash);
    }
    const std::string shown(absl::StripAsciiWhitespace(line));
    auto refuse = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": `", shown, "`: ", why));
    };
    std::vector<std::string> words =
        absl::StrSplit(s, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    for (size_t i = 0; i < words.size(); ++i) {
      std::string name, value;
      bool has_value = false;
      const std::string& w = words[i];
      if (absl::StartsWith(w, "--")) {
        const size_t eq = w.find('=');
        name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
        if (eq != std::string::npos) {
          value = w.substr(eq + 1);
          has_value = true;
        }
      } else if (w.size() >= 2 && w[0] == '-') {
        auto it = ShortOptions().find(w[1]);
        if (it == ShortOptions().end()) {
          return refuse(absl::StrCat("-", std::string(1, w[1]),
                                     " is not an sbatch option xl knows; "
                                     "remove it or use its long form"));
        }
        name = it->second;
        if (w.size() > 2) {
          value = w.substr(w[2] == '=' ? 3 : 2);
          has_value = true;
        }
      } else {
        return refuse(absl::StrCat("'", w, "' is not an option"));
      }
      if (!has_value && !IsFlag(name)) {
        if (i + 1 >= words.size()) {
          return refuse(absl::StrCat("--", name, " needs a value"));
        }
        value = words[++i];
      }
      auto number = [&](std::optional<int>* out) -> absl::Status {
        int n = 0;
        if (!absl::SimpleAtoi(value, &n) || n < 1) {
          return refuse(absl::StrCat("--", name, ": '", value,
                                     "' is not a number of at least 1"));
        }
        *out = n;
        return absl::OkStatus();
      };
      absl::Status st;
      if (name == "nodes") {
        std::vector<std::string> range = absl::StrSplit(value, '-');
        int lo = 0, hi = 0;
        if (range.size() == 1 && absl::SimpleAtoi(range[0], &hi) && hi >= 1) {
          nodes = hi;
        } else if (range.size() == 2 && absl::SimpleAtoi(range[0], &lo) &&
                   absl::SimpleAtoi(range[1], &hi) && lo >= 1 && hi >= lo) {
          nodes = hi;
          if (lo < hi) min_nodes = lo;  // an elastic job: at least lo
        } else {
          return refuse("--nodes takes N or MIN-MAX, like 4 or 2-4");
        }
      } else if (name == "ntasks") {
        st = number(&ntasks);
      } else if (name == "ntasks-per-node") {
        st = number(&per_node);
      } else if (name == "cpus-per-task") {
        st = number(&cpus_per_task);
      } else if (name == "time") {
        int64_t seconds = 0;
        if (!ParseSlurmTime(value, &seconds)) {
          return refuse(
              "--time takes minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
              "D-HH:MM:SS or UNLIMITED");
        }
        if (seconds > 0) spec.mutable_time_limit()->set_seconds(seconds);
      } else if (name == "job-name") {
        spec.set_name(value);
      } else if (name == "partition") {
        if (value.find(',') != std::string::npos) {
          return refuse(
              "a job goes to one queue in xl; name one partition (queue)");
        }
        spec.set_queue(value);
      } else if (name == "gres") {
        int n = 0;
        if (!ParseGpus(value, /*gres=*/true, &n, &gpu_model)) {
          return refuse(
              "only GPUs are generic resources here: --gres=gpu:N or "
              "--gres=gpu:MODEL:N");
        }
        gpus_per_node = n;
      } else if (name == "gpus-per-node") {
        int n = 0;
        if (!ParseGpus(value, /*gres=*/false, &n, &gpu_model)) {
          return refuse("--gpus-per-node takes N or MODEL:N");
        }
        gpus_per_node = n;
      } else if (name == "gpus") {
        int n = 0;
        if (!ParseGpus(value, /*gres=*/false, &n, &gpu_model)) {
          return refuse("--gpus takes N or MODEL:N");
        }
        gpus_total = n;
      } else if (name == "gpus-per-task") {
        int n = 0;
        if (!ParseGpus(value, /*gres=*/false, &n, &gpu_model)) {
          return refuse("--gpus-per-task takes N or MODEL:N");
        }
        gpus_per_task = n;
      } else if (name == "mem") {
        uint64_t bytes = 0;
        if (!ParseSlurmMemory(value, &bytes)) {
          return refuse("--mem takes a size per node such as 500M, 64G or 1T");
        }
        // --mem=0 is "all of the node's memory": no limit asked.
        spec.mutable_resources()->set_memory_bytes_per_node(bytes);
      } else if (name == "chdir") {
        spec.set_working_dir(value);
      } else if (name == "dependency") {
        absl::string_view dep = value;
        if (!absl::ConsumePrefix(&dep, "afterok:") ||
            dep.find_first_of(",?") != absl::string_view::npos) {
          return refuse(
              "only --dependency=afterok:ID[:ID...] has an equivalent "
              "(after_ok); submit after the other jobs end for the rest");
        }
        for (absl::string_view id : absl::StrSplit(dep, ':')) {
          spec.add_after_ok(std::string(id));
        }
      } else if (name == "export") {
        if (value == "ALL" || value == "NIL") continue;
        if (value == "NONE") {
          return refuse(
              "xl never passes the submitter's environment; drop "
              "--export=NONE (it is what xl does) or name the variables");
        }
        for (absl::string_view item : absl::StrSplit(value, ',')) {
          if (item == "ALL") continue;
          const size_t eq = item.find('=');
          if (eq != absl::string_view::npos) {
            (*spec.mutable_env())[std::string(item.substr(0, eq))] =
                std::string(item.substr(eq + 1));
            continue;
          }
          const char* v = std::getenv(std::string(item).c_str());
          if (v == nullptr) {
            return refuse(absl::StrCat("--export names ", item,
                                       ", which is not set here; set it, or "
                                       "give ", item, "=VALUE"));
          }
          (*spec.mutable_env())[std::string(item)] = v;
        }
      } else if (Informational(name)) {
        // Accepted; xl keeps output in `xlctl logs` and has no accounts or
        // mail.
      } else if (name == "exclusive") {
        return refuse(
            "xl allocates GPUs, not whole nodes; ask for every GPU of a node "
            "(--gres=gpu:8) to have it to yourself");
      } else if (name == "array") {
        return refuse(
            "job arrays are not supported; submit one job per index (a "
            "shell loop over xlctl submit)");
      } else if (name == "nodelist" || name == "constraint") {
        return refuse(absl::StrCat(
            "--", name,
            " has no equivalent: xl places by resources (GPU model with "
            "--gres=gpu:MODEL:N); remove it"));
      } else if (name == "exclude") {
        for (absl::string_view n : absl::StrSplit(value, ',')) {
          spec.mutable_resources()->add_exclude_nodes(std::string(n));
        }
      } else {
        return refuse(absl::StrCat("--", name,
                                   " is not an option xl can honour; remove "
                                   "it, or say it with xlctl submit's flags"));
      }
      if (!st.ok()) return st;
    }
  }
  // Tasks: Slurm runs one task per node unless told otherwise.
  v1::ResourceRequest* res = spec.mutable_resources();
  const int n_nodes = nodes.value_or(1);
  int rpn = 1;
  if (per_node) {
    rpn = *per_node;
    if (ntasks && *ntasks != rpn * n_nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": --ntasks=", *ntasks, " is not --nodes (", n_nodes,
          ") x --ntasks-per-node (", rpn, "); give two of the three"));
    }
  } else if (ntasks) {
    if (*ntasks % n_nodes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": --ntasks=", *ntasks, " does not divide evenly over ",
          n_nodes, " nodes; xl runs as many ranks on every node: give a "
          "multiple of --nodes or --ntasks-per-node"));
    }
    rpn = *ntasks / n_nodes;
  }
  res->set_nodes(n_nodes);
  if (min_nodes) res->set_min_nodes(*min_nodes);
  res->set_ranks_per_node(rpn);
  int gpn = gpus_per_node.value_or(0);
  if (gpus_per_task) gpn = *gpus_per_task * rpn;
  if (gpus_total) {
    if (*gpus_total % n_nodes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": --gpus=", *gpus_total, " does not divide evenly over ",
          n_nodes, " nodes; give --gpus-per-node instead"));
    }
    gpn = *gpus_total / n_nodes;
  }
  res->set_gpus_per_node(gpn);
  if (!gpu_model.empty()) res->add_gpu_models(gpu_model);
  if (cpus_per_task) res->set_cpus_per_node(*cpus_per_task * rpn);

  auto& env = *spec.mutable_env();
  env["SLURM_JOB_NAME"] = spec.name().empty() ? "sbatch" : spec.name();
  env["SLURM_JOB_PARTITION"] =
      spec.queue().empty() ? std::string("default") : spec.queue();
  if (cpus_per_task) env["SLURM_CPUS_PER_TASK"] = absl::StrCat(*cpus_per_task);
  if (spec.name().empty()) {
    const size_t slash = path.rfind('/');
    spec.set_name(slash == std::string::npos ? path : path.substr(slash + 1));
  }
  spec.add_command("/bin/bash");
  spec.add_command("-c");
  spec.add_command(kPrelude);
  spec.add_command(path);
  for (const std::string& a : args) spec.add_command(a);
  return spec;
}

}  // namespace xl::client
