// Drives Debian's Chromium (through playwright-core) over the scheduler's
// dashboard and compares what it shows with what xlctl printed:
//
//   node check.mjs --url https://127.0.0.1:PORT --token TOKEN \
//                  --expect expect.json --job ID --out DIR
//
// expect.json: {"nodes": <xlctl nodes -o json>, "jobs": <xlctl list -o json>}
// (each may also be the bare array). --job: a training job that is running
// (its metrics must grow). Checks, one line each (PASS/FAIL with the
// numbers): sign-in (when /api/info says auth is on: a wrong token is
// refused, the right one taken), every node's state and GPU count, every
// job's state, the job's spec, events, allocations, growing metrics chart
// and log tail, the planner form, sign-out, and no script errors or
// Content-Security-Policy violations. Writes login.png (auth on),
// queue.png, nodes.png, job.png and plan.png to --out. Exits 1 on any
// failure or after 120 s in all, 2 on bad arguments.
// Environment: XL_CHROMIUM (default /usr/bin/chromium).
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const LIMIT_MS = 120000;
const started = Date.now();

function usage(msg) {
  console.error(`check.mjs: ${msg}\nusage: node check.mjs --url URL --token TOKEN --expect FILE --job ID --out DIR`);
  process.exit(2);
}
const args = {};
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  const m = /^--([a-z-]+)(?:=(.*))?$/.exec(a);
  if (!m) usage(`unexpected argument "${a}"`);
  args[m[1]] = m[2] !== undefined ? m[2] : process.argv[++i];
}
for (const k of ["url", "token", "expect", "job", "out"]) if (args[k] === undefined) usage(`--${k} is required`);
const base = args.url.replace(/\/+$/, "");
let expect;
try {
  expect = JSON.parse(fs.readFileSync(args.expect, "utf8"));
} catch (e) {
  usage(`--expect ${args.expect}: ${e.message}`);
}
const listOf = (v, key) => (Array.isArray(v) ? v : (v && Array.isArray(v[key]) ? v[key] : []));
const expectNodes = listOf(expect.nodes, "nodes");
const expectJobs = listOf(expect.jobs, "jobs");
fs.mkdirSync(args.out, { recursive: true });

let passed = 0, failed = 0;
function report(ok, what) {
  console.log(`${ok ? "PASS" : "FAIL"} ${what}`);
  if (ok) passed++; else failed++;
}
const secs = () => ((Date.now() - started) / 1000).toFixed(1);

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "xl-dashboard-chromium-"));
let context = null;
async function cleanup() {
  try { if (context) await context.close(); } catch (e) { /* already gone */ }
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
const overall = setTimeout(async () => {
  report(false, `overall: not done within ${LIMIT_MS / 1000} s`);
  console.log(`dashboard: ${passed} passed, ${failed} failed`);
  await Promise.race([cleanup(), new Promise((r) => setTimeout(r, 3000))]);
  process.exit(1);
}, LIMIT_MS);

// Runs one group of checks; an exception is one FAIL and the run goes on.
async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    report(false, `${name}: ${String(e.message || e).split("\n")[0]}`);
  }
}

