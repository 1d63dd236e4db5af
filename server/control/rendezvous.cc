#include "server/control/rendezvous.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/crypto/openssl.h"
#include "common/duration.h"

namespace xl::control {
namespace {

constexpr int64_t kMaxScopeBytes = int64_t{64} << 20;
constexpr size_t kMaxScopeKeys = 100000;

}  // namespace

void Rendezvous::Run(Calls& calls) {
  for (auto& call : calls) call();
}

void Rendezvous::Open(const std::string& job_id, int32_t attempt,
                      const std::string& token, int32_t world_size) {
  std::shared_ptr<Scope> scope;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Scope>& slot = scopes_[job_id];
    if (slot == nullptr) slot = std::make_shared<Scope>();
    scope = slot;
  }
  Calls calls;
  {
    absl::MutexLock lock(&scope->mu);
    scope->max_waiters =
        std::max(kMinWaiters, 4 * std::max<int32_t>(world_size, 1));
    if (scope->attempt == attempt && scope->token == token) return;
    Abort(scope.get(), &calls);
    scope->bytes = 0;
    scope->attempt = attempt;
    scope->token = token;
    scope->kv.clear();
  }
  Run(calls);
}

void Rendezvous::Close(const std::string& job_id) {
  std::shared_ptr<Scope> scope;
  {
    absl::MutexLock lock(&mu_);
    auto it = scopes_.find(job_id);
    if (it == scopes_.end()) return;
    scope = std::move(it->second);
    scopes_.erase(it);
  }
  Calls calls;
  {
    absl::MutexLock lock(&scope->mu);
    scope->closed = true;
    Abort(scope.get(), &calls);
  }
  Run(calls);
}

void Rendezvous::RetainOnly(const std::set<std::string>& job_ids) {
  std::vector<std::shared_ptr<Scope>> gone;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = scopes_.begin(); it != scopes_.end();) {
      if (job_ids.count(it->first) > 0) {
        ++it;
        continue;
      }
      gone.push_back(std::move(it->second));
      it = scopes_.erase(it);
    }
  }
  Calls calls;
  for (auto& scope : gone) {
    absl::MutexLock lock(&scope->mu);
    scope->closed = true;
    Abort(scope.get(), &calls);
  }
  Run(calls);
}

void Rendezvous::CloseAll() {
  std::map<std::string, std::shared_ptr<Scope>> gone;
  {
    absl::MutexLock lock(&mu_);
    gone.swap(scopes_);
  }
  Calls calls;
  for (auto& [id, scope] : gone) {
    absl::MutexLock lock(&scope->mu);
    scope->closed = true;
    Abort(scope.get(), &calls);
  }
  Run(calls);
}

void Rendezvous::Abort(Scope* scope, Calls* calls) {
  for (auto& [id, w] : scope->waiters) {
    calls->push_back([done = std::move(w.done)] {
      done(absl::AbortedError(
          "the job attempt ended while waiting for the rendezvous"));
    });
  }
  scope->waiters.clear();
  scope->waiting_for.clear();
}

absl::StatusOr<std::shared_ptr<Rendezvous::Scope>> Rendezvous::Find(
    const v1::RendezvousScope& s) {
  absl::MutexLock lock(&mu_);
  auto it = scopes_.find(s.job_id());
  if (it == scopes_.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "scope: job ", s.job_id(), " attempt ", s.attempt(),
        " is not running or the token is wrong; only the ranks of a running "
        "attempt may rendezvous (they get XL_RENDEZVOUS_TOKEN)"));
  }
  return it->second;
}

absl::Status Rendezvous::CheckToken(Scope* scope,
                                    const v1::RendezvousScope& s) {
  if (scope->closed || scope->attempt != s.attempt() ||
      scope->token.empty() ||
      !crypto::ConstantTimeEquals(scope->token, s.token())) {
    return absl::PermissionDeniedError(absl::StrCat(
        "scope: job ", s.job_id(), " attempt ", s.attempt(),
        " is not running or the token is wrong; only the ranks of a running "
        "attempt may rendezvous (they get XL_RENDEZVOUS_TOKEN)"));
  }
  return absl::OkStatus();
}

void Rendezvous::Complete(Scope* scope, uint64_t id, Calls* calls) {
  auto it = scope->waiters.find(id);
  if (it == scope->waiters.end()) return;
  std::vector<std::string> values;
  values.reserve(it->second.keys.size());
  for (const auto& k : it->second.keys) values.push_back(scope->kv.at(k));
  calls->push_back([done = std::move(it->second.done),
                    values = std::move(values)] { done(values); });
  scope->waiters.erase(it);
}

