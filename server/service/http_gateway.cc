// Over 600 lines: one HTTP front per API call of the dashboard's JSON API,
// each a few lines of mapping to the same controller call the gRPC service
// makes; the next cut is one file per service, as service/ has for gRPC.
#include "server/service/http_gateway.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/proto_text.h"
#include "server/service/scheduler_server.h"
#include "xl/v1/auth.pb.h"

namespace xl::service {
namespace {

namespace pb = google::protobuf;

// What the dashboard may call: reads only.
const std::set<std::string>& ReadMethods() {
  static const auto* kMethods = new std::set<std::string>{
      "xl.v1.JobService/GetJob",        "xl.v1.JobService/ExplainJob",
      "xl.v1.JobService/ListJobs",      "xl.v1.JobService/GetQueue",
      "xl.v1.JobService/GetJobMetrics", "xl.v1.JobService/PlanResources",
      "xl.v1.JobService/WatchJob",      "xl.v1.JobService/StreamLogs",
      "xl.v1.NodeService/ListNodes",    "xl.v1.NodeService/GetNode",
      "xl.v1.QueueService/ListQueues",  "xl.v1.QueueService/GetShares",
      "xl.v1.AuthService/WhoAmI"};
  return *kMethods;
}

// A server-streaming call ends once it sent this many messages, or sent
// nothing for kStreamIdle (what is stored has been sent; the rest would be
// live updates, which the page polls for).
constexpr int kMaxStreamMessages = 2000;
// ...or once its reply passes this size (the next call goes on from the
// last seq it got).
constexpr size_t kMaxStreamBytes = 4 << 20;
constexpr auto kStreamIdle = std::chrono::milliseconds(300);
constexpr auto kCallDeadline = std::chrono::seconds(10);

int HttpStatusOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK: return 200;
    case grpc::INVALID_ARGUMENT:
    case grpc::FAILED_PRECONDITION:
    case grpc::OUT_OF_RANGE: return 400;
    case grpc::UNAUTHENTICATED: return 401;
    case grpc::PERMISSION_DENIED: return 403;
    case grpc::NOT_FOUND: return 404;
    case grpc::ALREADY_EXISTS:
    case grpc::ABORTED: return 409;
    case grpc::RESOURCE_EXHAUSTED: return 429;
    case grpc::UNIMPLEMENTED: return 501;
    case grpc::UNAVAILABLE: return 503;
    case grpc::DEADLINE_EXCEEDED: return 504;
    default: return 500;
  }
}

http::Response JsonResponse(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

http::Response JsonError(int status, absl::string_view code,
                         absl::string_view message) {
  return JsonResponse(
      status, absl::StrCat("{\"code\":", JsonQuote(code),
                           ",\"message\":", JsonQuote(message), "}"));
}

http::Response GrpcError(const grpc::Status& s) {
  return JsonError(
      HttpStatusOf(s.error_code()),
      absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
      s.error_message());
}

std::string ToJson(const pb::Message& m) {
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)pb::util::MessageToJsonString(m, &out, options);
  return out;
}

// --- /metrics: the model's families, built at scrape time ---