context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.XL_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  ignoreHTTPSErrors: true,
  viewport: { width: 1440, height: 900 },
});
const page = context.pages()[0] || await context.newPage();
page.setDefaultTimeout(15000);
const pageErrors = [], cspViolations = [];
page.on("pageerror", (e) => pageErrors.push(String(e.message || e)));
page.on("console", (m) => {
  if (m.type() === "error" && /Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
});
const text = async (testid) => ((await page.locator(`[data-testid="${testid}"]`).first().textContent()) || "").trim();
const shot = (name) => page.screenshot({ path: path.join(args.out, name), fullPage: true });
// The API as the page calls it, for a second opinion on what moved.
async function apiNow(method, body) {
  return page.evaluate(async ([m, b, t]) => {
    const r = await fetch("/api/" + m, { method: "POST", headers: { "Content-Type": "application/json", Authorization: "Bearer " + t }, body: JSON.stringify(b) });
    return r.ok ? r.json() : null;
  }, [method, body, args.token]);
}

let authEnabled = false, signedIn = false;
await step("sign-in", async () => {
  await page.goto(`${base}/#/queue`, { waitUntil: "load", timeout: 20000 });
  const info = await page.evaluate(async () => (await fetch("/api/info")).json());
  authEnabled = !!info.auth_enabled;
  if (!authEnabled) {
    await page.waitForFunction(() => document.querySelector('[data-testid="whoami"]')?.textContent.trim(), null, { timeout: 10000 });
    report(true, `sign-in: auth is off (/api/info), the page shows "${await text("whoami")}" without a token`);
    signedIn = true;
    return;
  }
  await page.waitForSelector("#login[open]", { timeout: 10000 });
  report(true, "sign-in: auth is on (/api/info) and the page asks for a token");
  await page.fill("#token", "xl_not_a_token_0000");
  await page.click("#login-submit");
  await page.waitForFunction(() => document.querySelector('[data-testid="login-error"]')?.textContent.trim(), null, { timeout: 10000 });
  const refused = await page.locator("#login[open]").count();
  report(refused === 1, `sign-in: a wrong token is refused ("${await text("login-error")}")`);
  await shot("login.png");
  await page.fill("#token", args.token);
  await page.click("#login-submit");
  await page.waitForSelector("#login:not([open])", { state: "attached", timeout: 10000 });
  await page.waitForFunction(() => document.querySelector('[data-testid="whoami"]')?.textContent.trim(), null, { timeout: 10000 });
  const kept = await page.evaluate(() => sessionStorage.getItem("xl-token") !== null);
  report(kept, `sign-in: the token is taken; signed in as "${await text("whoami")}" (kept in sessionStorage: ${kept})`);
  signedIn = true;
});
if (!signedIn) {
  report(false, "not signed in: the pages are not checked");
  await shot("login.png").catch(() => {});
  clearTimeout(overall);
  await cleanup();
  console.log(`dashboard: ${passed} passed, ${failed} failed`);
  process.exit(1);
}

await step("queue", async () => {
  await page.waitForSelector('[data-testid="pending-table"], [data-testid="running-table"]', { timeout: 15000 });
  for (const j of expectJobs) {
    const want = j.state || "JOB_STATE_UNSPECIFIED";
    const loc = page.locator(`[data-testid="job-state-${j.id}"]`);
    try {
      await loc.first().waitFor({ timeout: 5000 });
    } catch (e) {
      report(false, `queue: job ${j.id} is not on the page (xlctl: ${want})`);
      continue;
    }
    const shown = ((await loc.first().textContent()) || "").trim();
    const rows = await page.locator(`[data-testid="job-row-${j.id}"]`).count();
    if (shown === want) {
      report(rows === 1, `queue: job ${j.id} ${shown} (xlctl: ${want})${rows === 1 ? "" : `, but in ${rows} rows`}`);
      continue;
    }
    // It may have moved on since xlctl ran: then the page must show where it is now.
    const now = await apiNow("xl.v1.JobService/GetJob", { job_id: j.id });
    const ok = now && now.state !== want && now.state === shown;
    report(ok, `queue: job ${j.id} ${shown} (xlctl: ${want}${now ? `; moved on since, the API now says ${now.state}` : ""})`);
  }
  const pend = await page.locator('[data-testid="pending-table"] tbody tr[data-testid^="job-row-"]').count();
  const run = await page.locator('[data-testid="running-table"] tbody tr[data-testid^="job-row-"]').count();
  report(true, `queue: ${pend} pending and ${run} running jobs shown, ${expectJobs.length} jobs checked`);
  await shot("queue.png");
});

await step("nodes", async () => {
  await page.click('nav a[data-nav="nodes"]');
  await page.waitForSelector('[data-testid="nodes-table"]', { timeout: 15000 });
  for (const n of expectNodes) {
    const gpus = (n.inventory?.gpus || []).length;
    const want = n.state || "NODE_STATE_UNSPECIFIED";
    const cell = page.locator(`[data-testid="node-gpus-${n.name}"]`);
    try {
      await cell.first().waitFor({ timeout: 5000 });
    } catch (e) {
      report(false, `nodes: ${n.name} is not on the page (xlctl: ${want}, ${gpus} GPUs)`);
      continue;
    }
    const shownGpus = ((await cell.first().textContent()) || "").trim();
    let shownState = await text(`node-state-${n.name}`);
    let note = "";
    if (shownState !== want) {
      const now = await apiNow("xl.v1.NodeService/GetNode", { name: n.name });
      if (now && now.state !== want && now.state === shownState) note = `; moved on since, the API now says ${now.state}`;
      else shownState = `${shownState} (differs)`;
    }
    const ok = shownGpus === String(gpus) && (shownState === want || note !== "");
    report(ok, `nodes: ${n.name} ${shownState}, ${shownGpus} GPUs (xlctl: ${want}, ${gpus} GPUs${note})`);
  }
  const rows = await page.locator('tr[data-testid^="node-row-"]').count();
  report(rows >= expectNodes.length, `nodes: ${rows} nodes on the page, ${expectNodes.length} from xlctl`);
  await shot("nodes.png");
});

await step("job", async () => {
  const id = args.job;
  await page.click('nav a[data-nav="queue"]');
  const link = page.locator(`a[href="#/jobs/${encodeURIComponent(id)}"]`).first();
  try {
    await link.waitFor({ timeout: 10000 });
    await link.click();
  } catch (e) {
    await page.goto(`${base}/#/jobs/${encodeURIComponent(id)}`);
  }
  await page.waitForSelector('[data-testid="job-spec"]', { timeout: 15000 });
  await page.waitForSelector('[data-testid="events-count"]', { state: "attached", timeout: 15000 });

  const specText = await text("job-spec");
  let spec = null;
  try { spec = JSON.parse(specText); } catch (e) { /* not JSON */ }
  const listed = expectJobs.find((j) => String(j.id) === String(id));
  const wantName = listed?.spec?.name || "";
  report(spec !== null && typeof spec === "object" && !!spec.resources && (spec.name || "") === wantName,
    `job ${id}: the spec is shown as JSON (${specText.length} chars, name "${spec?.name ?? "?"}"; xlctl: "${wantName}")`);

  const state = await text("job-state");
  report(state === "RUNNING", `job ${id}: state ${state} (it should be training)`);

  await page.waitForFunction(() => Number(document.querySelector('[data-testid="events-count"]')?.textContent) > 0, null, { timeout: 10000 });
  const events = Number(await text("events-count"));
  const tos = await page.locator('[data-testid^="job-event-to-"]').allTextContents();
  report(events > 0 && tos.map((t) => t.trim()).includes("RUNNING"),
    `job ${id}: ${events} events (WatchJob), to ${tos.map((t) => t.trim()).join(" -> ")}`);

  const ranks = (await page.locator('[data-testid^="alloc-"]').evaluateAll((rows) => rows.map((r) => r.getAttribute("data-testid"))))
    .map((t) => Number(t.slice(6)));
  const ordered = ranks.every((r, i) => r === i);
  report(ranks.length > 0 && ordered, `job ${id}: ${ranks.length} allocations, group ranks ${ranks.join(", ")}${ordered ? " in order" : " NOT in order"}`);

  await page.waitForFunction(() => Number(document.querySelector('[data-testid="metrics-points"]')?.textContent) > 0, null, { timeout: 15000 })
    .catch(() => {});
  const first = Number(await text("metrics-points"));
  const t0 = Date.now();
  let later = first;
  while (later <= first && Date.now() - t0 < 30000) {
    await page.waitForTimeout(500);
    later = Number(await text("metrics-points"));
  }
  report(later > first, `job ${id}: the metrics chart grew from ${first} to ${later} points in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  const drawn = Number(await page.getAttribute('[data-testid="chart-loss"]', "data-points"));
  const lines = await page.locator('[data-testid="chart-loss"] polyline').count();
  report(drawn === later && lines > 0, `job ${id}: the loss chart (SVG) charts ${drawn} points in ${lines} line(s)`);

  let log = "";
  try {
    await page.waitForFunction(() => document.querySelector('[data-testid="log-tail"]')?.textContent.trim().length > 0, null, { timeout: 15000 });
  } catch (e) { /* reported below */ }
  log = await text("log-tail");
  const logLines = log ? log.split("\n") : [];
  report(log.length > 0, `job ${id}: the log tail has ${logLines.length} lines (${log.length} chars)${log ? `, the last: "${logLines[logLines.length - 1].slice(0, 100)}"` : ""}`);
  await shot("job.png");
});

await step("plan", async () => {
  await page.click('nav a[data-nav="plan"]');
  await page.waitForSelector('[data-testid="plan-form"]', { timeout: 10000 });
  await page.fill('input[name="parameters"]', "7e9");
  await page.fill('input[name="sequence_length"]', "4096");
  await page.fill('input[name="global_batch_size"]', "1024");
  await page.click('[data-testid="plan-submit"]');
  await page.waitForSelector('[data-testid="plan-gpus"], [data-testid="plan-error"]', { timeout: 15000 });
  if (await page.locator('[data-testid="plan-error"]').count()) {
    report(false, `plan: PlanResources answered an error: ${await text("plan-error")}`);
  } else {
    const gpus = Number(await text("plan-gpus")), nodes = Number(await text("plan-nodes"));
    const arith = (await text("plan-arithmetic")).split("\n").filter((l) => l.trim()).length;
    report(gpus > 0 && nodes > 0 && arith > 0,
      `plan: 7e9 parameters, 4096 tokens, batch 1024: ${gpus} GPUs on ${nodes} nodes of ${await text("plan-model")}, ` +
      `${await text("plan-memory")} per GPU, ${arith} lines of arithmetic`);
  }
  await shot("plan.png");
});

if (authEnabled) {
  await step("sign-out", async () => {
    await page.click("#signout");
    await page.waitForSelector("#login[open]", { timeout: 10000 });
    const gone = await page.evaluate(() => sessionStorage.getItem("xl-token") === null);
    report(gone, `sign-out: the token is dropped and the page asks for one again`);
  });
}

report(pageErrors.length === 0, `page: ${pageErrors.length} script errors${pageErrors.length ? `: ${pageErrors.slice(0, 3).join(" | ")}` : ""}`);
report(cspViolations.length === 0, `page: ${cspViolations.length} Content-Security-Policy violations${cspViolations.length ? `: ${cspViolations[0].slice(0, 200)}` : ""}`);

clearTimeout(overall);
await cleanup();
console.log(`screenshots in ${args.out}; ${secs()} s`);
console.log(`dashboard: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
