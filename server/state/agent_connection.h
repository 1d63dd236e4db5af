// AgentConnection: the scheduler's send side of one agent's stream, as the
// state and control layers see it. Implemented by the gRPC reactor; kept
// alive by shared_ptr so the node table may hold it past the stream's end.
#ifndef XL_SERVER_STATE_AGENT_CONNECTION_H_
#define XL_SERVER_STATE_AGENT_CONNECTION_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xl/v1/agent.pb.h"

namespace xl::state {

class AgentConnection {
 public:
  virtual ~AgentConnection() = default;
  // Queues `msg`; never blocks. False when the stream has already ended (the
  // message will never be delivered).
  virtual bool Send(const v1::SchedulerMessage& msg) = 0;
  // Ends the stream (the agent will reconnect).
  virtual void Close(const std::string& why) = 0;
  // The peer's IP address, for MASTER_ADDR when the agent gives none.
  virtual std::string PeerAddress() const = 0;
};

// Messages for agents, each with the connection it goes on (sent once what
// they announce is recorded).
using Sends = std::vector<
    std::pair<std::shared_ptr<AgentConnection>, v1::SchedulerMessage>>;

}  // namespace xl::state

#endif  // XL_SERVER_STATE_AGENT_CONNECTION_H_