prometheus::MetricFamily Family(std::string name, std::string help,
                                prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void AddGauge(prometheus::MetricFamily* f,
              std::vector<prometheus::ClientMetric::Label> labels,
              double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f->metric.push_back(std::move(m));
}

// `jobs_of`: see HttpGateway::Scrape.
std::vector<prometheus::MetricFamily> ModelFamilies(
    const control::ModelMetrics& mm, const std::string* jobs_of) {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  auto jobs = Family("xl_jobs",
                     "Jobs the scheduler keeps, by state and queue (finished "
                     "ones until retention forgets them)",
                     MetricType::Gauge);
  for (const auto& [key, n] : mm.jobs) {
    AddGauge(&jobs, {{"state", key.first}, {"queue", key.second}}, n);
  }
  out.push_back(std::move(jobs));
  auto pending = Family(
      "xl_pending_jobs",
      "Pending jobs by queue and why they wait: resources, quota, "
      "dependency, fenced, reserved, preempting, unplaced",
      MetricType::Gauge);
  for (const auto& [key, n] : mm.pending) {
    AddGauge(&pending, {{"queue", key.first}, {"reason", key.second}}, n);
  }
  out.push_back(std::move(pending));
  auto nodes = Family("xl_nodes", "Nodes by state (READY, DRAINED, LOST)",
                      MetricType::Gauge);
  for (const auto& [state, n] : mm.nodes) {
    AddGauge(&nodes, {{"state", state}}, n);
  }
  out.push_back(std::move(nodes));
  auto capacity = Family("xl_gpus_capacity",
                         "GPUs on nodes not lost, by model", MetricType::Gauge);
  auto allocated = Family("xl_gpus_allocated",
                          "GPUs held by jobs' ranks, by model",
                          MetricType::Gauge);
  auto free = Family("xl_gpus_free",
                     "GPUs on READY connected nodes that no rank holds, by "
                     "model",
                     MetricType::Gauge);
  for (const auto& [model, g] : mm.gpus) {
    AddGauge(&capacity, {{"model", model}}, g.capacity);
    AddGauge(&allocated, {{"model", model}}, g.allocated);
    AddGauge(&free, {{"model", model}}, g.free);
  }
  out.push_back(std::move(capacity));
  out.push_back(std::move(allocated));
  out.push_back(std::move(free));
  auto age = Family("xl_agent_heartbeat_age_seconds",
                    "Seconds since each connected node's last heartbeat",
                    MetricType::Gauge);
  for (const auto& [node, seconds] : mm.heartbeat_age) {
    AddGauge(&age, {{"node", node}}, seconds);
  }
  out.push_back(std::move(age));
  struct JobGauge {
    const char* name;
    const char* help;
    double (*value)(const v1::TrainMetrics&);
    // A series only where the value is known (> 0).
    bool only_positive = false;
  };
  static const JobGauge kJobGauges[] = {
      {"xl_job_step", "The last step a running training job reported",
       [](const v1::TrainMetrics& m) { return static_cast<double>(m.step()); }},
      {"xl_job_loss", "The training loss it reported last",
       [](const v1::TrainMetrics& m) { return m.loss(); }},
      {"xl_job_samples_per_second", "Samples per second, all ranks",
       [](const v1::TrainMetrics& m) { return m.samples_per_second(); }},
      {"xl_job_mfu_ratio",
       "Model FLOPs utilization (0..1) against the GPU's dense peak in "
       "the precision the job trains in (bf16/fp16 tensor cores, fp32 "
       "without TF32); absent where the peak is unknown (CPU)",
       [](const v1::TrainMetrics& m) { return m.mfu(); }, true},
      {"xl_job_allreduce_bus_bandwidth_bytes_per_second",
       "All-reduce bus bandwidth (2(n-1)/n x bytes over the gradient "
       "buckets' own all-reduce times)",
       [](const v1::TrainMetrics& m) { return m.allreduce_bus_gbps() * 1e9 / 8; }},
      {"xl_job_peak_memory_bytes", "Peak memory of rank 0 (GPU or host)",
       [](const v1::TrainMetrics& m) {
         return static_cast<double>(m.peak_memory_bytes());
       }},
  };
  for (const JobGauge& g : kJobGauges) {
    auto f = Family(g.name, g.help, MetricType::Gauge);
    for (const auto& t : mm.training) {
      if (jobs_of != nullptr && t.user != *jobs_of) continue;
      const double v = g.value(t.metrics);
      if (g.only_positive && v <= 0) continue;
      AddGauge(&f, {{"job", t.job}, {"queue", t.queue}, {"user", t.user}}, v);
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpGateway>> HttpGateway::Start(
    GatewayOptions opts, control::Controller* controller,
    control::SchedulerTelemetry* telemetry) {
  std::unique_ptr<HttpGateway> g(new HttpGateway());
  g->opts_ = std::move(opts);
  g->controller_ = controller;
  g->telemetry_ = telemetry;
  http::ServerOptions http_opts;
  http_opts.listen = g->opts_.listen;
  http_opts.tls_cert_file = g->opts_.tls_cert_file;
  http_opts.tls_key_file = g->opts_.tls_key_file;
  HttpGateway* raw = g.get();
  auto http = http::Server::Start(
      http_opts, [raw](const http::Request& req) { return raw->Handle(req); });
  if (!http.ok()) {
    return absl::Status(http.status().code(),
                        absl::StrCat("--metrics-listen: ",
                                     http.status().message()));
  }
  g->http_ = std::move(*http);
  return g;
}

HttpGateway::~HttpGateway() { Stop(); }

void HttpGateway::Attach(grpc::Server* server) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReplyBytes);
  auto channel = server->InProcessChannel(args);
  absl::MutexLock lock(&stub_mu_);
  channel_ = channel;
  stub_ = std::make_shared<grpc::GenericStub>(channel);
}

std::optional<HttpGateway::Scraper> HttpGateway::TokenUser(
    const std::string& authorization) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&tokens_mu_);
    auto it = accepted_.find(authorization);
    // A clock stepped back counts as expired.
    if (it != accepted_.end() && now - it->second.at < kTokenReuse &&
        now >= it->second.at) {
      return it->second;
    }
  }
  http::Request who;
  who.method = "POST";
  who.headers["authorization"] = authorization;
  http::Response r = Api(who, "xl.v1.AuthService/WhoAmI");
  if (r.status != 200) return std::nullopt;
  v1::WhoAmIResponse me;
  pb::util::JsonParseOptions lenient;
  lenient.ignore_unknown_fields = true;
  if (!pb::util::JsonStringToMessage(r.body, &me, lenient).ok() ||
      me.kind() != "user") {
    return std::nullopt;
  }
  Scraper s{me.name(), me.admin(), now};
  absl::MutexLock lock(&tokens_mu_);
  if (accepted_.size() > 1000) accepted_.clear();  // bounded
  accepted_[authorization] = s;
  return s;
}

