// The agent's Prometheus /metrics (xl-agent --metrics-listen): whether it is
// connected, how long since the scheduler last acknowledged it, its running
// ranks, its GPUs and the rank exits it saw. Read from the session and the
// supervisor at scrape time; nothing here names a job's secrets, so the
// port takes no credential (bind it where only Prometheus reaches).
// Thread-safe as the session and supervisor are.
#ifndef XL_AGENT_AGENT_METRICS_H_
#define XL_AGENT_AGENT_METRICS_H_

#include <string>

#include "agent/session/session.h"
#include "agent/supervisor/supervisor.h"
#include "xl/v1/agent.pb.h"

namespace xl::agent {

// The Prometheus text exposition of the agent's metrics now.
std::string ScrapeAgent(const Session& session, const RankController& ranks,
                        const v1::NodeInventory& inventory);

}  // namespace xl::agent

#endif  // XL_AGENT_AGENT_METRICS_H_
