// The xl dashboard: read-only pages over the scheduler's JSON API.
//
//   GET  /api/info                      {"auth_enabled": bool, "version": "..."}
//   POST /api/xl.v1.<Service>/<Method>  the request message in protobuf's JSON
//        mapping (the .proto field names); the answer is the response message
//        the same way: int64/uint64 as strings, enums as names, unset message
//        fields absent. Server-streaming methods answer {"messages": [...]}
//        with what the stream sent before it ended or went idle.
//   Errors: an HTTP status and {"code": "UNAUTHENTICATED", "message": "..."}.
//
// Pages (hash routes): #/queue, #/nodes, #/jobs/<id>, #/plan. Every value
// from the API reaches the page as text (textContent, attributes set one by
// one), never as markup. No inline styles or scripts: the scheduler serves
// this page with "Content-Security-Policy: default-src 'self'".
// Hooks for tests are data-testid attributes; their texts are plain numbers
// or names where a test compares them.
"use strict";

const TOKEN_KEY = "xl-token";
const S = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  authEnabled: false,
  version: "",
  me: null,
  gen: 0,          // bumped on every route change: stale work is dropped
  timer: null,
  page: null,
  paused: false,   // waiting for a token
};

// ---------------------------------------------------------------- API ----

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  toString() { return `${this.code}: ${this.message}`; }
}

async function api(method, body = {}, token = S.token) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  let r;
  try {
    r = await fetch("/api/" + method, {
      method: "POST", headers, body: JSON.stringify(body), cache: "no-store",
    });
  } catch (e) {
    throw new ApiError(0, "UNAVAILABLE", `the scheduler did not answer (${e.message})`);
  }
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (!r.ok) {
    const code = (data && data.code) || `HTTP ${r.status}`;
    const message = (data && data.message) || r.statusText || "request failed";
    throw new ApiError(r.status, code, message);
  }
  if (data === null) throw new ApiError(r.status, "INTERNAL", "the answer was not JSON");
  return data;
}

// A server-streaming method: its messages.
async function apiStream(method, body) {
  const r = await api(method, body);
  return Array.isArray(r.messages) ? r.messages : [];
}

// ---------------------------------------------------- values and text ----

