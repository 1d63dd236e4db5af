// Drives Debian's Chromium (playwright-core) over the scheduler's dashboard
// and checks it against what xlctl printed:
//   node check.mjs --url https://127.0.0.1:PORT --token T --expect expect.json
//                  --job ID --out DIR
// expect.json: {"nodes": <xlctl nodes -o json>, "jobs": <xlctl list -o json>}.
// Writes queue.png, nodes.png, job.png, plan.png and login.png to --out,
// prints a line per check, exits 1 on any failure (2 minutes at most).
import { chromium } from "playwright-core";
import fs from "node:fs";
import path from "node:path";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
for (const k of ["url", "token", "expect", "job", "out"]) {
  if (!args[k]) { console.error(`check.mjs: --${k} is required`); process.exit(2); }
}
const expect = JSON.parse(fs.readFileSync(args.expect, "utf8"));
fs.mkdirSync(args.out, { recursive: true });
setTimeout(() => { console.error("FAIL: over the 120 s limit"); process.exit(1); }, 120000).unref();

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? "PASS" : "FAIL"}: ${what}`);
  if (!ok) failures++;
}

const browser = await chromium.launch({
  executablePath: process.env.XL_CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  // playwright gives the browser a new, empty profile of its own.
});
try {
  const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(args.url + "/#/queue");

  // Auth is on: the page asks for a token, and a wrong one is refused.
  await page.waitForSelector("#login[open]", { timeout: 10000 });
  await page.fill("#token", "not-a-token");
  await page.click("#login-form button");
  await page.waitForSelector("#login[open]", { timeout: 10000 });
  await page.screenshot({ path: path.join(args.out, "login.png") });
  check(true, "the page asks for a token and refuses a wrong one");
  await page.fill("#token", args.token);
  await page.click("#login-form button");
  await page.waitForFunction(() => document.querySelector(".who")?.textContent.length > 0, null, { timeout: 10000 });
  check(true, `signed in as ${await page.textContent(".who")}`);

  // Queue: every job of xlctl list, in the same state.
  const jobs = expect.jobs.jobs || [];
  for (const j of jobs) {
    const sel = `[data-testid="job-state-${j.id}"]`;
    await page.waitForSelector(sel, { timeout: 10000 });
    const shown = await page.textContent(sel);
    // A state may move on between xlctl and the page (PENDING -> RUNNING).
    const ok = shown === j.state || (j.state === "PENDING" && ["SCHEDULED", "RUNNING"].includes(shown)) ||
      (j.state === "SCHEDULED" && shown === "RUNNING");
    check(ok, `queue: job ${j.id} ${shown} (xlctl: ${j.state})`);
  }
  await page.screenshot({ path: path.join(args.out, "queue.png"), fullPage: true });

  // Nodes: every node of xlctl nodes, same state and GPU count.
  await page.goto(args.url + "/#/nodes");
  for (const n of expect.nodes.nodes || []) {
    const gpus = (n.inventory?.gpus || []).length;
    await page.waitForSelector(`[data-testid="node-gpus-${n.name}"]`, { timeout: 10000 });
    const shownGpus = await page.textContent(`[data-testid="node-gpus-${n.name}"]`);
    const shownState = await page.textContent(`[data-testid="node-state-${n.name}"]`);
    check(shownGpus === String(gpus) && shownState === n.state,
          `nodes: ${n.name} ${shownState} ${shownGpus} GPUs (xlctl: ${n.state} ${gpus} GPUs)`);
  }
  await page.screenshot({ path: path.join(args.out, "nodes.png"), fullPage: true });

  // The training job: spec, events, log tail, and a chart that grows.
  await page.goto(args.url + `/#/jobs/${args.job}`);
  await page.waitForSelector('[data-testid="metrics-points"]', { timeout: 15000 });
  const spec = await page.textContent('[data-testid="job-spec"]');
  check(spec.includes('"train"'), "job: its spec is shown");
  const events = await page.$$eval("table", (ts) => ts.map((t) => t.innerText).join("\n"));
  check(events.includes("RUNNING"), "job: its events include RUNNING");
  const first = Number(await page.textContent('[data-testid="metrics-points"]'));
  let later = first;
  const until = Date.now() + 30000;
  while (later <= first && Date.now() < until) {
    await page.waitForTimeout(1000);
    later = Number(await page.textContent('[data-testid="metrics-points"]'));
  }
  check(later > first, `job: the metrics chart grew from ${first} to ${later} points`);
  const drawn = Number(await page.getAttribute('[data-testid="chart-loss"]', "data-points"));
  check(drawn === later, `job: the loss chart draws ${drawn} points`);
  await page.waitForFunction(() => document.querySelector('[data-testid="log-tail"]')?.textContent.length > 0,
                             null, { timeout: 15000 });
  const log = await page.textContent('[data-testid="log-tail"]');
  check(/\[rank 0\] step \d+\/\d+ loss/.test(log), `job: the log tail shows the ranks' output (${log.length} chars)`);
  await page.screenshot({ path: path.join(args.out, "job.png"), fullPage: true });

  // The planner form.
  await page.goto(args.url + "/#/plan");
  await page.fill('input[name="parameters"]', "7e9");
  await page.click('[data-testid="plan-form"] button');
  await page.waitForSelector('[data-testid="plan-gpus"], [data-testid="plan-error"]', { timeout: 15000 });
  const planned = await page.$('[data-testid="plan-gpus"]');
  check(planned !== null && Number(await planned.textContent()) > 0,
        `plan: 7e9 parameters need ${planned ? await planned.textContent() : "?"} GPUs`);
  await page.screenshot({ path: path.join(args.out, "plan.png"), fullPage: true });

  check(errors.length === 0, `no script errors in the page ${errors.join("; ")}`);
} finally {
  await browser.close();
}
process.exit(failures ? 1 : 0);
