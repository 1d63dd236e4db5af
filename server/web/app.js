// The xl dashboard: read-only pages over the scheduler's JSON API
// (POST /api/xl.v1.<Service>/<Method>, protobuf's JSON mapping with the
// .proto field names). Every value from the API goes into the page as text
// (textContent), never as markup.
"use strict";

const state = { token: sessionStorage.getItem("xl-token") || "", timer: null,
                auth: false, route: "" };

// --- API ---
class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(method, body = {}) {
  const headers = { "Content-Type": "application/json" };
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  const r = await fetch("/api/" + method, { method: "POST", headers, body: JSON.stringify(body) });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) {
    if (r.status === 401) askToken(data.message || "sign in");
    throw new ApiError(r.status, data.code || String(r.status), data.message || r.statusText);
  }
  return data;
}

// --- DOM ---
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const num = (v) => (v === undefined || v === null || v === "" ? 0 : Number(v));
function bytes(v) {
  let n = num(v);
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}
function time(ts) {
  if (!ts) return "-";
  const d = new Date(ts);
  return isNaN(d) ? "-" : d.toLocaleString();
}
function duration(s) {
  s = num(s);
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}
function table(head, rows) {
  return h("table", {}, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
           h("tbody", {}, rows));
}
function card(k, v, testid) {
  return h("div", { class: "card" }, h("div", { class: "v", "data-testid": testid }, v),
           h("div", { class: "k" }, k));
}
function stateCell(s, testid) { return h("td", {}, h("span", { class: "state " + s, "data-testid": testid }, s)); }
function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes);
}
function showError(e) {
  show(h("p", { class: "error", "data-testid": "error" }, e.code ? `${e.code}: ${e.message}` : String(e)));
}

// An SVG line chart of points [{x, y}].
function chart(title, points, testid, width = 460, height = 180) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("data-testid", testid);
  svg.setAttribute("data-points", points.length);
  const pad = 34;
  if (points.length > 0) {
    const xs = points.map((p) => p.x), ys = points.map((p) => p.y);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    const sx = (x) => pad + ((x - x0) / (x1 - x0 || 1)) * (width - pad - 8);
    const sy = (y) => height - 18 - ((y - y0) / (y1 - y0 || 1)) * (height - 30);
    const path = document.createElementNS(ns, "polyline");
    path.setAttribute("points", points.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" "));
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", "#2f6fed");
    path.setAttribute("stroke-width", "1.6");
    svg.append(path);
    for (const [y, label] of [[y1, y1], [y0, y0]]) {
      const t = document.createElementNS(ns, "text");
      t.setAttribute("x", 2);
      t.setAttribute("y", sy(y) + 4);
      t.setAttribute("font-size", "10");
      t.setAttribute("fill", "#667085");
      t.textContent = Number(label).toPrecision(3);
      svg.append(t);
    }
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", width - 90);
    t.setAttribute("y", height - 4);
    t.setAttribute("font-size", "10");
    t.setAttribute("fill", "#667085");
    t.textContent = `step ${x1}`;
    svg.append(t);
  }
  return h("div", { class: "chart" }, h("div", { class: "title" }, title), svg);
}

