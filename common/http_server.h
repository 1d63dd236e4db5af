// HttpServer: a small HTTP/1.1 server for the scheduler's and the agent's
// side ports (Prometheus /metrics, the dashboard, its JSON API). One
// connection is one request (Connection: close); optional TLS with the
// process's own certificate. It is built for hostile callers, not speed:
// headers and bodies are bounded, every connection has a total deadline
// (a slow sender is cut off), and connections beyond the limit get 503 at
// once instead of queueing.
//
// Threading: Start() spawns an accept thread; each connection is served on
// a thread of its own, calling the handler there (the handler must be
// thread-safe). Stop() (or the destructor) closes the port and waits for
// every connection's thread.
#ifndef XL_COMMON_HTTP_SERVER_H_
#define XL_COMMON_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace xl::http {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // percent-decoding is the handler's
  std::string query;   // after '?', without it
  // Header names in lower case.
  std::map<std::string, std::string> headers;
  std::string body;

  // The header's value, or "".
  std::string Header(const std::string& lower_name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// A response with `status` and a plain-text body.
Response TextResponse(int status, std::string body);

using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  // HOST:PORT; port 0 picks a free one.
  std::string listen;
  // PEM certificate and key: serve HTTPS. Both, or neither.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Connections served at once, in all and from one peer address; more
  // are answered 503 and closed.
  int max_connections = 64;
  int max_connections_per_peer = 8;
  // The TLS handshake and the whole request must arrive within
  // head_deadline; the connection's whole life (handler and reply too) is
  // at most deadline. Monotonic.
  absl::Duration head_deadline = absl::Seconds(3);
  absl::Duration deadline = absl::Seconds(15);
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
};

class Server {
 public:
  // Binds and starts serving; INVALID_ARGUMENT for a bad address or TLS
  // file, UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions opts,
                                                       Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  bool tls() const { return ssl_ctx_ != nullptr; }
  // "http://HOST:PORT" or "https://HOST:PORT".
  std::string url() const;
  void Stop();

 private:
  Server() = default;
  void AcceptLoop();
  void Serve(int fd);

  ServerOptions opts_;
  Handler handler_;
  std::string host_;
  int port_ = 0;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  void* ssl_ctx_ = nullptr;  // SSL_CTX*, kept out of this header
  std::thread acceptor_;

  absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int> active_fds_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ = false;
};

}  // namespace xl::http

#endif  // XL_COMMON_HTTP_SERVER_H_