void HttpGateway::Stop() {
  if (http_) http_->Stop();
}

std::string HttpGateway::Scrape(const std::string* jobs_of) {
  std::vector<prometheus::MetricFamily> families =
      telemetry_->registry().Collect();
  std::shared_ptr<const control::ModelMetrics> model;
  {
    // One walk of the model serves every scrape within kModelReuse, and
    // scrapes that arrive during a walk wait for it rather than start
    // their own: however many scrapers there are, the controller's lock
    // is held for this at most once a second.
    absl::MutexLock lock(&model_mu_);
    const absl::Time now = absl::Now();
    if (controller_ == nullptr) {
      // A replica that follows: no model; its role and term only.
      return prometheus::TextSerializer().Serialize(families);
    }
    if (model_ == nullptr || now - model_at_ >= kModelReuse ||
        now < model_at_) {
      model_ = std::make_shared<const control::ModelMetrics>(
          controller_->CollectMetrics());
      model_at_ = now;
    }
    model = model_;
  }
  for (auto& f : ModelFamilies(*model, jobs_of)) {
    families.push_back(std::move(f));
  }
  return prometheus::TextSerializer().Serialize(families);
}

std::string HostOf(const std::string& host_header) {
  std::string h = absl::AsciiStrToLower(host_header);
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    if (close == std::string::npos) return "";
    return h.substr(0, close + 1);
  }
  const size_t colon = h.find(':');
  if (colon != std::string::npos) h.resize(colon);
  if (!h.empty() && h.back() == '.') h.pop_back();  // "localhost."
  return h;
}

bool HostAllowed(const std::string& host, const std::string& hostname,
                 const std::vector<std::string>& allowed) {
  if (host.empty()) return false;
  in_addr v4;
  in6_addr v6;
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return true;
  if (host.front() == '[' &&
      ::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6) ==
          1) {
    return true;
  }
  if (host == "localhost" || absl::EndsWith(host, ".localhost")) return true;
  if (!hostname.empty() && host == absl::AsciiStrToLower(hostname)) {
    return true;
  }
  for (const std::string& a : allowed) {
    if (host == absl::AsciiStrToLower(a)) return true;
  }
  return false;
}

