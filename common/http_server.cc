#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <system_error>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace xl::http {
namespace {

std::string OpenSslError() {
  char buf[256];
  unsigned long e = ERR_get_error();
  if (e == 0) return "unknown OpenSSL error";
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

const char* StatusText(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

// One connection's bytes, plain or TLS, each call bounded by the
// connection's deadline.
class Conn {
 public:
  using Steady = std::chrono::steady_clock;
  // Deadlines are on the monotonic clock: a wall-clock step neither
  // extends nor cuts a connection.
  Conn(int fd, SSL* ssl, Steady::time_point deadline)
      : fd_(fd), ssl_(ssl), deadline_(deadline) {}

  void set_deadline(Steady::time_point deadline) { deadline_ = deadline; }

  // Waits until fd is readable/writable or the deadline passes.
  bool Wait(short events) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline_ - Steady::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, events, 0};
      int n = poll(&p, 1,
                   static_cast<int>(std::min<int64_t>(left.count() + 1, 1000)));
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) return false;
    }
  }

  bool Handshake() {
    if (ssl_ == nullptr) return true;
    for (;;) {
      int r = SSL_accept(ssl_);
      if (r == 1) return true;
      int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_WANT_READ && Wait(POLLIN)) continue;
      if (e == SSL_ERROR_WANT_WRITE && Wait(POLLOUT)) continue;
      ERR_clear_error();
      return false;
    }
  }

  // Reads some bytes; 0 at the end, -1 on error or deadline.
  ssize_t Read(char* buf, size_t n) {
    for (;;) {
      if (ssl_ != nullptr) {
        int r = SSL_read(ssl_, buf, static_cast<int>(n));
        if (r > 0) return r;
        int e = SSL_get_error(ssl_, r);
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        if (e == SSL_ERROR_WANT_READ && Wait(POLLIN)) continue;
        if (e == SSL_ERROR_WANT_WRITE && Wait(POLLOUT)) continue;
        ERR_clear_error();
        return -1;
      }
      ssize_t r = recv(fd_, buf, n, 0);
      if (r >= 0) return r;
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && Wait(POLLIN)) continue;
      return -1;
    }
  }

  bool WriteAll(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      if (ssl_ != nullptr) {
        int r = SSL_write(ssl_, data.data() + off,
                          static_cast<int>(data.size() - off));
        if (r > 0) {
          off += r;
          continue;
        }
        int e = SSL_get_error(ssl_, r);
        if (e == SSL_ERROR_WANT_WRITE && Wait(POLLOUT)) continue;
        if (e == SSL_ERROR_WANT_READ && Wait(POLLIN)) continue;
        ERR_clear_error();
        return false;
      }
      ssize_t r = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (r > 0) {
        off += r;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && Wait(POLLOUT)) {
        continue;
      }
      return false;
    }
    return true;
  }

 private:
  int fd_;
  SSL* ssl_;
  Steady::time_point deadline_;
};

std::string Serialize(const Response& r, bool head) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ",
                                 StatusText(r.status), "\r\n");
  absl::StrAppend(&out, "Content-Type: ", r.content_type, "\r\n",
                  "Content-Length: ", r.body.size(), "\r\n",
                  "Connection: close\r\n",
                  "X-Content-Type-Options: nosniff\r\n");
  for (const auto& [name, value] : r.headers) {
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  out += "\r\n";
  if (!head) out += r.body;
  return out;
}

// Parses the request head (request line and headers); 0 or an HTTP error
// status.
int ParseHead(absl::string_view head, Request* req) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  if (lines.empty()) return 400;
  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) return 400;
  req->method = std::string(parts[0]);
  absl::string_view target = parts[1];
  if (target.empty() || target[0] != '/') return 400;
  const size_t q = target.find('?');
  req->path = std::string(target.substr(0, q));
  if (q != absl::string_view::npos) req->query = std::string(target.substr(q + 1));
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0) return 400;
    std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    // Control bytes have no business in a header (a bare \n would split
    // it, and handlers pass some values on).
    for (unsigned char c : name + value) {
      if ((c < 0x20 && c != '\t') || c == 0x7f) return 400;
    }
    req->headers[name] = std::move(value);
  }
  return 0;
}

}  // namespace