// Numbers arrive as JSON numbers, or as strings for 64-bit integers.
function num(v) {
  if (v === undefined || v === null || v === "") return 0;
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
}
// A Timestamp (RFC 3339 text) as a Date; null when unset (absent, or the
// epoch, which is what an unset one would print as).
function tsDate(v) {
  if (!v || typeof v !== "string") return null;
  const d = new Date(v);
  if (isNaN(d.getTime()) || d.getTime() <= 0) return null;
  return d;
}
// A Duration ("3600s", "1.5s") in seconds.
function durSeconds(v) {
  if (typeof v === "number") return v;
  if (typeof v !== "string") return 0;
  const m = /^(-?[0-9.]+)s$/.exec(v.trim());
  return m ? Number(m[1]) : 0;
}
const nf = new Intl.NumberFormat("en-US");
function fmtInt(v) { return nf.format(Math.round(num(v))); }
// A number with about `digits` significant digits, grouped.
function fmtNum(v, digits = 3) {
  const n = num(v);
  if (n === 0) return "0";
  const a = Math.abs(n);
  if (a >= 10 ** digits) return nf.format(Math.round(n));
  if (a < 1e-3) return n.toExponential(digits - 1);
  return String(Number(n.toPrecision(digits)));
}
// Counts: 7.5e9 -> "7.50 B" (parameters, tokens).
function fmtCount(v) {
  const n = num(v);
  const units = [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]];
  for (const [u, s] of units) if (Math.abs(n) >= u) return `${(n / u).toFixed(2)} ${s}`;
  return fmtNum(n);
}
// Bytes, binary units as xlctl shows them (GiB); si: decimal (GB), as the
// planner's arithmetic writes them.
function fmtBytes(v, si = false) {
  let n = num(v);
  const base = si ? 1000 : 1024;
  const units = si ? ["B", "kB", "MB", "GB", "TB", "PB"] : ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (Math.abs(n) >= base && i < units.length - 1) { n /= base; i++; }
  return `${i === 0 ? n.toFixed(0) : n.toFixed(1)} ${units[i]}`;
}
// Seconds as "45s", "12m30s", "3h05m", "2d4h".
function fmtDuration(seconds) {
  let s = Math.max(0, Math.round(num(seconds)));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${Math.floor((s % 86400) / 3600)}h`;
}
// Short durations with a fraction ("0.42 s", "7.4 min").
function fmtSeconds(seconds) {
  const s = num(seconds);
  if (s < 1) return `${(s * 1000).toPrecision(3)} ms`;
  if (s < 120) return `${s.toPrecision(3)} s`;
  return fmtDuration(s);
}
function pad2(n) { return String(n).padStart(2, "0"); }
// Local time as "2026-12-03 07:27:59".
function fmtTime(v) {
  const d = v instanceof Date ? v : tsDate(v);
  if (!d) return "—";
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ` +
         `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}
// "5m ago" / "in 1h58m".
function fmtRelative(v) {
  const d = v instanceof Date ? v : tsDate(v);
  if (!d) return "";
  const s = (d.getTime() - Date.now()) / 1000;
  if (Math.abs(s) < 1) return "now";
  return s > 0 ? `in ${fmtDuration(s)}` : `${fmtDuration(-s)} ago`;
}
const ACTIVE = new Set(["PENDING", "SCHEDULED", "RUNNING", "PREEMPTED"]);

// ----------------------------------------------------------------- DOM ----

// h("td", {class: "num", "data-testid": "x"}, "text", child, [more]):
// strings become text nodes; attributes are set one by one.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  return fill(el, attrs, children);
}
const SVG_NS = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}
function fill(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.setAttribute("class", v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false || c === "") continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
function badge(state, testid) {
  const text = state || "—";
  return h("span", { class: `badge st-${text}`, "data-testid": testid }, text);
}
function card(label, value, testid, sub) {
  return h("div", { class: "card" },
    h("div", { class: "k" }, label),
    h("div", { class: "v", "data-testid": testid }, value),
    sub ? h("div", { class: "sub" }, sub) : null);
}
// columns: [label] or [label, "num"]; rows: <tr> elements.
function table(columns, rows, empty, testid) {
  const head = h("tr", {}, columns.map((c) => {
    const [label, cls] = Array.isArray(c) ? c : [c];
    return h("th", { class: cls }, label);
  }));
  const body = h("tbody", {}, rows);
  if (!rows.length && empty) {
    body.append(h("tr", { class: "empty" }, h("td", { colspan: columns.length }, empty)));
  }
  return h("div", { class: "table-wrap" }, h("table", { "data-testid": testid }, h("thead", {}, head), body));
}
function td(content, cls, testid) { return h("td", { class: cls, "data-testid": testid }, content); }
function progressBar(fraction) {
  const bar = h("span", { class: "bar" });
  bar.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;  // CSSOM: allowed by the CSP
  return h("span", { class: "progress" }, bar);
}
function jobLink(id) { return h("a", { href: `#/jobs/${encodeURIComponent(id)}` }, id); }
function timeCell(v, relative = true) {
  const d = tsDate(v);
  if (!d) return h("span", { class: "muted" }, "—");
  return h("span", { title: d.toISOString() }, fmtTime(d),
    relative ? h("span", { class: "muted" }, ` (${fmtRelative(d)})`) : null);
}
// A section whose content is replaced only when its data changed, so that
// a refresh keeps selections and scroll positions.
class Section {
  constructor(title, testid) {
    this.head = title ? h("h2", {}, title) : null;
    this.body = h("div", { "data-testid": testid });
    this.el = h("section", {}, this.head, this.body);
    this.key = null;
  }
  title(text) { if (this.head) this.head.textContent = text; }
  set(key, build) {
    const k = JSON.stringify(key);
    if (k === this.key) return;
    this.key = k;
    this.body.replaceChildren(...[build()].flat().filter((x) => x));
  }
  hide(hidden) { this.el.hidden = hidden; }
}

// -------------------------------------------------------------- charts ----

// A small SVG line chart. series: [{points: [{x, y}]}] (one per training
// attempt; a gap between them). Hovering shows the nearest point.
function lineChart({ title, series, testid, yFormat = fmtNum, xLabel = "step" }) {
  const W = 560, H = 210, L = 54, R = 14, T = 12, B = 30;
  const all = series.flatMap((x) => x.points).filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y));
  const svg = s("svg", {
    viewBox: `0 0 ${W} ${H}`, class: "chart-svg", role: "img", "aria-label": title,
    "data-testid": testid, "data-points": all.length,
  });
  const last = all.length ? all[all.length - 1] : null;
  const wrap = h("figure", { class: "chart" },
    h("figcaption", {}, h("span", { class: "title" }, title),
      h("span", { class: "last" }, last ? `${yFormat(last.y)} at ${xLabel} ${fmtInt(last.x)}` : "")),
    svg);
  if (!all.length) {
    svg.append(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "axis-label" }, "no points yet"));
    return wrap;
  }
  let x0 = Math.min(...all.map((p) => p.x)), x1 = Math.max(...all.map((p) => p.x));
  let y0 = Math.min(...all.map((p) => p.y)), y1 = Math.max(...all.map((p) => p.y));
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const yt = niceTicks(y0, y1, 4), xt = niceTicks(x0, x1, 5);
  y0 = Math.min(y0, yt[0]); y1 = Math.max(y1, yt[yt.length - 1]);
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  for (const t of yt) {
    if (t < y0 || t > y1) continue;
    svg.append(s("line", { x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "grid" }),
      s("text", { x: L - 6, y: sy(t) + 4, "text-anchor": "end", class: "axis-label" }, yFormat(t)));
  }
  for (const t of xt) {
    if (t < x0 || t > x1) continue;
    svg.append(s("line", { x1: sx(t), x2: sx(t), y1: H - B, y2: H - B + 4, class: "axis" }),
      s("text", { x: sx(t), y: H - B + 16, "text-anchor": "middle", class: "axis-label" }, fmtCompact(t)));
  }
  svg.append(s("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }),
    s("text", { x: W - R, y: H - 2, "text-anchor": "end", class: "axis-label" }, xLabel));
  series.forEach((sr, i) => {
    const pts = decimate(sr.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y)), 1500);
    if (!pts.length) return;
    if (i > 0) {
      svg.append(s("line", { x1: sx(pts[0].x), x2: sx(pts[0].x), y1: T, y2: H - B, class: "boundary" }));
    }
    svg.append(s("polyline", {
      class: "line", points: pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" "),
    }));
  });
  const dot = s("circle", { r: 3.5, class: "dot", visibility: "hidden" });
  const tip = s("text", { class: "tip", visibility: "hidden" });
  svg.append(dot, tip);
  const sorted = all.slice().sort((a, b) => a.x - b.x);
  svg.addEventListener("mousemove", (ev) => {
    const box = svg.getBoundingClientRect();
    const x = x0 + (((ev.clientX - box.left) / box.width) * W - L) / (W - L - R) * (x1 - x0);
    let lo = 0, hi = sorted.length - 1;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (sorted[mid].x < x) lo = mid + 1; else hi = mid; }
    const p = lo > 0 && Math.abs(sorted[lo - 1].x - x) < Math.abs(sorted[lo].x - x) ? sorted[lo - 1] : sorted[lo];
    dot.setAttribute("cx", sx(p.x)); dot.setAttribute("cy", sy(p.y));
    tip.textContent = `${xLabel} ${fmtInt(p.x)}: ${yFormat(p.y)}`;
    const tx = Math.min(sx(p.x) + 8, W - R - 150);
    tip.setAttribute("x", tx); tip.setAttribute("y", Math.max(T + 10, sy(p.y) - 8));
    dot.setAttribute("visibility", "visible"); tip.setAttribute("visibility", "visible");
  });
  svg.addEventListener("mouseleave", () => {
    dot.setAttribute("visibility", "hidden"); tip.setAttribute("visibility", "hidden");
  });
  return wrap;
}
function niceTicks(lo, hi, count) {
  const span = hi - lo;
  const step0 = span / count;
  const mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => span / st <= count) || 10 * mag;
  const out = [];
  for (let t = Math.floor(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Number(t.toPrecision(12)));
  if (out.length && out[out.length - 1] < hi) out.push(Number((out[out.length - 1] + step).toPrecision(12)));
  return out;
}
function fmtCompact(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return `${Number((v / 1e9).toPrecision(3))}G`;
  if (a >= 1e6) return `${Number((v / 1e6).toPrecision(3))}M`;
  if (a >= 1e4) return `${Number((v / 1e3).toPrecision(3))}k`;
  return String(Number(v.toPrecision(4)));
}
// At most about `max` points, keeping each bucket's lowest and highest.
function decimate(points, max) {
  if (points.length <= max) return points;
  const per = Math.ceil(points.length / (max / 2));
  const out = [];
  for (let i = 0; i < points.length; i += per) {
    const b = points.slice(i, i + per);
    let lo = b[0], hi = b[0];
    for (const p of b) { if (p.y < lo.y) lo = p; if (p.y > hi.y) hi = p; }
    if (lo === hi) out.push(lo);
    else if (b.indexOf(lo) < b.indexOf(hi)) out.push(lo, hi);
    else out.push(hi, lo);
  }
  const end = points[points.length - 1];
  if (out[out.length - 1] !== end) out.push(end);
  return out;
}
// Points split where the attempt changes.
function byAttempt(points, y) {
  const series = [];
  let cur = null, attempt = null;
  for (const p of points) {
    const a = num(p.attempt);
    if (cur === null || a !== attempt) { cur = { points: [] }; series.push(cur); attempt = a; }
    cur.points.push({ x: num(p.step), y: y(p) });
  }
  return series;
}

// --------------------------------------------------------------- pages ----

// What a job asks for, in words: "2 nodes × 2 GPUs".
function asks(spec) {
  const r = (spec && spec.resources) || {};
  const nodes = num(r.nodes) || 1, min = num(r.min_nodes);
  const n = min > 0 && min < nodes ? `${min}–${nodes} nodes` : `${nodes} node${nodes === 1 ? "" : "s"}`;
  const g = num(r.gpus_per_node);
  return g > 0 ? `${n} × ${g} GPU${g === 1 ? "" : "s"}` : n;
}
function jobGpus(job) {
  const allocs = job.allocations || [];
  if (allocs.length) return allocs.reduce((a, x) => a + (x.gpu_indices || []).length, 0);
  const r = (job.spec && job.spec.resources) || {};
  return (num(r.nodes) || 1) * num(r.gpus_per_node);
}
function hasMetrics(job) { return job.metrics && num(job.metrics.step) > 0; }
function progressCell(job, testid) {
  const m = job.metrics || {};
  const step = num(m.step), total = num(m.total_steps);
  if (!hasMetrics(job)) return h("span", { class: "muted" }, "—");
  if (total <= 0) return h("span", { "data-testid": testid }, `step ${fmtInt(step)}`);
  return h("span", { class: "progress-cell" }, progressBar(step / total),
    h("span", { "data-testid": testid }, `${fmtInt(step)} / ${fmtInt(total)}`),
    h("span", { class: "muted" }, ` ${((100 * step) / total).toFixed(1)}%`));
}

// Every job in the given states, newest first (at most `max`).
async function listJobs(states, max) {
  const jobs = [];
  let token = "";
  do {
    const r = await api("xl.v1.JobService/ListJobs", { states, page_size: Math.min(1000, max - jobs.length), page_token: token });
    jobs.push(...(r.jobs || []));
    token = r.next_page_token || "";
  } while (token && jobs.length < max);
  return { jobs, more: !!token };
}