http::Response HttpGateway::Handle(const http::Request& req) {
  if (req.path == "/healthz") return http::TextResponse(200, "ok");
  // Readiness: the API is served here (a replicated scheduler's leader,
  // or a scheduler that is not replicated); a follower says 503, so that a
  // Kubernetes Service or a load balancer sends callers to the leader.
  if (req.path == "/readyz") {
    return controller_ != nullptr
               ? http::TextResponse(200, "leader")
               : http::TextResponse(503, "follower: the leader serves the "
                                         "API (xlctl servers names it)");
  }
  if (opts_.tls_cert_file.empty()) {
    // DNS rebinding: a page of evil.example whose name now resolves here
    // would read the API with the operator's browser; its requests name
    // evil.example as Host.
    char name[256] = {0};
    if (::gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
    const std::string host = HostOf(req.Header("host"));
    if (!HostAllowed(host, name, opts_.allowed_hosts)) {
      return http::TextResponse(
          403, absl::StrCat("Host '", absl::CEscape(req.Header("host").substr(0, 64)),
                            "' is not a name of this scheduler (refused "
                            "against DNS rebinding); open it by its IP "
                            "address or localhost, or start xl-scheduler "
                            "with --dashboard-host NAME"));
    }
  }
  if (absl::StartsWith(req.path, "/api/")) {
    // A page of another origin may not call the API with the user's
    // browser (no CORS is offered either).
    const std::string origin = req.Header("origin");
    if (!origin.empty()) {
      absl::string_view rest = origin;
      const bool scheme = absl::ConsumePrefix(&rest, "http://") ||
                          absl::ConsumePrefix(&rest, "https://");
      if (!scheme || absl::AsciiStrToLower(rest) !=
                         absl::AsciiStrToLower(req.Header("host"))) {
        return JsonError(403, "PERMISSION_DENIED",
                         absl::StrCat("the API answers pages of this origin "
                                      "only, not ",
                                      absl::CEscape(origin.substr(0, 64)),
                                      "; call it from the dashboard, xlctl "
                                      "or a client without an Origin"));
      }
    }
  }
  if (req.path == "/metrics") {
    if (req.method != "GET") return http::TextResponse(405, "use GET");
    // The per-job series name jobs and users and show a job's progress
    // (loss, step): with tokens, a user's own jobs' and an admin's all
    // (security review F10). --metrics-without-token serves all to anyone,
    // as the operator chose.
    std::optional<Scraper> scraper;
    if (opts_.auth_enabled && !opts_.metrics_without_token) {
      const std::string auth = req.Header("authorization");
      if (!auth.empty()) scraper = TokenUser(auth);
      if (!scraper.has_value()) {
        http::Response r = http::TextResponse(
            401,
            "/metrics needs a user token here: send \"Authorization: Bearer "
            "<token>\" (Prometheus: authorization.credentials_file), or start "
            "the scheduler with --metrics-without-token");
        r.headers.emplace_back("WWW-Authenticate", "Bearer");
        return r;
      }
    }
    http::Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = Scrape(scraper.has_value() && !scraper->admin ? &scraper->user
                                                            : nullptr);
    return r;
  }
  if (req.path == "/api/info") {
    return JsonResponse(
        200, absl::StrCat("{\"auth_enabled\":",
                          opts_.auth_enabled ? "true" : "false",
                          ",\"version\":", JsonQuote(opts_.version),
                          "}"));
  }
  if (absl::StartsWith(req.path, "/api/")) {
    const std::string method = req.path.substr(5);
    if (ReadMethods().count(method) == 0) {
      return JsonError(
          404, "NOT_FOUND",
          absl::StrCat("no API method '", method,
                       "' here; the dashboard's API serves the read methods "
                       "of xl.v1 (e.g. POST /api/xl.v1.JobService/ListJobs); "
                       "use xlctl or gRPC for the rest"));
    }
    if (req.method != "POST") {
      return JsonError(405, "INVALID_ARGUMENT",
                       "POST the request message as JSON");
    }
    return Api(req, method);
  }
  if (req.method != "GET") return http::TextResponse(405, "use GET");
  const std::string path = req.path == "/" ? "/index.html" : req.path;
  const auto& assets = WebAssets();
  auto it = assets.find(path);
  if (it == assets.end()) {
    return http::TextResponse(
        404, absl::StrCat("nothing at ", req.path,
                          "; the dashboard is at /, metrics at /metrics"));
  }
  http::Response r;
  r.content_type = it->second.content_type;
  r.body = it->second.body;
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; frame-ancestors 'none'");
  r.headers.emplace_back("Cache-Control", "no-cache");
  return r;
}

http::Response HttpGateway::Api(const http::Request& req,
                                const std::string& method) {
  const std::string full = absl::StrReplaceAll(method, {{"/", "."}});
  const pb::MethodDescriptor* md =
      pb::DescriptorPool::generated_pool()->FindMethodByName(full);
  const pb::Message* in_proto =
      md == nullptr
          ? nullptr
          : pb::MessageFactory::generated_factory()->GetPrototype(
                md->input_type());
  const pb::Message* out_proto =
      md == nullptr
          ? nullptr
          : pb::MessageFactory::generated_factory()->GetPrototype(
                md->output_type());
  if (in_proto == nullptr || out_proto == nullptr) {
    return JsonError(501, "UNIMPLEMENTED",
                     absl::StrCat(method, " is not compiled into this "
                                          "scheduler"));
  }
  std::unique_ptr<pb::Message> request(in_proto->New());
  const std::string body = req.body.empty() ? "{}" : req.body;
  pb::util::JsonParseOptions parse;
  if (auto st = pb::util::JsonStringToMessage(body, request.get(), parse);
      !st.ok()) {
    return JsonError(400, "INVALID_ARGUMENT",
                     absl::StrCat("the body is not a ",
                                  md->input_type()->full_name(),
                                  " in JSON: ", st.ToString()));
  }
  std::shared_ptr<grpc::GenericStub> stub;
  {
    absl::MutexLock lock(&stub_mu_);
    stub = stub_;
  }
  if (stub == nullptr) {
    return JsonError(503, "UNAVAILABLE", "the scheduler is starting; retry");
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  // gRPC aborts the process on a metadata value it cannot send: only
  // printable ASCII passes.
  for (const char* name : {"authorization", "x-xl-user"}) {
    const std::string value = req.Header(name);
    if (value.empty()) continue;
    for (unsigned char c : value) {
      if (c < 0x20 || c > 0x7e) {
        return JsonError(400, "INVALID_ARGUMENT",
                         absl::StrCat("the ", name,
                                      " header must be printable ASCII"));
      }
    }
    // With auth off the caller names itself (x-xl-user), as with the
    // gRPC API.
    ctx.AddMetadata(name, value);
  }
  std::string bytes;
  request->SerializeToString(&bytes);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer send(&slice, 1);
  auto decode = [&](const grpc::ByteBuffer& buf,
                    std::string* json) -> bool {
    std::vector<grpc::Slice> slices;
    if (!buf.Dump(&slices).ok()) return false;
    std::string raw;
    for (const grpc::Slice& s : slices) {
      raw.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    std::unique_ptr<pb::Message> reply(out_proto->New());
    if (!reply->ParseFromString(raw)) return false;
    *json = ToJson(*reply);
    return true;
  };
  const std::string path = "/" + method;

  if (!md->server_streaming()) {
    grpc::ByteBuffer received;
    absl::Mutex mu;
    bool done = false;
    grpc::Status status;
    stub->UnaryCall(&ctx, path, grpc::StubOptions(), &send, &received,
                     [&](grpc::Status s) {
                       absl::MutexLock l(&mu);
                       status = std::move(s);
                       done = true;
                     });
    {
      absl::MutexLock l(&mu);
      mu.Await(absl::Condition(&done));
    }
    if (!status.ok()) return GrpcError(status);
    std::string json;
    if (!decode(received, &json)) {
      return JsonError(500, "INTERNAL", "the reply could not be decoded");
    }
    return JsonResponse(200, std::move(json));
  }

  // Server streaming, through a completion queue: every operation is
  // waited for before the next starts, so each Next() returns its own tag.
  grpc::CompletionQueue cq;
  auto call = stub->PrepareCall(&ctx, path, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](void* want) {
    return cq.Next(&tag, &ok) && tag == want && ok;
  };
  std::string json = "{\"messages\":[";
  int count = 0;
  bool sent = false;
  call->StartCall(reinterpret_cast<void*>(1));
  if (step(reinterpret_cast<void*>(1))) {
    call->Write(send, reinterpret_cast<void*>(2));
    if (step(reinterpret_cast<void*>(2))) {
      call->WritesDone(reinterpret_cast<void*>(3));
      sent = step(reinterpret_cast<void*>(3));
    }
  }
  bool cancelled = false;
  while (sent && count < kMaxStreamMessages && json.size() < kMaxStreamBytes) {
    grpc::ByteBuffer buf;
    call->Read(&buf, reinterpret_cast<void*>(4));
    auto next = cq.AsyncNext(&tag, &ok,
                             std::chrono::system_clock::now() + kStreamIdle);
    if (next == grpc::CompletionQueue::TIMEOUT) {
      ctx.TryCancel();
      cancelled = true;
      cq.Next(&tag, &ok);  // the Read, failed by the cancel
      break;
    }
    if (next != grpc::CompletionQueue::GOT_EVENT || !ok) break;
    std::string one;
    if (!decode(buf, &one)) break;
    if (count++ > 0) json += ",";
    json += one;
  }
  if ((count >= kMaxStreamMessages || json.size() >= kMaxStreamBytes) &&
      !cancelled) {
    ctx.TryCancel();
    cancelled = true;
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok() && !(cancelled && status.error_code() == grpc::CANCELLED)) {
    return GrpcError(status);
  }
  json += "]}";
  return JsonResponse(200, std::move(json));
}

}  // namespace xl::service
