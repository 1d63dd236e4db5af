// How xlctl prints a Plan for people: the inputs, the memory per GPU, GPUs
// and nodes, which GPU models fit, storage, network and time, the warnings
// and the arithmetic. Text only, no I/O; safe from any thread.
#ifndef XL_CLIENT_PLAN_OUTPUT_H_
#define XL_CLIENT_PLAN_OUTPUT_H_

#include <string>

#include "xl/v1/plan.pb.h"

namespace xl::client {

// `source` says where the GPUs came from ("the live fleet", "the built-in
// catalogue").
std::string PlanText(const xl::v1::Plan& plan, const std::string& source);

}  // namespace xl::client

#endif  // XL_CLIENT_PLAN_OUTPUT_H_
