#include "server/control/rendezvous.h"

#include <utility>

#include "common/crypto/openssl.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/duration.h"

namespace xl::control {

void Rendezvous::Open(const std::string& job_id, int32_t attempt,
                      const std::string& token) {
  Calls calls;
  {
    absl::MutexLock lock(&mu_);
    Scope& scope = scopes_[job_id];
    if (scope.attempt == attempt && scope.token == token) return;
    Abort(&scope, &calls);
    scope.bytes = 0;
    scope.attempt = attempt;
    scope.token = token;
    scope.kv.clear();
  }
  for (auto& call : calls) call();
}

void Rendezvous::Close(const std::string& job_id) {
  Calls calls;
  {
    absl::MutexLock lock(&mu_);
    auto it = scopes_.find(job_id);
    if (it == scopes_.end()) return;
    Abort(&it->second, &calls);
    scopes_.erase(it);
  }
  for (auto& call : calls) call();
}

void Rendezvous::RetainOnly(const std::set<std::string>& job_ids) {
  Calls calls;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = scopes_.begin(); it != scopes_.end();) {
      if (job_ids.count(it->first) > 0) {
        ++it;
        continue;
      }
      Abort(&it->second, &calls);
      it = scopes_.erase(it);
    }
  }
  for (auto& call : calls) call();
}

void Rendezvous::CloseAll() {
  Calls calls;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, scope] : scopes_) Abort(&scope, &calls);
    scopes_.clear();
  }
  for (auto& call : calls) call();
}

void Rendezvous::Abort(Scope* scope, Calls* calls) {
  for (Waiter& w : scope->waiters) {
    calls->push_back([done = std::move(w.done)] {
      done(absl::AbortedError(
          "the job attempt ended while waiting for the rendezvous"));
    });
  }
  scope->waiters.clear();
}

absl::StatusOr<Rendezvous::Scope*> Rendezvous::Find(
    const v1::RendezvousScope& s) {
  auto it = scopes_.find(s.job_id());
  if (it == scopes_.end() || it->second.attempt != s.attempt() ||
      it->second.token.empty() ||
      !crypto::ConstantTimeEquals(it->second.token, s.token())) {
    return absl::PermissionDeniedError(absl::StrCat(
        "scope: job ", s.job_id(), " attempt ", s.attempt(),
        " is not running or the token is wrong; only the ranks of a running "
        "attempt may rendezvous (they get XL_RENDEZVOUS_TOKEN)"));
  }
  return &it->second;
}

absl::Status Rendezvous::Put(const v1::RendezvousPutRequest& req) {
  if (req.key().empty()) return absl::InvalidArgumentError("key: required");
  if (req.value().size() > (1 << 20)) {
    return absl::InvalidArgumentError("value: larger than 1 MiB");
  }
  Calls calls;
  {
    absl::MutexLock lock(&mu_);
    auto scope = Find(req.scope());
    if (!scope.ok()) return scope.status();
    // Bounds, so one attempt cannot take the scheduler's memory.
    constexpr int64_t kMaxScopeBytes = int64_t{64} << 20;
    Scope* s = *scope;
    auto old = s->kv.find(req.key());
    const int64_t before =
        old == s->kv.end() ? 0 : static_cast<int64_t>(old->first.size() +
                                                      old->second.size());
    const int64_t after = static_cast<int64_t>(req.key().size() +
                                               req.value().size());
    if (old == s->kv.end() && s->kv.size() >= 100000) {
      return absl::ResourceExhaustedError(
          "scope: more than 100000 rendezvous keys in one attempt");
    }
    if (s->bytes - before + after > kMaxScopeBytes) {
      return absl::ResourceExhaustedError(
          "scope: more than 64 MiB of rendezvous keys and values in one "
          "attempt; put large data in files and share their paths");
    }
    s->bytes += after - before;
    s->kv[req.key()] = req.value();
    Serve(*scope, clock_->MonotonicNow(), &calls);
  }
  for (auto& call : calls) call();
  return absl::OkStatus();
}

void Rendezvous::Get(const v1::RendezvousGetRequest& req, GetDone done) {
  if (req.keys_size() == 0) {
    done(absl::InvalidArgumentError("keys: give at least one key"));
    return;
  }
  Calls calls;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    auto scope = Find(req.scope());
    if (!scope.ok()) {
      error = scope.status();
    } else {
      Waiter w;
      w.keys.assign(req.keys().begin(), req.keys().end());
      absl::Duration timeout =
          req.has_timeout() ? FromProto(req.timeout()) : absl::Minutes(5);
      const absl::Time now = clock_->MonotonicNow();
      w.deadline_mono = now + timeout;
      w.done = std::move(done);
      (*scope)->waiters.push_back(std::move(w));
      Serve(*scope, now, &calls);
    }
  }
  for (auto& call : calls) call();
  if (!error.ok()) done(error);
}

void Rendezvous::Expire() {
  Calls calls;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->MonotonicNow();
    for (auto& [id, scope] : scopes_) {
      if (!scope.waiters.empty()) Serve(&scope, now, &calls);
    }
  }
  for (auto& call : calls) call();
}

void Rendezvous::Serve(Scope* scope, absl::Time now_mono, Calls* calls) {
  for (auto it = scope->waiters.begin(); it != scope->waiters.end();) {
    std::vector<std::string> values, missing;
    for (const auto& k : it->keys) {
      auto v = scope->kv.find(k);
      if (v == scope->kv.end()) {
        missing.push_back(k);
      } else {
        values.push_back(v->second);
      }
    }
    if (missing.empty()) {
      calls->push_back([done = std::move(it->done), values = std::move(values)] {
        done(values);
      });
      it = scope->waiters.erase(it);
    } else if (now_mono >= it->deadline_mono) {
      calls->push_back([done = std::move(it->done),
                        missing = std::move(missing)] {
        done(absl::DeadlineExceededError(absl::StrCat(
            "rendezvous keys not set in time: ", absl::StrJoin(missing, ", "),
            "; a rank of this attempt did not start or died")));
      });
      it = scope->waiters.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace xl::control