absl::Status Rendezvous::Put(const v1::RendezvousPutRequest& req) {
  if (req.key().empty()) return absl::InvalidArgumentError("key: required");
  if (req.value().size() > (1 << 20)) {
    return absl::InvalidArgumentError("value: larger than 1 MiB");
  }
  auto found = Find(req.scope());
  if (!found.ok()) return found.status();
  Scope* s = found->get();
  Calls calls;
  {
    absl::MutexLock lock(&s->mu);
    if (absl::Status ok = CheckToken(s, req.scope()); !ok.ok()) return ok;
    // Bounds, so one attempt cannot take the scheduler's memory.
    auto old = s->kv.find(req.key());
    const int64_t before =
        old == s->kv.end() ? 0 : static_cast<int64_t>(old->first.size() +
                                                      old->second.size());
    const int64_t after = static_cast<int64_t>(req.key().size() +
                                               req.value().size());
    if (old == s->kv.end() && s->kv.size() >= kMaxScopeKeys) {
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
    // Only the waiters of this key, each once per key it waits for.
    auto waiting = s->waiting_for.find(req.key());
    if (waiting != s->waiting_for.end()) {
      std::set<uint64_t> ids = std::move(waiting->second);
      s->waiting_for.erase(waiting);
      for (uint64_t id : ids) {
        auto w = s->waiters.find(id);
        if (w != s->waiters.end() && --w->second.missing == 0) {
          Complete(s, id, &calls);
        }
      }
    }
  }
  Run(calls);
  return absl::OkStatus();
}

namespace {

// DEADLINE_EXCEEDED naming (at most 8 of) the keys still missing.
absl::Status NotSetInTime(std::vector<std::string> missing) {
  if (missing.size() > 8) {
    missing.resize(8);
    missing.push_back("...");
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "rendezvous keys not set in time: ", absl::StrJoin(missing, ", "),
      "; a rank of this attempt did not start or died"));
}

}  // namespace

void Rendezvous::Get(const v1::RendezvousGetRequest& req, GetDone done,
                     absl::Duration caller_left) {
  if (req.keys_size() == 0) {
    done(absl::InvalidArgumentError("keys: give at least one key"));
    return;
  }
  if (req.keys_size() > kMaxKeysPerGet) {
    done(absl::InvalidArgumentError(absl::StrCat(
        "keys: ", req.keys_size(), " keys in one Get; at most ",
        kMaxKeysPerGet, " (ask in several Gets)")));
    return;
  }
  auto found = Find(req.scope());
  if (!found.ok()) {
    done(found.status());
    return;
  }
  Scope* s = found->get();
  absl::Status error;
  Calls calls;
  {
    absl::MutexLock lock(&s->mu);
    error = CheckToken(s, req.scope());
    std::vector<std::string> missing;
    if (error.ok()) {
      for (const auto& k : req.keys()) {
        if (s->kv.count(k) == 0) missing.push_back(k);
      }
    }
    absl::Duration timeout =
        req.has_timeout() ? FromProto(req.timeout()) : absl::Minutes(5);
    if (timeout > kMaxWait) timeout = kMaxWait;
    // The caller's own deadline: a waiter it has given up on would hold
    // one of the attempt's places.
    timeout = std::min(timeout, caller_left);
    if (error.ok() && missing.empty()) {
      // Answered at once: it takes no waiter's place.
      std::vector<std::string> values;
      values.reserve(req.keys_size());
      for (const auto& k : req.keys()) values.push_back(s->kv.at(k));
      calls.push_back(
          [done = std::move(done), values = std::move(values)]() mutable {
            done(std::move(values));
          });
    } else if (error.ok() && timeout <= absl::ZeroDuration()) {
      // No time left (a worker's last piece past its deadline): no wait.
      error = NotSetInTime(std::move(missing));
    } else if (error.ok() &&
        static_cast<int32_t>(s->waiters.size()) >= s->max_waiters) {
      error = absl::ResourceExhaustedError(absl::StrCat(
          "scope: ", s->waiters.size(), " Gets of this attempt wait already, "
          "as many as it may have (4 per rank, at least ", kMinWaiters,
          "); wait for some to end"));
    } else if (error.ok()) {
      Waiter w;
      w.keys.assign(req.keys().begin(), req.keys().end());
      w.deadline_mono = clock_->MonotonicNow() + timeout;
      w.done = std::move(done);
      const uint64_t id = s->next_waiter++;
      const std::set<std::string> unique(missing.begin(), missing.end());
      w.missing = unique.size();
      for (const auto& k : unique) s->waiting_for[k].insert(id);
      s->waiters.emplace(id, std::move(w));
    }
  }
  Run(calls);
  if (!error.ok()) done(error);
}

void Rendezvous::Expire() {
  std::vector<std::shared_ptr<Scope>> scopes;
  {
    absl::MutexLock lock(&mu_);
    scopes.reserve(scopes_.size());
    for (auto& [id, scope] : scopes_) scopes.push_back(scope);
  }
  Calls calls;
  const absl::Time now = clock_->MonotonicNow();
  for (auto& scope : scopes) {
    absl::MutexLock lock(&scope->mu);
    for (auto it = scope->waiters.begin(); it != scope->waiters.end();) {
      if (now < it->second.deadline_mono) {
        ++it;
        continue;
      }
      std::vector<std::string> missing;
      for (const auto& k : it->second.keys) {
        if (scope->kv.count(k) != 0) continue;
        missing.push_back(k);
        // Its place in the index goes with it.
        auto waiting = scope->waiting_for.find(k);
        if (waiting != scope->waiting_for.end()) {
          waiting->second.erase(it->first);
          if (waiting->second.empty()) scope->waiting_for.erase(waiting);
        }
      }
      calls.push_back([done = std::move(it->second.done),
                       missing = std::move(missing)]() mutable {
        done(NotSetInTime(std::move(missing)));
      });
      it = scope->waiters.erase(it);
    }
  }
  Run(calls);
}

}  // namespace xl::control