// --- pages ---
async function queuePage() {
  const [q, list] = await Promise.all([
    api("xl.v1.JobService/GetQueue"),
    api("xl.v1.JobService/ListJobs", { page_size: 500 }),
  ]);
  const jobs = list.jobs || [];
  const rows = jobs.map((j) => {
    const m = j.metrics || {};
    const total = num(m.total_steps), step = num(m.step);
    const progress = total > 0
      ? h("span", {}, h("span", { class: "progress" }, h("span", { style: `width:${Math.min(100, (100 * step) / total)}%` })),
          ` ${step}/${total}`)
      : "-";
    const why = j.state === "PENDING"
      ? [j.reason, j.estimated_start_time ? ` (estimated start ${time(j.estimated_start_time)})` : ""].join("")
      : j.reason;
    return h("tr", { "data-testid": `job-row-${j.id}` },
      h("td", {}, h("a", { href: `#/jobs/${j.id}` }, j.id)),
      h("td", {}, j.spec?.name || "-"), h("td", {}, j.user), h("td", {}, j.spec?.queue || "default"),
      stateCell(j.state, `job-state-${j.id}`),
      h("td", {}, progress),
      h("td", { class: "num" }, m.samples_per_second ? num(m.samples_per_second).toFixed(0) : "-"),
      h("td", { class: "num" }, m.loss !== undefined && m.step ? num(m.loss).toFixed(4) : "-"),
      h("td", { class: "reason" }, why || ""));
  });
  show(h("h1", {}, "Queue"),
    h("div", { class: "cards" },
      card("GPUs in use", `${num(q.gpus_in_use)} / ${num(q.total_gpus)}`, "gpus-in-use"),
      card("GPUs free", num(q.gpus_free), "gpus-free"),
      card("Nodes ready", num(q.nodes_ready), "nodes-ready"),
      card("Drained / lost", `${num(q.nodes_drained)} / ${num(q.nodes_lost)}`, "nodes-down"),
      ...(q.queues || []).map((s) => card(`queue ${s.queue}: pending / running`,
        `${num(s.pending_jobs)} / ${num(s.running_jobs)}`, `queue-${s.queue}`))),
    table(["ID", "NAME", "USER", "QUEUE", "STATE", "PROGRESS", "SAMPLES/S", "LOSS", "WHY / WHEN"], rows),
    jobs.length ? "" : h("p", { class: "muted" }, "No jobs."));
}

async function nodesPage() {
  const list = await api("xl.v1.NodeService/ListNodes", { page_size: 2000 });
  const rows = (list.nodes || []).map((n) => {
    const inv = n.inventory || {}, use = n.usage || {};
    const gpus = inv.gpus || [];
    const models = [...new Set(gpus.map((g) => g.model))].join(", ") || "-";
    const nvme = (inv.nvme || []).reduce((a, d) => a + num(d.free_bytes), 0);
    const nics = (inv.nics || []).map((c) => `${c.name} ${c.kind} ${num(c.gbps)} Gbit/s`).join("; ");
    return h("tr", { "data-testid": `node-row-${n.name}` },
      h("td", {}, n.name), stateCell(n.state, `node-state-${n.name}`),
      h("td", { class: "num", "data-testid": `node-gpus-${n.name}` }, gpus.length),
      h("td", { class: "num", "data-testid": `node-gpus-used-${n.name}` }, (use.gpus_in_use || []).length),
      h("td", {}, models), h("td", { class: "num" }, num(inv.cpus)),
      h("td", { class: "num" }, bytes(inv.memory_bytes)), h("td", { class: "num" }, bytes(nvme)),
      h("td", {}, nics || "-"),
      h("td", {}, (use.job_ids || []).map((id) => h("a", { href: `#/jobs/${id}` }, id + " "))),
      h("td", { class: "reason" }, n.state_reason || ""));
  });
  show(h("h1", {}, "Nodes"),
    table(["NAME", "STATE", "GPUS", "IN USE", "MODEL", "CPUS", "MEMORY", "NVME FREE", "NICS", "JOBS", "WHY"], rows));
}