std::string Request::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

Response TextResponse(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  if (!r.body.empty() && r.body.back() != '\n') r.body += '\n';
  return r;
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions opts,
                                                      Handler handler) {
  std::unique_ptr<Server> s(new Server());
  s->opts_ = std::move(opts);
  s->handler_ = std::move(handler);
  const std::string& listen = s->opts_.listen;
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", listen, "' is not HOST:PORT; give one such as 127.0.0.1:9400 "
        "or 0.0.0.0:9400"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", listen, "': cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(found);
    return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
    const int err = errno;
    freeaddrinfo(found);
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", listen, ": ", strerror(err),
        "; choose another port, or 0 for any free one"));
  }
  freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  s->port_ = ntohs(bound.ss_family == AF_INET6
                       ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                       : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  s->host_ = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  s->listen_fd_ = fd;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

  if (s->opts_.tls_cert_file.empty() != s->opts_.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "HTTPS needs both a certificate and its key");
  }
  if (!s->opts_.tls_cert_file.empty()) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == nullptr) return absl::InternalError(OpenSslError());
    s->ssl_ctx_ = ctx;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(
            ctx, s->opts_.tls_cert_file.c_str()) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TLS certificate ", s->opts_.tls_cert_file, ": ", OpenSslError()));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, s->opts_.tls_key_file.c_str(),
                                    SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TLS key ", s->opts_.tls_key_file, ": ", OpenSslError()));
    }
  }
  if (pipe2(s->stop_pipe_, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  Server* raw = s.get();
  s->acceptor_ = std::thread([raw] { raw->AcceptLoop(); });
  return s;
}

Server::~Server() {
  Stop();
  if (ssl_ctx_ != nullptr) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

std::string Server::url() const {
  return absl::StrCat(tls() ? "https://" : "http://", host_, ":", port_);
}

void Server::Stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    for (int fd : active_fds_) shutdown(fd, SHUT_RDWR);
  }
  if (stop_pipe_[1] >= 0) (void)!write(stop_pipe_[1], "x", 1);
  if (acceptor_.joinable()) acceptor_.join();
  {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](int* active) { return *active == 0; }, &active_));
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  for (int& fd : stop_pipe_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  listen_fd_ = -1;
}

void Server::AcceptLoop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;
    sockaddr_storage peer_addr{};
    socklen_t peer_len = sizeof peer_addr;
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer_addr),
                     &peer_len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // EMFILE and friends: back off a little rather than spin.
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        poll(nullptr, 0, 50);
      }
      continue;
    }
    // One peer (address) may hold only a few connections, so a slow
    // client cannot take every slot from Prometheus and the dashboard.
    char host[INET6_ADDRSTRLEN] = "";
    if (peer_addr.ss_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer_addr)->sin_addr,
                host, sizeof host);
    } else if (peer_addr.ss_family == AF_INET6) {
      inet_ntop(AF_INET6,
                &reinterpret_cast<sockaddr_in6*>(&peer_addr)->sin6_addr, host,
                sizeof host);
    }
    const std::string peer = host;
    bool over = false;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) {
        close(fd);
        return;
      }
      over = active_ >= opts_.max_connections ||
             per_peer_[peer] >= opts_.max_connections_per_peer;
      if (!over) {
        ++active_;
        ++per_peer_[peer];
        active_fds_.insert(fd);
      } else if (per_peer_[peer] == 0) {
        per_peer_.erase(peer);
      }
    }
    if (over) {
      // Plain text even on a TLS port: a handshake would cost what the
      // limit is there to save. A TLS client sees a failed handshake.
      const std::string busy =
          Serialize(TextResponse(503, "too many connections; try again"),
                    false);
      (void)!send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      continue;
    }
    auto release = [this, fd, peer] {
      absl::MutexLock l(&mu_);
      active_fds_.erase(fd);
      close(fd);
      --active_;
      if (--per_peer_[peer] <= 0) per_peer_.erase(peer);
    };
    try {
      std::thread([this, fd, release] {
        Serve(fd);
        release();
      }).detach();
    } catch (const std::system_error&) {
      // No thread to be had (a thread limit): this one waits for none.
      const std::string busy =
          Serialize(TextResponse(503, "server busy; try again"), false);
      (void)!send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      release();
    }
  }
}

