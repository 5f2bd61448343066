// The web console in a real browser: Debian's headless Chromium, driven by playwright-core,
// against a real lockstep server. The page loads with no console errors; while
// `lockstep bench voter` runs, the transactions chart holds non-zero throughput and the
// other charts fill; the schema view shows the voter schema; the SQL pane runs a query and
// shows its rows (the same as the JSON API answers), calls a procedure, and shows a failed
// statement's message (the server's own). A screenshot of the monitor during the run is
// kept. Then, on a server with users, the page asks for a login and works after it.
//
// Usage: node console.test.mjs path/to/lockstep ARTIFACT_DIR   (CHROMIUM overrides the browser)
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { benchVoter, callApi, startServer } from "./server.mjs";

/** The whole test must end within this time, whatever hangs. */
const TEST_TIMEOUT_MS = 240_000;
/** Seconds of benchmark load. */
const BENCH_SECONDS = 8;
/** How long the page may take to show what it is waiting for. */
const WAIT_MS = 30_000;

const [bin, artifacts] = process.argv.slice(2);
if (!bin || !artifacts) {
  console.error("usage: node console.test.mjs path/to/lockstep ARTIFACT_DIR");
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

const watchdog = setTimeout(() => {
  console.error(`console test: not finished within ${TEST_TIMEOUT_MS} ms`);
  process.exit(1);
}, TEST_TIMEOUT_MS);

const cleanups = [];
let failed = false;

function check(ok, what) {
  if (!ok) throw new Error(`FAILED: ${what}`);
  console.log(`ok - ${what}`);
}

/** A page that records every console error, uncaught exception and failed request. */
async function openPage(browser, base, expectedErrors = []) {
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  const errors = [];
  const expected = (text) => expectedErrors.some((e) => text.includes(e));
  page.on("console", (m) => { if (m.type() === "error" && !expected(m.text())) errors.push(`console: ${m.text()}`); });
  page.on("pageerror", (e) => errors.push(`uncaught: ${e.message}`));
  page.on("requestfailed", (r) => errors.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  await page.goto(base);
  return { page, errors };
}

/** The largest value the transactions-per-second chart holds. */
const tpsChartMax = () => Math.max(0, ...Chart.getChart("chart-tps").data.datasets[0].data);

async function monitorDuringBenchmark(page, server) {
  await page.waitForFunction(() => window.lockstepConsole?.samples >= 2, null, { timeout: WAIT_MS });
  check(await page.evaluate(tpsChartMax) === 0, "before any load the transactions chart is at zero");
  const bench = benchVoter(bin, server.addr, BENCH_SECONDS);
  await page.waitForFunction(tpsChartMax, null, { timeout: WAIT_MS, polling: 250 }).catch(async (e) => {
    await bench.catch(() => {});
    throw e;
  });
  const during = await page.evaluate(tpsChartMax);
  check(during > 0, `the transactions chart shows non-zero throughput while the benchmark runs (${Math.round(during)}/s)`);
  // Let the charts fill and the table figures arrive (the sites report every 5 s).
  await page.waitForFunction(() => Chart.getChart("chart-memory").data.labels.includes("VOTES"), null, { timeout: WAIT_MS });
  await page.waitForTimeout(2000);
  const shot = join(artifacts, "console-monitor.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot of the monitor during the benchmark: ${shot}`);
  const figures = await page.evaluate(() => ({
    tpsText: document.getElementById("tps-now").textContent,
    latency: Chart.getChart("chart-latency").data.datasets.map((d) => Math.max(0, ...d.data.filter((v) => v !== null))),
    procs: Chart.getChart("chart-procs").data.labels,
    queues: Chart.getChart("chart-queues").data.datasets.length,
    cpu: Chart.getChart("chart-cpu").data.datasets.map((d) => Math.max(0, ...d.data.filter((v) => v !== null))),
    procedureRows: [...document.querySelectorAll("#procedures tbody tr")].map((tr) => tr.cells[0].textContent),
    durability: document.getElementById("durability").textContent,
  }));
  check(figures.latency.every((v) => v > 0), `the latency chart holds p50, p95 and p99 (${figures.latency.map((v) => v.toFixed(2)).join(", ")} ms)`);
  check(figures.procs.includes("Vote"), "the calls-by-procedure chart shows Vote");
  check(figures.queues === 3, "the queue chart has one line per partition (2) and the coordinator's");
  check(figures.cpu.length === 3 && figures.cpu.every((v) => v > 0),
    `the CPU chart shows the server's CPU and both partitions busy (${figures.cpu.map((v) => v.toFixed(1)).join(", ")} %)`);
  check(figures.procedureRows.includes("Vote"), "the procedures table lists Vote");
  check(figures.durability.includes("sync"), "the durability panel shows the command log's mode");
  const result = await bench;
  check(result.tps > 0, `the benchmark ran (${result.tps} txn/s)`);
  // The chart's busiest second cannot be far below the run's average: a chart that counts
  // the wrong calls, or drops most of them, shows less.
  const peak = await page.evaluate(tpsChartMax);
  check(peak >= result.tps / 2, `the chart's busiest second (${Math.round(peak)}/s) agrees with the benchmark's average (${result.tps}/s)`);
}

async function schemaView(page) {
  await page.click('nav button[data-tab="schema"]');
  const votes = page.locator('[data-table="VOTES"]');
  await votes.waitFor({ timeout: WAIT_MS });
  check((await votes.textContent()).includes("partitioned on PHONE_NUMBER"), "the schema view shows VOTES partitioned on PHONE_NUMBER");
  const procs = await page.locator("#schema-procedures").textContent();
  check(procs.includes("single-partition on VOTES.PHONE_NUMBER"), "the schema view shows Vote's partitioning");
  check((await page.locator('[data-table="V_VOTES_BY_PHONE_NUMBER"]').textContent()).includes("view of VOTES"), "the schema view shows a view and its source");
  await page.screenshot({ path: join(artifacts, "console-schema.png"), fullPage: true });
}

/** Types `text` into the SQL pane and runs it. */
async function runSql(page, text) {
  await page.fill("#sql-input", text);
  await page.click("#sql-run");
  await page.waitForFunction(() => !document.getElementById("sql-summary").textContent.startsWith("Running"), null, { timeout: WAIT_MS });
}

/** The page's own parsing and arithmetic, called in the page. */
async function pageFunctions(page) {
  const parsed = await page.evaluate(() => parseExec(`exec P 1 'a b', "c""d" NULL x;`));
  check(JSON.stringify(parsed) === JSON.stringify({ procedure: "P", parameters: ["1", "a b", 'c"d', null, "x"] }),
    `exec arguments split on spaces and commas, quotes keep spaces, NULL is null (${JSON.stringify(parsed)})`);
  check(await page.evaluate(() => parseExec("SELECT 1")) === null, "a statement is not an exec");
  const unclosed = await page.evaluate(() => { try { parseExec("exec P 'a"); return null; } catch (e) { return e.message; } });
  check(Boolean(unclosed?.includes("not closed")), "an unclosed quote is refused");
  // 10 calls: 5 in (0, 100] µs, 5 in (100, 250] µs; p50 ends the first bucket, p90 is 4/5 into the second.
  const [p50, p90] = await page.evaluate(() => [0.5, 0.9].map((q) => percentileUs([100, 250], [0, 0, 0], [5, 5, 0], q)));
  check(p50 === 100 && Math.abs(p90 - 220) < 1e-9, `percentiles interpolate inside their bucket (${p50}, ${p90})`);
  check(await page.evaluate(() => percentileUs([100], [3, 1], [3, 1], 0.99)) === null, "no calls in between, no percentile");
}

async function sqlPane(page, server) {
  await page.click('nav button[data-tab="sql"]');
  const query = "SELECT contestant_number, contestant_name FROM contestants ORDER BY contestant_number";
  await runSql(page, query);
  const shown = await page.$$eval("#sql-result table tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  const api = await callApi(server.base, "@AdHoc", [query]);
  const expected = api.results[0].data.map((row) => row.map(String));
  check(shown.length === 6, `the SQL pane shows the query's 6 rows (${shown.length})`);
  check(JSON.stringify(shown) === JSON.stringify(expected), "the SQL pane shows the rows the JSON API answers");
  await page.screenshot({ path: join(artifacts, "console-sql.png"), fullPage: true });

  await runSql(page, "exec Results");
  const results = await page.$$eval("#sql-result table tbody tr", (rows) => rows.length);
  check(results > 0, `exec calls a procedure and shows its rows (${results})`);

  const bad = "SELECT * FROM no_such_table";
  await runSql(page, bad);
  const message = (await callApi(server.base, "@AdHoc", [bad])).statusstring;
  const error = page.locator("#sql-error");
  check(await error.isVisible(), "a failed statement shows the error box");
  const text = await error.textContent();
  check(Boolean(message) && text.includes(message), `the error box shows the server's message (${text})`);
  check((await page.$$("#sql-result table")).length === 0, "a failed statement shows no result table");
  await page.screenshot({ path: join(artifacts, "console-sql-error.png") });
}

/** A server with users: the page asks for a login, then shows the figures. */
async function withUsers(browser) {
  const { writeFileSync: write, mkdtempSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { createHash } = await import("node:crypto");
  const dir = mkdtempSync(join(tmpdir(), "lockstep-console-users-"));
  const config = join(dir, "users.toml");
  // The server stores each hash of the hash of the password, as `lockstep user add` writes it.
  const twice = (algorithm) => createHash(algorithm).update(createHash(algorithm).update("ops-pw").digest()).digest("hex");
  write(config, `[[users]]\nname = "ops"\nroles = ["administrator"]\npassword_sha256 = "${twice("sha256")}"\npassword_sha1 = "${twice("sha1")}"\n`);
  const server = await startServer(bin, ["--sites", "1", "--command-log", "off", "--security", "on", "--config", config]);
  cleanups.push(server.stop);
  const anonymous = await fetch(`${server.base}/console/api/live`);
  check(anonymous.status === 401, "with users, the console's data needs a login");
  // The page's first read is refused (401) on purpose: the browser logs that as an error.
  const { page, errors } = await openPage(browser, server.base, ["401"]);
  await page.locator("#login").waitFor({ state: "visible", timeout: WAIT_MS });
  check(true, "the page asks for a login");
  await page.fill("#login-user", "ops");
  await page.fill("#login-password", "ops-pw");
  await page.click('#login-form button[type="submit"]');
  await page.waitForFunction(() => window.lockstepConsole.samples >= 1, null, { timeout: WAIT_MS });
  check(true, "after the login the page reads the live figures");
  check(errors.length === 0, `no unexpected console errors with users on${errors.length ? `:\n  ${errors.join("\n  ")}` : ""}`);
  await page.close();
}

async function main() {
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    // Chromium's sandbox needs user namespaces, which containers running as root lack.
    args: process.getuid?.() === 0 ? ["--no-sandbox"] : [],
  });
  cleanups.push(() => browser.close());
  const server = await startServer(bin, ["--sites", "2"]);
  cleanups.push(server.stop);
  const { page, errors } = await openPage(browser, server.base);
  check((await page.title()) === "Lockstep console", "the console loads at /");
  await monitorDuringBenchmark(page, server);
  await schemaView(page);
  await pageFunctions(page);
  await sqlPane(page, server);
  check(errors.length === 0, `no console errors${errors.length ? `:\n  ${errors.join("\n  ")}` : ""}`);
  await page.close();
  await withUsers(browser);
}

try {
  await main();
  console.log("console test passed");
} catch (e) {
  failed = true;
  console.error(e.stack || String(e));
  writeFileSync(join(artifacts, "console-failure.txt"), String(e.stack || e));
} finally {
  for (const c of cleanups.reverse()) {
    try { await c(); } catch { /* already gone */ }
  }
  clearTimeout(watchdog);
}
process.exit(failed ? 1 : 0);