class QueuePage {
  constructor(root) {
    this.summary = new Section(null, "queue-summary");
    this.pending = new Section("Pending", "pending");
    this.running = new Section("Running", "running");
    this.finished = new Section("Recently finished", "finished");
    this.queues = new Section("Queues", "queues");
    this.updated = h("span", { class: "muted updated" });
    root.replaceChildren(h("div", { class: "page-head" }, h("h1", {}, "Queue"), this.updated),
      this.summary.el, this.pending.el, this.running.el, this.finished.el, this.queues.el);
  }
  async refresh() {
    const [q, queues, active] = await Promise.all([
      api("xl.v1.JobService/GetQueue"),
      api("xl.v1.QueueService/ListQueues").catch(() => ({ queues: [] })),
      listJobs(["PENDING", "SCHEDULED", "RUNNING", "PREEMPTED"], 5000),
    ]);
    // Asked after the active ones: a job that ended in between is found
    // here, and this later answer wins.
    const done = await listJobs(["SUCCEEDED", "FAILED", "CANCELLED"], 100);
    const byId = new Map();
    for (const j of active.jobs) byId.set(j.id, j);
    for (const j of done.jobs) byId.set(j.id, j);
    const jobs = [...byId.values()];
    const idOrder = (a, b) => num(a.id) - num(b.id) || String(a.id).localeCompare(String(b.id));
    const pending = jobs.filter((j) => j.state === "PENDING" || j.state === "PREEMPTED").sort(idOrder);
    const running = jobs.filter((j) => j.state === "RUNNING" || j.state === "SCHEDULED").sort(idOrder);
    const finished = jobs.filter((j) => !ACTIVE.has(j.state)).sort((a, b) => -idOrder(a, b));
    this.updated.textContent = `updated ${fmtTime(new Date())}`;

    this.summary.set([q], () => h("div", { class: "cards" },
      card("GPUs in use", `${num(q.gpus_in_use)} / ${num(q.total_gpus)}`, "gpus-in-use"),
      card("GPUs free", String(num(q.gpus_free)), "gpus-free",
        num(q.gpus_fragmented) ? `${num(q.gpus_fragmented)} fragmented` : null),
      card("Nodes ready", String(num(q.nodes_ready)), "nodes-ready"),
      card("Nodes drained / lost", `${num(q.nodes_drained)} / ${num(q.nodes_lost)}`, "nodes-down"),
      card("Pending jobs", String((q.queues || []).reduce((a, x) => a + num(x.pending_jobs), 0)), "pending-count"),
      card("Running jobs", String((q.queues || []).reduce((a, x) => a + num(x.running_jobs), 0)), "running-count")));

    this.pending.title(`Pending (${pending.length}${active.more ? "+" : ""})`);
    this.pending.set([pending, Math.floor(Date.now() / 10000)], () => table(
      ["ID", "Name", "User", "Queue", "State", ["Prio", "num"], "Asks for", "Waiting", "Estimated start", "Why it waits"],
      pending.map((j) => {
        const eta = tsDate(j.estimated_start_time);
        return h("tr", { "data-testid": `job-row-${j.id}` },
          td(jobLink(j.id)), td(j.spec?.name || "—"), td(j.user), td(j.spec?.queue || "default"),
          td(badge(j.state, `job-state-${j.id}`)), td(String(num(j.spec?.priority)), "num"), td(asks(j.spec), "nowrap"),
          td(fmtDuration((Date.now() - (tsDate(j.create_time) || new Date()).getTime()) / 1000), "nowrap"),
          td(eta ? [fmtTime(eta), h("br"), h("span", { class: "muted" }, fmtRelative(eta))] : h("span", { class: "muted" }, "no estimate"),
            "nowrap", `job-eta-${j.id}`),
          td(j.reason || "", "reason"));
      }), "Nothing is waiting.", "pending-table"));

    this.running.title(`Running (${running.length})`);
    this.running.set([running, Math.floor(Date.now() / 10000)], () => table(
      ["ID", "Name", "User", "Queue", "State", "Nodes", ["GPUs", "num"], "Running for", "Progress", ["Samples/s", "num"], ["Loss", "num"], "Time limit"],
      running.map((j) => {
        const started = tsDate(j.start_time);
        const ran = started ? (Date.now() - started.getTime()) / 1000 : 0;
        const limit = durSeconds(j.spec?.time_limit);
        const m = j.metrics || {};
        return h("tr", { "data-testid": `job-row-${j.id}` },
          td(jobLink(j.id)), td(j.spec?.name || "—"), td(j.user), td(j.spec?.queue || "default"),
          td(badge(j.state, `job-state-${j.id}`)),
          td((j.allocations || []).slice().sort((a, b) => num(a.group_rank) - num(b.group_rank)).map((a) => a.node).join(", ") || "—", "nodes-list"),
          td(String(jobGpus(j)), "num"),
          td(started ? fmtDuration(ran) : "—", "nowrap"),
          td(progressCell(j, `job-progress-${j.id}`)),
          td(hasMetrics(j) ? fmtInt(m.samples_per_second) : "—", "num"),
          td(hasMetrics(j) ? fmtNum(m.loss, 4) : "—", "num"),
          td(limit ? `${fmtDuration(limit)}${started ? ` (${fmtDuration(Math.max(0, limit - ran))} left)` : ""}` : "none", "nowrap"));
      }), "Nothing is running.", "running-table"));

    this.finished.title(`Recently finished (${finished.length})`);
    this.finished.set([finished, Math.floor(Date.now() / 10000)], () => table(
      ["ID", "Name", "User", "Queue", "State", "Ended", "Ran", "Why"],
      finished.map((j) => {
        const st = tsDate(j.start_time), en = tsDate(j.end_time);
        return h("tr", { "data-testid": `job-row-${j.id}` },
          td(jobLink(j.id)), td(j.spec?.name || "—"), td(j.user), td(j.spec?.queue || "default"),
          td(badge(j.state, `job-state-${j.id}`)), td(timeCell(j.end_time), "nowrap"),
          td(st && en ? fmtDuration((en - st) / 1000) : "—", "nowrap"), td(j.reason || "", "reason"));
      }), "No finished jobs.", "finished-table"));

    const specs = new Map((queues.queues || []).map((x) => [x.spec?.name, x]));
    this.queues.set([q.queues, queues], () => table(
      ["Queue", ["Weight", "num"], "Cohort", ["Pending", "num"], ["Running", "num"], ["GPUs in use", "num"], ["GPUs asked by pending", "num"], ["Borrowed", "num"]],
      (q.queues || []).map((x) => {
        const sp = specs.get(x.queue);
        return h("tr", { "data-testid": `queue-row-${x.queue}` },
          td(x.queue), td(sp ? fmtNum(sp.spec.weight) : "—", "num"), td(sp?.spec?.cohort || "—"),
          td(String(num(x.pending_jobs)), "num"), td(String(num(x.running_jobs)), "num"),
          td(String(num(x.gpus_in_use)), "num"), td(String(num(x.gpus_requested_pending)), "num"),
          td(sp ? String(num(sp.gpus_borrowed)) : "—", "num"));
      }), "No queues.", "queues-table"));
    return 3000;
  }
}