const jobView = { id: null, logs: "", after: 0 };
async function jobPage(id) {
  if (jobView.id !== id) Object.assign(jobView, { id, logs: "", after: 0 });
  const [job, events, metrics, logs] = await Promise.all([
    api("xl.v1.JobService/GetJob", { job_id: id }),
    api("xl.v1.JobService/WatchJob", { job_id: id }),
    api("xl.v1.JobService/GetJobMetrics", { job_id: id }),
    api("xl.v1.JobService/StreamLogs", { job_id: id, all_ranks: true, after_seq: String(jobView.after) })
      .catch((e) => (e.status === 403 ? { messages: [], denied: e.message } : Promise.reject(e))),
  ]);
  for (const c of logs.messages || []) {
    jobView.after = Math.max(jobView.after, num(c.seq));
    const text = atob(c.data || "");
    jobView.logs += text.split("\n").filter((l, i, a) => l || i < a.length - 1)
      .map((l) => `[rank ${num(c.rank)}] ${l}`).join("\n") + (text.endsWith("\n") ? "\n" : "");
  }
  if (jobView.logs.length > 200000) jobView.logs = jobView.logs.slice(-200000);
  const points = metrics.points || [];
  const allocations = (job.allocations || []).slice().sort((a, b) => num(a.group_rank) - num(b.group_rank));
  const m = job.metrics || {};
  show(h("h1", {}, `Job ${job.id}: ${job.spec?.name || ""} `, h("span", { class: "state " + job.state, "data-testid": "job-state" }, job.state)),
    h("div", { class: "cards" },
      card("user", job.user, "job-user"), card("attempt", num(job.attempt), "job-attempt"),
      card("step", m.total_steps ? `${num(m.step)}/${num(m.total_steps)}` : "-", "job-step"),
      card("samples/s", m.samples_per_second ? num(m.samples_per_second).toFixed(0) : "-", "job-sps"),
      card("created", time(job.create_time), "job-created")),
    job.reason ? h("p", { class: "reason", "data-testid": "job-reason" }, job.reason) : "",
    h("h2", {}, "Training"),
    h("p", { class: "muted" }, h("span", { "data-testid": "metrics-points" }, points.length), " points"),
    h("div", { class: "charts" },
      chart("loss", points.map((p) => ({ x: num(p.step), y: num(p.loss) })), "chart-loss"),
      chart("samples/s", points.map((p) => ({ x: num(p.step), y: num(p.samples_per_second) })), "chart-sps")),
    h("h2", {}, "Allocations (rank order)"),
    table(["GROUP RANK", "NODE", "RANKS", "GPUS", "CPUS", "MEMORY"], allocations.map((a) =>
      h("tr", {}, h("td", { class: "num" }, num(a.group_rank)), h("td", {}, a.node),
        h("td", {}, (a.ranks || []).join(", ")), h("td", {}, (a.gpu_indices || []).join(", ") || "-"),
        h("td", { class: "num" }, num(a.cpus)), h("td", { class: "num" }, bytes(a.memory_bytes))))),
    h("h2", {}, "Events"),
    table(["SEQ", "TIME", "FROM", "TO", "ATTEMPT", "REASON"], (events.messages || []).map((e) =>
      h("tr", {}, h("td", { class: "num" }, e.seq), h("td", {}, time(e.time)), h("td", {}, e.from_state),
        h("td", {}, e.to_state), h("td", { class: "num" }, num(e.attempt)), h("td", { class: "reason" }, e.reason)))),
    h("h2", {}, "Log (tail)"),
    logs.denied ? h("p", { class: "muted" }, logs.denied) : "",
    h("pre", { "data-testid": "log-tail" }, jobView.logs.split("\n").slice(-200).join("\n")),
    h("h2", {}, "Spec"),
    h("pre", { "data-testid": "job-spec" }, JSON.stringify(job.spec, null, 2)));
  const pre = document.querySelector('[data-testid="log-tail"]');
  pre.scrollTop = pre.scrollHeight;
  return job.state === "PENDING" || job.state === "SCHEDULED" || job.state === "RUNNING";
}

