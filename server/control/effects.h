// Effects: what one step of the controller does, as one value. Every state
// change the scheduler makes goes through Controller::Apply(Effects):
//
//   1. `changes` are written to the store in one transaction (a list of
//      values, store/changes.h: the same list could be a replicated log's
//      entry);
//   2. once they are on disk, and unless the model was reloaded from the
//      store in between (a failed write), `apply` runs under the
//      controller's lock (the model's side of the step), then `then`
//      without it (watchers, acknowledgements), and `sends` go to the
//      agents;
//   3. `answer` is told the outcome in every case: OK once on disk, else
//      UNAVAILABLE with what the caller should do.
//
// A failed write changes nothing an agent or a client sees: no message goes
// out, the caller is told, and the scheduler enters degraded mode (it acts
// on nothing until a probe commits and the model is reloaded from disk).
#ifndef XL_SERVER_CONTROL_EFFECTS_H_
#define XL_SERVER_CONTROL_EFFECTS_H_

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/state/agent_connection.h"
#include "server/store/changes.h"
#include "xl/v1/agent.pb.h"

namespace xl::control {

// Messages to send once a write has committed.
using Sends = state::Sends;

struct Effects {
  store::Changes changes;
  // The model's side, run with the controller's lock held (in the same
  // critical section that checks no reload came in between).
  std::function<void()> apply;
  // Run after `apply`, without the lock (it takes it if it needs it).
  std::function<void()> then;
  Sends sends;
  std::function<void(absl::Status)> answer;
};

// Sends each message (a connection that is gone drops it).
void SendAll(const Sends& sends);

}  // namespace xl::control

#endif  // XL_SERVER_CONTROL_EFFECTS_H_