class NodesPage {
  constructor(root) {
    this.summary = new Section(null, "nodes-summary");
    this.list = new Section(null, "nodes");
    this.updated = h("span", { class: "muted updated" });
    this.warning = h("p", { class: "warning", hidden: true });
    root.replaceChildren(h("div", { class: "page-head" }, h("h1", {}, "Nodes"), this.updated),
      this.warning, this.summary.el, this.list.el);
  }
  async refresh() {
    const nodes = [];
    let token = "", warning = "";
    do {
      const r = await api("xl.v1.NodeService/ListNodes", { page_size: 2000, page_token: token });
      nodes.push(...(r.nodes || []));
      warning = r.security_warning || warning;
      token = r.next_page_token || "";
    } while (token && nodes.length < 20000);
    this.updated.textContent = `updated ${fmtTime(new Date())}`;
    this.warning.hidden = !warning;
    this.warning.textContent = warning;
    const count = (st) => nodes.filter((n) => n.state === st).length;
    const gpus = nodes.reduce((a, n) => a + (n.inventory?.gpus || []).length, 0);
    const used = nodes.reduce((a, n) => a + (n.usage?.gpus_in_use || []).length, 0);
    this.summary.set([nodes.map((n) => [n.name, n.state, (n.inventory?.gpus || []).length, n.usage?.gpus_in_use])], () =>
      h("div", { class: "cards" },
        card("Nodes", String(nodes.length), "nodes-count"),
        card("Ready", String(count("READY")), "nodes-ready"),
        card("Drained", String(count("DRAINED")), "nodes-drained"),
        card("Lost", String(count("LOST")), "nodes-lost"),
        card("GPUs allocated", `${used} / ${gpus}`, "gpus-allocated")));
    this.list.set([nodes, Math.floor(Date.now() / 10000)], () => table(
      ["Node", "State", ["GPUs", "num"], "Allocated", "GPU model", "CPUs, memory used", "NVMe free", "NICs", "Labels", "Jobs", "Heartbeat"],
      nodes.map((n) => {
        const inv = n.inventory || {}, use = n.usage || {};
        const gs = inv.gpus || [];
        const inUse = new Set((use.gpus_in_use || []).map(num));
        const models = [...new Set(gs.map((g) => JSON.stringify([g.model, num(g.memory_bytes)])))].map((x) => JSON.parse(x));
        const nvme = inv.nvme || [];
        const free = nvme.reduce((a, d) => a + num(d.free_bytes), 0);
        const cap = nvme.reduce((a, d) => a + num(d.capacity_bytes), 0);
        const labels = Object.entries(inv.labels || {}).sort(([a], [b]) => a.localeCompare(b));
        return h("tr", { "data-testid": `node-row-${n.name}`, class: `node-${n.state}` },
          td([h("div", { class: "strong nowrap" }, n.name),
            h("div", { class: "muted small nowrap" }, [inv.address, n.agent_version ? `agent ${n.agent_version}` : ""].filter((x) => x).join(" · "))]),
          td([badge(n.state, `node-state-${n.name}`),
            n.state_reason ? h("div", { class: "node-reason", "data-testid": `node-reason-${n.name}` }, n.state_reason) : null]),
          td(String(gs.length), "num", `node-gpus-${n.name}`),
          td(gs.length ? h("span", { class: "gpu-cells" },
            gs.map((g) => h("span", {
              class: inUse.has(num(g.index)) ? "gpu used" : "gpu",
              title: `GPU ${num(g.index)} ${g.uuid || ""}${inUse.has(num(g.index)) ? " (allocated)" : " (free)"}`,
            })),
            h("span", { "data-testid": `node-gpus-used-${n.name}` }, String(inUse.size)), `/${gs.length}`) : h("span", { class: "muted" }, "—")),
          td(models.length ? models.map(([model, mem]) => h("div", {}, model, mem ? h("div", { class: "muted small" }, `${fmtBytes(mem)} each`) : null))
            : h("span", { class: "muted" }, "no GPUs"), "model"),
          td([h("div", {}, `${num(use.cpus_in_use)} / ${num(inv.cpus)} CPUs`),
            h("div", {}, `${fmtBytes(use.memory_bytes_in_use)} / ${fmtBytes(inv.memory_bytes)}`)], "nowrap"),
          td(nvme.length ? h("span", { title: nvme.map((d) => `${d.device} ${d.path}: ${fmtBytes(d.free_bytes)} free of ${fmtBytes(d.capacity_bytes)}`).join("\n") },
            `${fmtBytes(free)} of ${fmtBytes(cap)}`) : h("span", { class: "muted" }, "none"), "nowrap"),
          td((inv.nics || []).length ? (inv.nics || []).map((c) => h("div", { class: "nowrap" },
            `${c.name} ${c.kind === "INFINIBAND" ? "IB" : c.kind === "ETHERNET" ? "Eth" : ""} ${fmtNum(c.gbps)} Gbit/s`))
            .concat(num(use.nic_gbps_in_use) ? [h("div", { class: "muted" }, `${fmtNum(use.nic_gbps_in_use)} Gbit/s reserved`)] : [])
            : h("span", { class: "muted" }, "none")),
          td(labels.map(([k, v]) => h("div", {}, h("span", { class: "label" }, `${k}=${v}`)))),
          td((use.job_ids || []).length ? (use.job_ids || []).map((id, i) => [i ? ", " : "", jobLink(id)]) : h("span", { class: "muted" }, "idle"),
            undefined, `node-jobs-${n.name}`),
          td(tsDate(n.last_heartbeat_time) ? fmtRelative(n.last_heartbeat_time) : "—", "nowrap"));
      }), "No node has registered.", "nodes-table"));
    return 3000;
  }
}

// A job's page: refreshed every 2 s while it is active; events, log and
// metrics are fetched incrementally.
class JobPage {
  constructor(root, id) {
    this.id = id;
    this.title = h("h1", {}, `Job ${id}`);
    this.state = h("span", { "data-testid": "job-state" });
    this.updated = h("span", { class: "muted updated" });
    this.summary = new Section(null, "job-summary");
    this.why = new Section(null, "job-why");
    this.points = h("span", { "data-testid": "metrics-points" }, "0");
    this.charts = h("div", { class: "charts" });
    this.metricsBox = h("div", { class: "cards" });
    this.training = h("section", { "data-testid": "job-training" }, h("h2", {}, "Training"), this.metricsBox,
      this.charts, h("p", { class: "muted small" }, this.points, " points charted (GetJobMetrics), refreshed every 2 s"));
    this.allocations = new Section("Allocations (rank order)", "job-allocations");
    this.exits = new Section("Rank exits", "job-exits");
    this.events = new Section("Events", "job-events");
    this.logHead = h("h2", {}, "Log (tail)");
    this.logNote = h("p", { class: "muted" });
    this.log = h("pre", { class: "log", "data-testid": "log-tail" });
    this.spec = new Section("Spec", "job-spec-section");
    this.plan = new Section("Plan", "job-plan");
    root.replaceChildren(
      h("div", { class: "page-head" }, this.title, this.state, this.updated),
      this.summary.el, this.why.el, this.training, this.allocations.el, this.exits.el,
      this.events.el, h("section", {}, this.logHead, this.logNote, this.log), this.spec.el, this.plan.el);
    this.eventList = [];
    this.eventSeq = 0;
    this.points_ = [];    // metrics points before the cursor, and after it
    this.cursor = "";     // next_page_token of the last full page
    this.cursorAt = 0;    // how many points precede the cursor
    this.logSeq = 0;
    this.lines = [];      // complete lines shown
    this.partial = new Map();  // "rank/stream" -> {decoder, text}
    this.lastAttempt = 0;
    this.logDenied = "";
    this.finalPass = false;
  }

  async fetchMetrics() {
    // Pages after the cursor only: points before it do not change.
    let token = this.cursor, at = this.cursorAt;
    const fresh = [];
    for (let i = 0; i < 20; i++) {
      const r = await api("xl.v1.JobService/GetJobMetrics", { job_id: this.id, page_size: 2000, page_token: token });
      const pts = r.points || [];
      fresh.push(...pts);
      if (!r.next_page_token) break;
      token = r.next_page_token;
      at += pts.length;
      this.points_ = this.points_.slice(0, this.cursorAt).concat(fresh);
      this.cursor = token;
      this.cursorAt = at;
      fresh.length = 0;
    }
    this.points_ = this.points_.slice(0, this.cursorAt).concat(fresh);
  }

  async fetchEvents() {
    const msgs = await apiStream("xl.v1.JobService/WatchJob", { job_id: this.id, after_seq: String(this.eventSeq) });
    for (const e of msgs) {
      if (num(e.seq) <= this.eventSeq) continue;
      this.eventList.push(e);
      this.eventSeq = num(e.seq);
    }
  }