function planPage() {
  const field = (label, name, value, type = "text") =>
    h("label", {}, label, h("input", { name, value, type }));
  const form = h("form", { class: "plan", "data-testid": "plan-form" },
    field("parameters (e.g. 7e9)", "parameters", "7e9"),
    h("label", {}, "precision", h("select", { name: "precision" },
      ["BF16", "FP16", "FP32"].map((p) => h("option", { value: p }, p)))),
    h("label", {}, "sharding", h("select", { name: "sharding" },
      ["NO_SHARDING", "ZERO_1", "ZERO_2", "ZERO_3"].map((p) => h("option", { value: p }, p)))),
    field("sequence length (tokens)", "sequence_length", "4096", "number"),
    field("global batch (sequences)", "global_batch_size", "1024", "number"),
    field("micro batch per GPU", "micro_batch_size", "1", "number"),
    field("GPU model (empty: the fleet's)", "gpu_model", ""),
    field("GPUs (0: the planner picks)", "gpus", "0", "number"),
    field("tokens to train on (e.g. 1e12)", "train_tokens", ""),
    field("MFU (0: default 0.4)", "mfu", "0"),
    h("div", {}, h("button", { type: "submit" }, "Plan")));
  const out = h("div", { "data-testid": "plan-result" });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const model = { parameters: Number(f.get("parameters")), precision: f.get("precision"),
                    global_batch_size: Number(f.get("global_batch_size")),
                    micro_batch_size: Number(f.get("micro_batch_size")),
                    gpus: Number(f.get("gpus")), mfu: Number(f.get("mfu")) };
    model.sharding = f.get("sharding");
    if (Number(f.get("sequence_length")) > 0) {
      model.transformer = { sequence_length: Number(f.get("sequence_length")) };
    }
    if (f.get("gpu_model")) model.gpu_model = f.get("gpu_model");
    if (f.get("train_tokens")) model.train_tokens = Number(f.get("train_tokens"));
    try {
      const p = await api("xl.v1.JobService/PlanResources", { model });
      const mem = p.memory_per_gpu || {};
      out.replaceChildren(
        h("div", { class: "cards" },
          card("GPUs", num(p.gpus), "plan-gpus"), card("nodes", num(p.nodes), "plan-nodes"),
          card("GPU model", p.gpu_model || "-", "plan-model"),
          card("memory per GPU", bytes(mem.total_bytes), "plan-memory"),
          card("step time", duration(p.step_seconds), "plan-step"),
          card("tokens/s", num(p.tokens_per_second).toExponential(2), "plan-tps"),
          p.train_seconds ? card("training time", duration(p.train_seconds), "plan-train") : ""),
        table(["GPU", "MEMORY", "PEAK TFLOP/S", "FITS", "MAX MICRO-BATCH", "IN FLEET"], (p.gpus_that_fit || []).map((g) =>
          h("tr", {}, h("td", {}, g.model), h("td", {}, bytes(g.memory_bytes)), h("td", { class: "num" }, num(g.peak_tflops)),
            h("td", {}, g.fits ? "yes" : "no"), h("td", { class: "num" }, num(g.max_micro_batch)),
            h("td", { class: "num" }, num(g.in_fleet))))),
        (p.warnings || []).length ? h("h2", {}, "Warnings") : "",
        h("ul", {}, (p.warnings || []).map((w) => h("li", {}, w))),
        h("h2", {}, "How it was computed"),
        h("pre", {}, (p.arithmetic || []).join("\n")));
    } catch (e) {
      out.replaceChildren(h("p", { class: "error", "data-testid": "plan-error" }, `${e.code}: ${e.message}`));
    }
  });
  show(h("h1", {}, "What does my training need?"), form, out);
}

// --- routing, sign-in ---
function askToken(message) {
  const dlg = document.getElementById("login");
  document.getElementById("login-error").textContent = state.token ? message : "";
  if (!dlg.open) dlg.showModal();
}

async function whoami() {
  try {
    const me = await api("xl.v1.AuthService/WhoAmI");
    document.querySelector(".who").textContent = `${me.name}${me.admin ? " (admin)" : ""}`;
    document.getElementById("signout").hidden = !state.auth;
  } catch (e) { /* the login dialog is open */ }
}

async function render() {
  clearTimeout(state.timer);
  const route = location.hash.replace(/^#\//, "") || "queue";
  state.route = route;
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", route.startsWith(a.dataset.nav));
  }
  let again = false;
  try {
    if (route === "nodes") { await nodesPage(); again = true; }
    else if (route === "plan") { planPage(); }
    else if (route.startsWith("jobs/")) { again = await jobPage(decodeURIComponent(route.slice(5))); }
    else { await queuePage(); again = true; }
  } catch (e) {
    if (e.status !== 401) showError(e);
  }
  if (again && state.route === route) {
    state.timer = setTimeout(() => { if (state.route === route) render(); }, route.startsWith("jobs/") ? 2000 : 3000);
  }
}

document.getElementById("login-form").addEventListener("submit", () => {
  state.token = document.getElementById("token").value.trim();
  sessionStorage.setItem("xl-token", state.token);
  whoami();
  render();
});
document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem("xl-token");
  state.token = "";
  location.reload();
});
window.addEventListener("hashchange", render);

(async () => {
  const info = await (await fetch("/api/info")).json().catch(() => ({}));
  state.auth = !!info.auth_enabled;
  document.title = `xl ${info.version || ""}`;
  if (state.auth && !state.token) askToken("");
  await whoami();
  render();
})();
