// HttpServer over real sockets on 127.0.0.1: requests, and what hostile or
// broken callers get (oversized headers and bodies, a sender that stalls,
// more connections than the limit, garbage), plus HTTPS with a certificate
// made here.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace xl::http {
namespace {

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends `raw` and reads until the server closes.
std::string RoundTrip(int port, const std::string& raw) {
  int fd = Connect(port);
  if (fd < 0) return "";
  (void)!send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, n);
  close(fd);
  return out;
}

std::unique_ptr<Server> StartEcho(ServerOptions opts = {}) {
  if (opts.listen.empty()) opts.listen = "127.0.0.1:0";
  auto s = Server::Start(opts, [](const Request& r) {
    Response out;
    out.body = absl::StrCat(r.method, " ", r.path, " ", r.query, " [",
                            r.body, "] ", r.Header("x-test"));
    return out;
  });
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(HttpServerTest, AnswersARequestWithItsBody) {
  auto s = StartEcho();
  std::string r = RoundTrip(
      s->port(),
      "POST /api/x?a=1 HTTP/1.1\r\nHost: h\r\nX-Test: yes\r\n"
      "Content-Length: 5\r\n\r\nhello");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_TRUE(absl::StrContains(r, "POST /api/x a=1 [hello] yes")) << r;
  EXPECT_TRUE(absl::StrContains(r, "Connection: close")) << r;
  EXPECT_EQ(s->url(), absl::StrCat("http://127.0.0.1:", s->port()));
}

TEST(HttpServerTest, RefusesOversizedHeadersAndBodies) {
  ServerOptions opts;
  opts.max_header_bytes = 1024;
  opts.max_body_bytes = 10;
  auto s = StartEcho(opts);
  std::string big = absl::StrCat("GET / HTTP/1.1\r\nX-Pad: ",
                                 std::string(4096, 'a'), "\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(RoundTrip(s->port(), big), "HTTP/1.1 431"));
  EXPECT_TRUE(absl::StartsWith(
      RoundTrip(s->port(),
                "POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n01234567890"),
      "HTTP/1.1 413"));
  EXPECT_TRUE(absl::StartsWith(
      RoundTrip(s->port(),
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"),
      "HTTP/1.1 411"));
  EXPECT_TRUE(absl::StartsWith(RoundTrip(s->port(), "garbage\r\n\r\n"),
                               "HTTP/1.1 400"));
  EXPECT_TRUE(absl::StartsWith(
      RoundTrip(s->port(),
                "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
      "HTTP/1.1 400"));
}

TEST(HttpServerTest, ASenderThatStallsIsCutOffAtTheDeadline) {
  ServerOptions opts;
  opts.deadline = absl::Milliseconds(300);
  auto s = StartEcho(opts);
  int fd = Connect(s->port());
  ASSERT_GE(fd, 0);
  const std::string part = "GET / HTTP/1.1\r\nHost: x\r\n";  // never ends
  (void)!send(fd, part.data(), part.size(), MSG_NOSIGNAL);
  const absl::Time start = absl::Now();
  std::string out;
  char buf[1024];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, n);
  close(fd);
  EXPECT_TRUE(absl::StartsWith(out, "HTTP/1.1 408")) << out;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(HttpServerTest, ConnectionsOverTheLimitGet503AtOnce) {
  ServerOptions opts;
  opts.max_connections = 2;
  opts.deadline = absl::Seconds(5);
  auto s = StartEcho(opts);
  // Two idle connections hold both slots.
  int a = Connect(s->port()), b = Connect(s->port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  absl::SleepFor(absl::Milliseconds(100));  // let the server accept them
  const absl::Time start = absl::Now();
  std::string third = RoundTrip(s->port(), "GET / HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(third, "HTTP/1.1 503")) << third;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  close(a);
  close(b);
  // Slots come back once those connections end.
  std::string later;
  for (int i = 0; i < 50 && !absl::StartsWith(later, "HTTP/1.1 200"); ++i) {
    absl::SleepFor(absl::Milliseconds(50));
    later = RoundTrip(s->port(), "GET / HTTP/1.1\r\n\r\n");
  }
  EXPECT_TRUE(absl::StartsWith(later, "HTTP/1.1 200")) << later;
}

TEST(HttpServerTest, OnePeerCannotTakeEverySlot) {
  ServerOptions opts;
  opts.max_connections = 10;
  opts.max_connections_per_peer = 2;
  auto s = StartEcho(opts);
  int a = Connect(s->port()), b = Connect(s->port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  absl::SleepFor(absl::Milliseconds(100));
  std::string third = RoundTrip(s->port(), "GET / HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(third, "HTTP/1.1 503")) << third;
  close(a);
  close(b);
}

TEST(HttpServerTest, ControlBytesInHeadersAreRefused) {
  auto s = StartEcho();
  EXPECT_TRUE(absl::StartsWith(
      RoundTrip(s->port(), "GET / HTTP/1.1\r\nX-Test: a\x01b\r\n\r\n"),
      "HTTP/1.1 400"));
  EXPECT_TRUE(absl::StartsWith(
      RoundTrip(s->port(), "GET / HTTP/1.1\r\nX-Test: a\nb\r\n\r\n"),
      "HTTP/1.1 400"));
}

TEST(HttpServerTest, StopEndsConnectionsInFlight) {
  ServerOptions opts;
  opts.deadline = absl::Seconds(30);
  auto s = StartEcho(opts);
  int fd = Connect(s->port());
  ASSERT_GE(fd, 0);
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  s->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  close(fd);
}

TEST(HttpServerTest, BadAddressesAndTlsFilesAreNamed) {
  auto bad = Server::Start({"nonsense"}, [](const Request&) { return Response(); });
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "HOST:PORT"));
  ServerOptions tls;
  tls.listen = "127.0.0.1:0";
  tls.tls_cert_file = "/nonexistent/cert.pem";
  tls.tls_key_file = "/nonexistent/key.pem";
  auto no_cert = Server::Start(tls, [](const Request&) { return Response(); });
  ASSERT_FALSE(no_cert.ok());
  EXPECT_TRUE(absl::StrContains(no_cert.status().message(),
                                "/nonexistent/cert.pem"));
}

TEST(HttpServerTest, ServesHttpsWithItsCertificate) {
  const std::string dir = ::testing::TempDir() + "/http_tls";
  const std::string make = absl::StrCat(
      "mkdir -p ", dir, " && openssl req -x509 -newkey ec -pkeyopt "
      "ec_paramgen_curve:P-256 -nodes -keyout ", dir, "/key.pem -out ", dir,
      "/cert.pem -days 1 -subj /CN=127.0.0.1 2>/dev/null");
  if (std::system(make.c_str()) != 0) GTEST_SKIP() << "no openssl command";
  ServerOptions opts;
  opts.listen = "127.0.0.1:0";
  opts.tls_cert_file = dir + "/cert.pem";
  opts.tls_key_file = dir + "/key.pem";
  auto s = StartEcho(opts);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(absl::StartsWith(s->url(), "https://"));
  const std::string out_file = dir + "/out.txt";
  const std::string fetch = absl::StrCat(
      "printf 'GET /tls HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' | timeout 10 "
      "openssl s_client -quiet -connect 127.0.0.1:", s->port(),
      " > ", out_file, " 2>/dev/null");
  (void)std::system(fetch.c_str());
  std::ifstream in(out_file);
  std::string got((std::istreambuf_iterator<char>(in)),
                  std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(got, "HTTP/1.1 200 OK")) << got;
  EXPECT_TRUE(absl::StrContains(got, "GET /tls")) << got;
  // Plain HTTP on the TLS port gets nothing it could read as a reply.
  EXPECT_FALSE(absl::StartsWith(RoundTrip(s->port(), "GET / HTTP/1.1\r\n\r\n"),
                                "HTTP/1.1 200"));
}

}  // namespace
}  // namespace xl::http