  async fetchLogs() {
    if (this.logDenied) return;
    // The API reads a log from the start (or after a seq): a long one is
    // read through in pages, for up to 3 s a refresh. The gateway ends a
    // page at 2000 chunks or about 4 MiB of JSON; a page that reached
    // either may have more behind it.
    const t0 = Date.now();
    try {
      this.logBehind = false;
      for (;;) {
        const msgs = await apiStream("xl.v1.JobService/StreamLogs",
          { job_id: this.id, all_ranks: true, follow: false, after_seq: String(this.logSeq) });
        for (const c of msgs) this.addChunk(c);
        if (msgs.length < 2000 && JSON.stringify(msgs).length < 3.5 * 1024 * 1024) break;
        if (Date.now() - t0 > 3000) { this.logBehind = true; break; }
      }
    } catch (e) {
      if (e.status === 403 || e.status === 404) { this.logDenied = e.message; return; }
      throw e;
    }
  }

  addChunk(c) {
    const seq = num(c.seq);
    if (seq && seq <= this.logSeq) return;
    this.logSeq = Math.max(this.logSeq, seq);
    const attempt = num(c.attempt);
    if (attempt && attempt !== this.lastAttempt) {
      if (this.lastAttempt) this.lines.push(`──── attempt ${attempt} ────`);
      this.lastAttempt = attempt;
      this.partial.clear();
    }
    const key = `${num(c.rank)}/${c.stream}`;
    let p = this.partial.get(key);
    if (!p) { p = { decoder: new TextDecoder("utf-8"), text: "" }; this.partial.set(key, p); }
    let bytes;
    try {
      const bin = atob(c.data || "");
      bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    } catch (e) { bytes = new Uint8Array(); }
    p.text += p.decoder.decode(bytes, { stream: true });
    const parts = p.text.split("\n");
    p.text = parts.pop();
    const prefix = `[rank ${num(c.rank)}${c.stream === "STDERR" ? " err" : ""}] `;
    for (const line of parts) this.lines.push(prefix + line.replace(/\r$/, ""));
    if (this.lines.length > 2000) this.lines.splice(0, this.lines.length - 1000);
  }

  renderLog() {
    const shown = this.lines.slice(-500);
    for (const [key, p] of this.partial) {
      if (p.text) shown.push(`[rank ${key.split("/")[0]}${key.endsWith("STDERR") ? " err" : ""}] ${p.text}`);
    }
    const text = shown.join("\n");
    this.logNote.textContent = this.logDenied ? `The log is not shown: ${this.logDenied}` :
      this.logBehind ? `reading the log from its start (at chunk ${fmtInt(this.logSeq)})…` :
      text ? `the last ${shown.length} lines of every rank's output, refreshed every 2 s` : "no output yet";
    if (text === this.log.textContent) return;
    const atEnd = this.log.scrollTop + this.log.clientHeight >= this.log.scrollHeight - 8;
    this.log.textContent = text;
    this.log.hidden = !text;
    if (atEnd) this.log.scrollTop = this.log.scrollHeight;
  }

  async refresh() {
    const job = await api("xl.v1.JobService/GetJob", { job_id: this.id });
    const pending = job.state === "PENDING" || job.state === "PREEMPTED";
    const [explain] = await Promise.all([
      pending ? api("xl.v1.JobService/ExplainJob", { job_id: this.id }).catch(() => null) : null,
      this.fetchMetrics(), this.fetchEvents(), this.fetchLogs(),
    ]);
    this.updated.textContent = `updated ${fmtTime(new Date())}`;
    this.render(job, explain);
    if (ACTIVE.has(job.state)) { this.finalPass = false; return 2000; }
    // One more pass after the end: output and events may trail the state.
    if (!this.finalPass) { this.finalPass = true; return 2000; }
    return 0;
  }

