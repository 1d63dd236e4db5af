#include "agent/agent_metrics.h"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <limits>
#include <map>
#include <utility>
#include <vector>

namespace xl::agent {
namespace {

prometheus::MetricFamily One(std::string name, std::string help,
                             prometheus::MetricType type, double value) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
  return f;
}

}  // namespace

std::string ScrapeAgent(const Session& session, const RankController& ranks,
                        const v1::NodeInventory& inventory) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  families.push_back(One("xl_agent_connected",
                         "1 while the agent's session with the scheduler is "
                         "registered, else 0",
                         MetricType::Gauge, session.connected() ? 1 : 0));
  const absl::Duration since = session.SinceLastAck();
  families.push_back(One(
      "xl_agent_scheduler_ack_age_seconds",
      "Seconds since the scheduler last acknowledged a heartbeat (+Inf: "
      "not since the lease was last lost); ranks stop when it passes the "
      "lease",
      MetricType::Gauge,
      since == absl::InfiniteDuration()
          ? std::numeric_limits<double>::infinity()
          : absl::ToDoubleSeconds(since)));
  int running = 0;
  for (const v1::RankStatus& st : ranks.Snapshot()) {
    if (st.state() == v1::RANK_RUNNING) ++running;
  }
  families.push_back(One("xl_agent_ranks_running",
                         "Ranks running on this node (under their shims)",
                         MetricType::Gauge, running));
  families.push_back(One("xl_agent_rank_exits_total",
                         "Rank exits and failures to start this agent "
                         "reported since it started",
                         MetricType::Counter,
                         static_cast<double>(session.rank_exits())));
  std::map<std::string, int> gpus;
  for (const v1::Gpu& g : inventory.gpus()) {
    ++gpus[g.model().empty() ? std::string("unknown") : g.model()];
  }
  prometheus::MetricFamily gpu_family;
  gpu_family.name = "xl_agent_gpus";
  gpu_family.help = "GPUs this agent reports, by model";
  gpu_family.type = MetricType::Gauge;
  for (const auto& [model, n] : gpus) {
    prometheus::ClientMetric m;
    m.label = {{"model", model}};
    m.gauge.value = n;
    gpu_family.metric.push_back(std::move(m));
  }
  families.push_back(std::move(gpu_family));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace xl::agent