void Server::Serve(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  SSL* ssl = nullptr;
  if (ssl_ctx_ != nullptr) {
    ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
    if (ssl == nullptr) return;
    SSL_set_fd(ssl, fd);
  }
  struct FreeSsl {
    SSL* ssl;
    ~FreeSsl() {
      if (ssl != nullptr) {
        SSL_shutdown(ssl);
        SSL_free(ssl);
      }
    }
  } free_ssl{ssl};
  // The handshake and the request must come within head_deadline; the
  // handler and the reply get the rest of the connection's deadline.
  const auto start = Conn::Steady::now();
  auto after = [&](absl::Duration d) {
    return start + std::chrono::microseconds(absl::ToInt64Microseconds(d));
  };
  Conn conn(fd, ssl, after(std::min(opts_.head_deadline, opts_.deadline)));
  if (!conn.Handshake()) return;

  auto reply = [&](const Response& r, bool head = false) {
    conn.WriteAll(Serialize(r, head));
  };
  std::string data;
  char buf[8192];
  size_t head_end = std::string::npos;
  while (head_end == std::string::npos) {
    ssize_t n = conn.Read(buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && !data.empty()) reply(TextResponse(408, "request timeout"));
      return;
    }
    data.append(buf, n);
    head_end = data.find("\r\n\r\n");
    if (head_end == std::string::npos && data.size() > opts_.max_header_bytes) {
      reply(TextResponse(431, absl::StrCat("request headers over ",
                                           opts_.max_header_bytes, " bytes")));
      return;
    }
  }
  if (head_end > opts_.max_header_bytes) {
    reply(TextResponse(431, "request headers too large"));
    return;
  }
  Request req;
  if (ParseHead(absl::string_view(data).substr(0, head_end), &req) != 0) {
    reply(TextResponse(400, "malformed HTTP request"));
    return;
  }
  if (!req.Header("transfer-encoding").empty()) {
    reply(TextResponse(411, "send the body with Content-Length, not chunked"));
    return;
  }
  size_t length = 0;
  if (std::string cl = req.Header("content-length"); !cl.empty()) {
    if (!absl::SimpleAtoi(cl, &length)) {
      reply(TextResponse(400, "Content-Length is not a number"));
      return;
    }
  }
  if (length > opts_.max_body_bytes) {
    reply(TextResponse(413, absl::StrCat("request body over ",
                                         opts_.max_body_bytes, " bytes")));
    return;
  }
  req.body = data.substr(head_end + 4);
  while (req.body.size() < length) {
    ssize_t n = conn.Read(buf, std::min(sizeof buf, length - req.body.size()));
    if (n <= 0) {
      reply(TextResponse(408, "request body incomplete"));
      return;
    }
    req.body.append(buf, n);
  }
  req.body.resize(length);
  conn.set_deadline(after(opts_.deadline));
  const bool head = req.method == "HEAD";
  if (head) req.method = "GET";
  Response r;
  try {
    r = handler_(req);
  } catch (const std::exception& e) {
    r = TextResponse(500, absl::StrCat("internal error: ", e.what()));
  }
  reply(r, head);
}

}  // namespace xl::http