  render(job, explain) {
    const spec = job.spec || {};
    this.title.textContent = `Job ${job.id}${spec.name ? ` · ${spec.name}` : ""}`;
    this.state.replaceChildren(badge(job.state));
    document.title = `xl · job ${job.id} ${job.state}`;
    const started = tsDate(job.start_time), ended = tsDate(job.end_time);
    const ran = started ? ((ended || new Date()) - started) / 1000 : 0;
    const limit = durSeconds(spec.time_limit);
    this.summary.set([job.state, job.attempt, job.retries_used, job.create_time, job.start_time, job.end_time,
      job.exit_code, job.preemptions, job.resizes, job.world_size, ended ? 0 : Math.floor(Date.now() / 5000)], () =>
      h("div", { class: "cards" },
        card("User", job.user || "—", "job-user"),
        card("Queue", spec.queue || "default", "job-queue", `priority ${num(spec.priority)}`),
        card("Asks for", asks(spec), "job-asks", `world size ${num(job.world_size)}`),
        card("Attempt", String(num(job.attempt)), "job-attempt",
          `retries ${num(job.retries_used)} of ${num(spec.max_retries)}` +
          (num(job.preemptions) ? `, preempted ${num(job.preemptions)}×` : "") +
          (num(job.resizes) ? `, resized ${num(job.resizes)}×` : "")),
        card("Submitted", fmtTime(job.create_time), "job-created", fmtRelative(job.create_time)),
        started ? card(ended ? "Ran" : "Running for", fmtDuration(ran), "job-ran",
          limit ? `time limit ${fmtDuration(limit)}` : "no time limit")
          : card(ended ? "Never ran" : "Waiting for", tsDate(job.create_time) ? fmtDuration(((ended || new Date()) - tsDate(job.create_time)) / 1000) : "—",
            "job-waiting", limit ? `time limit ${fmtDuration(limit)}` : "no time limit"),
        ended ? card("Ended", fmtTime(ended), "job-ended", num(job.exit_code) ? `exit code ${num(job.exit_code)}` : null) : null));

    const eta = tsDate(job.estimated_start_time);
    this.why.set([job.reason, job.estimated_start_time, explain, job.state], () => {
      const out = [];
      if (job.reason) out.push(h("p", { class: `reason-box st-${job.state}`, "data-testid": "job-reason" }, job.reason));
      if (pendingState(job.state)) {
        out.push(h("p", {}, "Estimated start: ",
          h("strong", { "data-testid": "job-eta" }, eta ? `${fmtTime(eta)} (${fmtRelative(eta)})` : "none yet"),
          eta ? h("span", { class: "muted" }, " — a lower bound from the time limits of the jobs holding the nodes") : null));
      }
      if (explain) {
        const pr = explain.priority || {};
        out.push(h("p", {}, `Place in the queue: `,
          h("strong", { "data-testid": "job-position" }, `${num(explain.position)} of ${num(explain.pending)}`),
          ` pending; ${num(explain.gpus_ahead)} GPUs asked for ahead of it; effective priority ${fmtNum(pr.effective, 4)}`));
        if (pr.note) out.push(h("p", { class: "muted" }, pr.note));
        const ahead = explain.ahead || [];
        if (ahead.length) {
          out.push(table(["Ahead", "User", "Queue", ["Prio", "num"], ["Effective", "num"], "Asks for", "Estimated start"],
            ahead.map((a) => h("tr", {}, td(jobLink(a.job_id)), td(a.user), td(a.queue || "default"),
              td(String(num(a.priority)), "num"), td(fmtNum(a.effective_priority, 4), "num"),
              td(`${num(a.nodes)} node${num(a.nodes) === 1 ? "" : "s"}${num(a.gpus_per_node) ? ` × ${num(a.gpus_per_node)} GPUs` : ""}`),
              td(timeCell(a.estimated_start_time), "nowrap")))));
        }
      }
      return out;
    });

    // Training: the charts grow as points come.
    const pts = this.points_;
    const m = job.metrics || {};
    this.points.textContent = String(pts.length);
    this.training.hidden = !pts.length && !hasMetrics(job);
    const key = JSON.stringify([pts.length, pts.length ? pts[pts.length - 1] : null]);
    if (key !== this.chartKey) {
      this.chartKey = key;
      this.charts.replaceChildren(
        lineChart({ title: "Loss", series: byAttempt(pts, (p) => num(p.loss)), testid: "chart-loss", yFormat: (v) => fmtNum(v, 3) }),
        lineChart({ title: "Samples/s", series: byAttempt(pts, (p) => num(p.samples_per_second)), testid: "chart-sps", yFormat: fmtCompact }));
    }
    const total = num(m.total_steps);
    const mkey = JSON.stringify(m);
    if (mkey !== this.metricsKey) {
      this.metricsKey = mkey;
      this.metricsBox.replaceChildren(...(hasMetrics(job) ? [
        card("Step", total ? `${fmtInt(m.step)} / ${fmtInt(total)}` : fmtInt(m.step), "job-step",
          total ? progressBar(num(m.step) / total) : null),
        card("Loss", fmtNum(m.loss, 4), "job-loss"),
        card("Samples/s", fmtInt(m.samples_per_second), "job-sps", num(m.mfu) ? `MFU ${(100 * num(m.mfu)).toFixed(1)}%` : null),
        card("Step time", fmtSeconds(m.step_seconds), "job-step-time",
          `compute ${fmtSeconds(m.compute_seconds)}, all-reduce ${fmtSeconds(m.allreduce_seconds)}, data ${fmtSeconds(m.data_wait_seconds)}`),
        card("All-reduce", `${fmtNum(m.allreduce_bus_gbps)} Gbit/s`, "job-bus", "bus bandwidth"),
        card("Peak memory", fmtBytes(m.peak_memory_bytes), "job-peak-mem",
          num(m.resumed_from_step) ? `resumed from step ${fmtInt(m.resumed_from_step)}` : null),
      ] : [h("p", { class: "muted" }, "No training metrics reported (yet). Jobs report them through XL_METRICS_FD; xl-train does.")]));
    }

    const allocs = (job.allocations || []).slice().sort((a, b) => num(a.group_rank) - num(b.group_rank));
    this.allocations.hide(!allocs.length);
    this.allocations.set([allocs, job.master_addr, job.master_port], () => [
      job.master_addr ? h("p", { class: "muted" }, `MASTER_ADDR ${job.master_addr}, MASTER_PORT ${num(job.master_port)}`) : null,
      table([["Group rank", "num"], "Node", "Ranks", "GPUs", ["CPUs", "num"], "Memory", "NVMe", "NIC", "Address"],
        allocs.map((a) => h("tr", { "data-testid": `alloc-${num(a.group_rank)}` },
          td(String(num(a.group_rank)), "num"), td(a.node), td((a.ranks || []).join(", ")),
          td((a.gpu_indices || []).join(", ") || "—"), td(String(num(a.cpus)), "num"),
          td(num(a.memory_bytes) ? fmtBytes(a.memory_bytes) : "—"), td(num(a.nvme_bytes) ? fmtBytes(a.nvme_bytes) : "—"),
          td(num(a.nic_gbps) ? `${fmtNum(a.nic_gbps)} Gbit/s` : "—"), td(a.address || "—"))))]);

    const exits = job.rank_exits || [];
    this.exits.hide(!exits.length);
    this.exits.set([exits], () => table([["Rank", "num"], "Node", ["Exit code", "num"], ["Signal", "num"], "Peak memory", "Message"],
      exits.slice().sort((a, b) => num(a.rank) - num(b.rank)).map((x) => h("tr", {},
        td(String(num(x.rank)), "num"), td(x.node), td(String(num(x.exit_code)), "num"), td(num(x.signal) ? String(num(x.signal)) : "—", "num"),
        td(num(x.peak_memory_bytes) ? fmtBytes(x.peak_memory_bytes) : "—"),
        td([x.failed_to_start ? "failed to start: " : "", x.message || ""], "reason")))));

    this.events.title(`Events (${this.eventList.length})`);
    this.events.set([this.eventSeq], () => [
      h("span", { class: "hidden-state", "data-testid": "events-count" }, String(this.eventList.length)),
      table([["#", "num"], "Time", "From", "To", ["Attempt", "num"], "Why"],
        this.eventList.map((e) => h("tr", { "data-testid": `job-event-${num(e.seq)}` },
          td(String(num(e.seq)), "num"), td(fmtTime(e.time), "nowrap"),
          td(e.from_state && e.from_state !== "JOB_STATE_UNSPECIFIED" ? badge(e.from_state) : "—"),
          td(badge(e.to_state, `job-event-to-${num(e.seq)}`)), td(String(num(e.attempt)), "num"), td(e.reason || "", "reason"))),
        "No events yet.", "events-table")]);

    this.renderLog();

    this.spec.set([spec], () => h("pre", { class: "spec", "data-testid": "job-spec" }, JSON.stringify(spec, null, 2)));
    this.plan.hide(!job.plan);
    if (job.plan) this.plan.set([job.plan], () => planSummary(job.plan));
  }
}
function pendingState(st) { return st === "PENDING" || st === "PREEMPTED"; }

// ---------------------------------------------------------------- plan ----

// "7.5e9", "7.5B", "70B", "2T", "500M", "1,000" -> a number; "" -> 0.
function parseCount(text, field) {
  const t = String(text || "").trim().replace(/[,_\s]/g, "");
  if (!t) return 0;
  const m = /^([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)([kKmMbBgGtTpP]?)$/.exec(t);
  if (!m) throw new Error(`${field}: "${text}" is not a count (like 7.5e9, 7.5B, 70B, 2T)`);
  const mult = { "": 1, k: 1e3, m: 1e6, b: 1e9, g: 1e9, t: 1e12, p: 1e15 }[m[2].toLowerCase()];
  return Number(m[1]) * mult;
}

const PLAN_FIELDS = [
  // [name, label, kind, default, hint]
  ["parameters", "Parameters", "count", "7B", "7.5e9, 7B, 70B; or give the shape below"],
  ["layers", "Layers", "int", "", "transformer shape (instead of parameters)"],
  ["hidden_size", "Hidden size", "int", "", ""],
  ["heads", "Attention heads", "int", "", ""],
  ["vocab_size", "Vocabulary", "int", "", ""],
  ["sequence_length", "Sequence length (tokens)", "int", "4096", "tokens per sample"],
  ["ffn_hidden_size", "FFN size", "int", "", "default 4 × hidden"],
  ["precision", "Precision", ["BF16", "FP16", "FP32"], "BF16", ""],
  ["optimizer", "Optimizer", ["ADAMW", "SGD_MOMENTUM", "ADAFACTOR"], "ADAMW", ""],
  ["sharding", "Sharding", ["NO_SHARDING", "ZERO_1", "ZERO_2", "ZERO_3"], "NO_SHARDING", "ZeRO-3 = FSDP full shard"],
  ["recompute", "Recompute", ["NO_RECOMPUTE", "SELECTIVE", "FULL"], "NO_RECOMPUTE", ""],
  ["sequence_parallel", "Sequence parallel", "bool", false, ""],
  ["tensor_parallel", "Tensor parallel", "int", "", "default 1"],
  ["pipeline_parallel", "Pipeline parallel", "int", "", "default 1"],
  ["micro_batch_size", "Micro-batch per GPU", "int", "", "sequences; default 1"],
  ["global_batch_size", "Global batch", "int", "1024", "sequences per step"],
  ["gpu_model", "GPU model", "gpu", "", "empty: every model of the fleet or catalogue"],
  ["gpus", "GPUs", "int", "", "empty: the fewest that fit"],
  ["gpus_per_node", "GPUs per node", "int", "", "default: the fleet's, else 8"],
  ["dataset_tokens", "Dataset tokens", "count", "", "1T, 2e12"],
  ["dataset_bytes", "Dataset bytes", "count", "", "on disk: 2T"],
  ["train_tokens", "Tokens to train", "count", "", "default: one epoch"],
  ["mfu", "MFU", "float", "", "default 0.4"],
  ["comm_share", "All-reduce share of step", "float", "", "default 0.25"],
  ["checkpoints_kept", "Checkpoints kept", "int", "", "default 2"],
];
const SHAPE = ["layers", "hidden_size", "heads", "vocab_size", "sequence_length", "ffn_hidden_size"];
const CATALOGUE = ["H200-141GB", "H100-SXM-80GB", "H100-PCIe-80GB", "A100-80GB", "A100-40GB",
                   "L40S-48GB", "A40-48GB", "A30-24GB", "L4-24GB", "V100-32GB"];
const PLAN_KEY = "xl-plan-form";

// The form's values as a ModelSpec (only what was given: the planner
// fills in the rest).
function modelFromForm(form) {
  const f = new FormData(form);
  const model = {}, shape = {};
  for (const [name, label, kind] of PLAN_FIELDS) {
    const raw = f.get(name);
    let v;
    if (kind === "bool") v = raw === "on";
    else if (Array.isArray(kind) || kind === "gpu") v = String(raw || "").trim();
    else if (kind === "count") v = parseCount(raw, label);
    else {
      const t = String(raw || "").trim();
      v = t === "" ? 0 : Number(t);
      if (!Number.isFinite(v) || v < 0 || (kind === "int" && !Number.isInteger(v))) {
        throw new Error(`${label}: "${t}" is not a ${kind === "int" ? "whole number" : "number"}`);
      }
    }
    if (!v) continue;
    if (SHAPE.includes(name)) shape[name] = v;
    else model[name] = v;
  }
  const fullShape = ["layers", "hidden_size", "heads", "vocab_size"].some((k) => shape[k]);
  if (fullShape) delete model.parameters;  // the shape gives the parameters
  if (Object.keys(shape).length) model.transformer = shape;
  return model;
}

function planSummary(p) {
  const mem = p.memory_per_gpu || {};
  const model = p.model || {};
  const fit = (p.gpus_that_fit || []).find((g) => g.model === p.gpu_model);
  const dp = num(p.data_parallel), micro = num(model.micro_batch_size), global = num(model.global_batch_size);
  const accum = dp && micro && global ? Math.round(global / (dp * micro)) : 0;
  return [
    h("p", { class: "headline" },
      h("span", { "data-testid": "plan-gpus" }, String(num(p.gpus))), ` GPU${num(p.gpus) === 1 ? "" : "s"} on `,
      h("span", { "data-testid": "plan-nodes" }, String(num(p.nodes))), ` node${num(p.nodes) === 1 ? "" : "s"} of `,
      h("span", { "data-testid": "plan-model" }, p.gpu_model || "—"),
      fit && !fit.fits ? h("span", { class: "no small" }, " — does not fit as asked (see the warnings)") : null),
    h("div", { class: "cards" },
      card("Parameters", fmtCount(p.parameters), "plan-params"),
      card("Memory per GPU", fmtBytes(mem.total_bytes, true), "plan-memory",
        fit && num(fit.memory_bytes) ? `of ${fmtBytes(fit.memory_bytes, true)}${fit.fits ? "" : " — does not fit"}` : null),
      card("Parallelism", `DP ${dp} × TP ${num(model.tensor_parallel) || 1} × PP ${num(model.pipeline_parallel) || 1}`, "plan-parallel",
        `micro-batch ${micro}${accum ? `, accumulation ${accum}` : ""}`),
      card("Step time", fmtSeconds(p.step_seconds), "plan-step"),
      card("Tokens/s", fmtCount(p.tokens_per_second), "plan-tps", `MFU ${fmtNum(model.mfu)}`),
      card("Time to train", num(p.train_seconds) ? fmtDuration(p.train_seconds) : "—", "plan-train",
        num(model.train_tokens || model.dataset_tokens) ? `${fmtCount(model.train_tokens || model.dataset_tokens)} tokens` : "give tokens to train"),
      card("Checkpoint", fmtBytes(p.checkpoint_bytes, true), "plan-checkpoint"),
      card("NVMe per node", fmtBytes(p.nvme_bytes_per_node, true), "plan-nvme"),
      card("Read per node", `${fmtBytes(p.read_bytes_per_second_per_node, true)}/s`, "plan-read"),
      card("All-reduce per step", fmtBytes(p.allreduce_bytes_per_step, true), "plan-allreduce",
        `NIC ${fmtNum(p.nic_gbps_needed)} Gbit/s per node`)),
    memoryBar(mem, fit ? num(fit.memory_bytes) : 0),
  ];
}

// Memory per GPU as one stacked bar, with the GPU's memory marked.
function memoryBar(mem, capacity) {
  const parts = [["weights", mem.weights_bytes], ["gradients", mem.gradients_bytes], ["optimizer", mem.optimizer_bytes],
    ["master weights", mem.master_weights_bytes], ["activations", mem.activations_bytes], ["workspace", mem.workspace_bytes]]
    .map(([k, v]) => [k, num(v)]);
  const total = Math.max(num(mem.total_bytes), parts.reduce((a, [, v]) => a + v, 0));
  const scale = Math.max(total, capacity) || 1;
  const W = 560, Hh = 26;
  const svg = s("svg", { viewBox: `0 0 ${W} ${Hh + 18}`, class: "membar", "data-testid": "plan-memory-bar" });
  let x = 0;
  parts.forEach(([k, v], i) => {
    const w = (v / scale) * W;
    if (w > 0) svg.append(s("rect", { x, y: 0, width: w, height: Hh, class: `seg seg${i}` }, s("title", {}, `${k}: ${fmtBytes(v, true)}`)));
    x += w;
  });
  if (capacity) {
    const cx = (capacity / scale) * W;
    svg.append(s("line", { x1: cx, x2: cx, y1: -2, y2: Hh + 4, class: "cap" }),
      s("text", { x: Math.min(cx, W - 4), y: Hh + 15, "text-anchor": cx > W - 60 ? "end" : "middle", class: "axis-label" },
        `GPU ${fmtBytes(capacity, true)}`));
  }
  const legend = h("div", { class: "legend" }, parts.map(([k, v], i) =>
    h("span", {}, h("span", { class: `swatch seg${i}` }), `${k} ${fmtBytes(v, true)}`)));
  return h("div", { class: "memory" }, h("div", { class: "k" }, "Memory per GPU"), svg, legend);
}

class PlanPage {
  constructor(root) {
    let saved = {};
    try { saved = JSON.parse(sessionStorage.getItem(PLAN_KEY) || "{}"); } catch (e) { saved = {}; }
    const list = h("datalist", { id: "gpu-models" }, CATALOGUE.map((g) => h("option", { value: g })));
    this.list = list;
    const fields = PLAN_FIELDS.map(([name, label, kind, def, hint]) => {
      const value = name in saved ? saved[name] : def;
      let input;
      if (Array.isArray(kind)) {
        input = h("select", { name, id: `plan-${name}` }, kind.map((o) => h("option", { value: o, selected: o === value }, o)));
      } else if (kind === "bool") {
        input = h("input", { name, id: `plan-${name}`, type: "checkbox", checked: !!value });
      } else {
        input = h("input", {
          name, id: `plan-${name}`, value, autocomplete: "off", list: kind === "gpu" ? "gpu-models" : null,
          inputmode: kind === "int" ? "numeric" : null, placeholder: hint && hint.startsWith("default") ? hint : null,
        });
      }
      return h("label", { class: kind === "bool" ? "check" : null, for: `plan-${name}` },
        h("span", { class: "lbl" }, label), input,
        hint && !(hint.startsWith("default")) ? h("span", { class: "hint" }, hint) : null);
    });
    this.form = h("form", { class: "plan", "data-testid": "plan-form" },
      h("fieldset", {}, h("legend", {}, "Model"), fields.slice(0, 7)),
      h("fieldset", {}, h("legend", {}, "Training"), fields.slice(7, 16)),
      h("fieldset", {}, h("legend", {}, "Hardware and data"), fields.slice(16)),
      h("div", { class: "actions" }, h("button", { type: "submit", "data-testid": "plan-submit" }, "Plan"),
        h("button", { type: "reset", class: "quiet" }, "Reset")),
      list);
    this.out = h("div", { class: "plan-result", "data-testid": "plan-result" });
    this.form.addEventListener("submit", (ev) => { ev.preventDefault(); this.submit(); });
    this.form.addEventListener("reset", () => { sessionStorage.removeItem(PLAN_KEY); });
    root.replaceChildren(h("div", { class: "page-head" }, h("h1", {}, "What does my training need?")),
      h("p", { class: "muted intro" }, "The planner of ", h("code", {}, "xlctl plan"),
        ", against this scheduler's fleet: memory per GPU, the GPUs and nodes it takes, storage, network and time, with the arithmetic."),
      this.form, this.out);
    // The fleet's models, for the GPU field.
    api("xl.v1.NodeService/ListNodes", { page_size: 2000 }).then((r) => {
      const models = new Set((r.nodes || []).flatMap((n) => (n.inventory?.gpus || []).map((g) => g.model)));
      for (const m of [...models].sort()) if (m) this.list.prepend(h("option", { value: m }, "in the fleet"));
    }).catch(() => {});
  }
  async submit() {
    const gen = S.gen;
    const values = {};
    for (const [name, , kind] of PLAN_FIELDS) {
      const el = this.form.elements[name];
      values[name] = kind === "bool" ? el.checked : el.value;
    }
    sessionStorage.setItem(PLAN_KEY, JSON.stringify(values));
    let model;
    try { model = modelFromForm(this.form); } catch (e) {
      this.out.replaceChildren(h("p", { class: "error", "data-testid": "plan-error" }, e.message));
      return;
    }
    this.out.replaceChildren(h("p", { class: "muted" }, "Planning…"));
    try {
      const p = await api("xl.v1.JobService/PlanResources", { model });
      if (gen !== S.gen) return;
      this.out.replaceChildren(...planSummary(p),
        h("h2", {}, "GPU models"),
        table(["GPU", "Memory", ["Peak TFLOP/s", "num"], "Fits", ["Largest micro-batch", "num"], ["In the fleet", "num"], "Note"],
          (p.gpus_that_fit || []).map((g) => h("tr", { class: g.model === p.gpu_model ? "chosen" : null },
            td(g.model), td(fmtBytes(g.memory_bytes)), td(fmtNum(g.peak_tflops), "num"),
            td(g.fits ? h("span", { class: "yes" }, "yes") : h("span", { class: "no" }, "no")),
            td(String(num(g.max_micro_batch)), "num"), td(String(num(g.in_fleet)), "num"), td(g.note || "", "reason"))),
          "No GPU model considered.", "plan-gpus-table"),
        (p.warnings || []).length ? h("h2", {}, "Warnings") : null,
        (p.warnings || []).length ? h("ul", { class: "warnings", "data-testid": "plan-warnings" }, p.warnings.map((w) => h("li", {}, w))) : null,
        h("h2", {}, "The arithmetic"),
        h("pre", { class: "arith", "data-testid": "plan-arithmetic" }, (p.arithmetic || []).join("\n")),
        h("details", {}, h("summary", {}, "The model with the planner's defaults filled in"),
          h("pre", { class: "spec" }, JSON.stringify(p.model || {}, null, 2))));
    } catch (e) {
      if (gen !== S.gen) return;
      if (e.status === 401) { askToken(e.message); }
      this.out.replaceChildren(h("p", { class: "error", "data-testid": "plan-error" }, String(e)));
    }
  }
  async refresh() { return 0; }
}

// ------------------------------------------------ routing and sign-in ----

function banner(text, kind = "error") {
  const b = document.getElementById("banner");
  b.hidden = !text;
  b.className = `banner ${kind}`;
  b.textContent = text || "";
}

function askToken(message) {
  S.paused = true;
  clearTimeout(S.timer);
  const dlg = document.getElementById("login");
  document.getElementById("login-error").textContent = message || "";
  if (!dlg.open) dlg.showModal();
  document.getElementById("token").focus();
}

async function signIn(token) {
  // The token is tried before it is kept.
  const err = document.getElementById("login-error");
  const button = document.getElementById("login-submit");
  button.disabled = true;
  err.textContent = "";
  try {
    const me = await api("xl.v1.AuthService/WhoAmI", {}, token);
    if (S.authEnabled && me.kind === "anonymous") throw new ApiError(401, "UNAUTHENTICATED", "the scheduler did not take the token");
    S.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    showMe(me);
    document.getElementById("login").close();
    document.getElementById("token").value = "";
    S.paused = false;
    route();
  } catch (e) {
    err.textContent = e.status === 401 || e.status === 403 ? `Token refused: ${e.message}` : String(e);
  } finally {
    button.disabled = false;
  }
}

function showMe(me) {
  S.me = me;
  const who = document.querySelector(".who");
  who.textContent = me ? `${me.name || "anonymous"}${me.admin ? " (admin)" : ""}` : "";
  who.title = me ? `signed in as ${me.kind || "user"} ${me.name}` : "";
  document.getElementById("signout").hidden = !(S.token && S.authEnabled);
  if (me && me.warning) banner(me.warning, "warning");
}

async function whoami() {
  try {
    showMe(await api("xl.v1.AuthService/WhoAmI"));
    return true;
  } catch (e) {
    if (e.status === 401) askToken(S.token ? `Token refused: ${e.message}` : "");
    else banner(String(e));
    return false;
  }
}

function route() {
  clearTimeout(S.timer);
  const gen = ++S.gen;
  const path = location.hash.replace(/^#\/?/, "") || "queue";
  const main = document.getElementById("main");
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", path === a.dataset.nav || path.startsWith(a.dataset.nav + "/") ||
      (a.dataset.nav === "queue" && path.startsWith("jobs/")));
  }
  banner("");
  let page;
  if (path === "nodes") { page = new NodesPage(main); document.title = "xl · nodes"; }
  else if (path === "plan") { page = new PlanPage(main); document.title = "xl · plan"; }
  else if (path.startsWith("jobs/") && path.length > 5) { page = new JobPage(main, decodeURIComponent(path.slice(5))); }
  else { page = new QueuePage(main); document.title = "xl · queue"; }
  S.page = page;
  if (S.paused) return;
  tick(gen);
}

async function tick(gen) {
  if (gen !== S.gen || S.paused) return;
  let next = 3000;
  try {
    next = await S.page.refresh();
    if (gen !== S.gen) return;
    banner("");
  } catch (e) {
    if (gen !== S.gen) return;
    if (e.status === 401) { askToken(S.token ? `Token refused: ${e.message}` : ""); return; }
    if (e.status === 404 && S.page instanceof JobPage) {
      document.getElementById("main").replaceChildren(h("h1", {}, `Job ${S.page.id}`),
        h("p", { class: "error", "data-testid": "error" }, String(e)));
      return;
    }
    banner(`${e instanceof ApiError ? e : `${e.name}: ${e.message}`} — retrying`);
    next = 5000;
  }
  if (next > 0 && gen === S.gen) S.timer = setTimeout(() => tick(gen), next);
}

document.getElementById("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = document.getElementById("token").value.trim();
  if (token) signIn(token);
});
document.getElementById("login").addEventListener("cancel", (ev) => ev.preventDefault());
document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  S.token = "";
  showMe(null);
  askToken("Signed out.");
});
window.addEventListener("hashchange", route);

(async () => {
  const server = document.querySelector(".server");
  server.textContent = `${location.protocol === "https:" ? "🔒 " : ""}${location.host}`;
  try {
    const r = await fetch("/api/info", { cache: "no-store" });
    const info = await r.json();
    S.authEnabled = !!info.auth_enabled;
    S.version = info.version || "";
  } catch (e) {
    banner(`the scheduler did not answer /api/info (${e.message})`);
  }
  if (S.version) server.textContent += ` · xl ${S.version}`;
  if (S.authEnabled && !S.token) {
    S.paused = true;
    route();
    askToken("");
    return;
  }
  await whoami();  // on 401 it asks for a token and pauses the pages
  route();
})();
