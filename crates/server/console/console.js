// The Lockstep console's script: polls /console/api/live about once a second and draws
// the monitor's charts (Chart.js), shows the schema (/console/api/schema), and runs SQL
// and procedure calls through the JSON API (/api/1.0/). Values from the server are always
// written as text (textContent), never as HTML.
"use strict";

/** Time between two reads of the live figures. */
const POLL_MS = 1000;
/** Points a time chart keeps (two minutes at one a second). */
const HISTORY_POINTS = 120;
/** Result rows the SQL pane shows per table; the rest are counted. */
const RESULT_ROWS_SHOWN_MAX = 1000;
/** Procedures the calls-per-second chart shows (the busiest). */
const PROCEDURES_CHARTED_MAX = 10;
/** Tables the memory chart shows (the largest). */
const TABLES_CHARTED_MAX = 12;
/** Where the page keeps the login for this tab (never in localStorage). */
const AUTH_KEY = "lockstep.console.authorization";

const STATUS_NAMES = {
  1: "SUCCESS", [-1]: "USER_ABORT", [-2]: "GRACEFUL_FAILURE", [-3]: "UNEXPECTED_FAILURE",
  [-4]: "CONNECTION_LOST", [-5]: "SERVER_UNAVAILABLE", [-6]: "CONNECTION_TIMEOUT",
  [-7]: "RESPONSE_UNKNOWN", [-9]: "TXN_RESTART", [-10]: "OPERATIONAL_FAILURE",
};
const TYPE_NAMES = {
  3: "TINYINT", 4: "SMALLINT", 5: "INTEGER", 6: "BIGINT", 8: "FLOAT", 9: "VARCHAR",
  11: "TIMESTAMP", 22: "DECIMAL", 23: "BOOLEAN", 25: "VARBINARY",
};
/** Type codes whose values are numbers (right-aligned). */
const NUMERIC_TYPES = new Set([3, 4, 5, 6, 8, 22]);
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563",
  "#65a30d", "#ea580c", "#0d9488", "#9333ea"];

const $ = (id) => document.getElementById(id);

/** What the page knows; `window.lockstepConsole` exposes it (the browser test reads it). */
const state = {
  previous: null,      // the last live sample
  samples: 0,          // live samples received
  charts: {},
  polling: true,
  lastError: null,
};
window.lockstepConsole = state;

// ---- talking to the server ----

function authHeaders() {
  const auth = sessionStorage.getItem(AUTH_KEY);
  return auth ? { Authorization: auth } : {};
}

/** Basic credentials in UTF-8, as the server decodes them. */
function basicAuth(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let binary = "";
  bytes.forEach((b) => { binary += String.fromCharCode(b); });
  return `Basic ${btoa(binary)}`;
}

class LoginNeeded extends Error {}

async function getJson(path) {
  const response = await fetch(path, { headers: authHeaders(), cache: "no-store" });
  if (response.status === 401) {
    const body = await response.json().catch(() => ({}));
    throw new LoginNeeded(body.error || "log in");
  }
  if (!response.ok) throw new Error(`${path} answered HTTP ${response.status}`);
  return response.json();
}

/** Calls a procedure through the JSON API; the answer is VoltDB's JSON. */
async function callProcedure(procedure, parameters) {
  const body = new URLSearchParams({ Procedure: procedure, Parameters: JSON.stringify(parameters) });
  const response = await fetch("/api/1.0/", { method: "POST", headers: authHeaders(), body });
  const answer = await response.json().catch(() => null);
  if (response.status === 401) throw new LoginNeeded(answer?.statusstring || "log in");
  if (!answer) throw new Error(`the server answered HTTP ${response.status} without a JSON body`);
  return answer;
}

function askLogin(message) {
  const dialog = $("login");
  if (dialog.open) return;
  state.polling = false;
  $("login-message").textContent = `The server asks for a login: ${message}`;
  dialog.showModal();
}

function setupLogin() {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(AUTH_KEY, basicAuth($("login-user").value, $("login-password").value));
    $("login").close();
    state.polling = true;
  });
}

// ---- formatting ----

const fmtInt = (n) => Math.round(n).toLocaleString("en-US");
const fmtMs = (us) => (us / 1000).toLocaleString("en-US", { maximumFractionDigits: us < 10000 ? 2 : 0 });

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toLocaleString("en-US", { maximumFractionDigits: i ? 1 : 0 })} ${units[i]}`;
}

function fmtDuration(ms) {
  const s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  return `${m}m ${s % 60}s`;
}

const clock = (ms) => new Date(ms).toLocaleTimeString("en-GB", { hour12: false });

/** A TIMESTAMP (microseconds since 1970, UTC) as text with its microseconds. */
function fmtTimestamp(us) {
  const ms = Math.floor(us / 1000);
  const micros = String(((us % 1000) + 1000) % 1000).padStart(3, "0");
  return new Date(ms).toISOString().replace("T", " ").replace("Z", "") + micros;
}

// ---- charts ----

function timeChart(id, datasets, options = {}) {
  return new Chart($(id), {
    type: "line",
    data: { labels: [], datasets: datasets.map((d, i) => lineDataset(d, i)) },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false,
      interaction: { mode: "index", intersect: false },
      elements: { point: { radius: 0 } },
      scales: {
        x: { ticks: { maxTicksLimit: 6, maxRotation: 0 } },
        y: { beginAtZero: true, ...options.y },
      },
      plugins: { legend: { display: datasets.length > 1, labels: { boxWidth: 12 } } },
    },
  });
}

function lineDataset(label, i) {
  return { label, data: [], borderColor: COLORS[i % COLORS.length], backgroundColor: COLORS[i % COLORS.length], borderWidth: 1.5, cubicInterpolationMode: "monotone" };
}

/** Longest category label a bar chart prints; longer names are cut (the tooltip has them). */
const BAR_LABEL_CHARS_MAX = 22;

function shortLabel(value) {
  const name = this.getLabelForValue(value);
  return name.length > BAR_LABEL_CHARS_MAX ? `${name.slice(0, BAR_LABEL_CHARS_MAX - 1)}…` : name;
}

function barChart(id, label, tooltip) {
  return new Chart($(id), {
    type: "bar",
    data: { labels: [], datasets: [{ label, data: [], backgroundColor: COLORS[0] }] },
    options: {
      indexAxis: "y", animation: false, responsive: true, maintainAspectRatio: false,
      scales: { x: { beginAtZero: true }, y: { ticks: { callback: shortLabel } } },
      plugins: { legend: { display: false }, tooltip: tooltip ? { callbacks: { label: tooltip } } : {} },
    },
  });
}

function setupCharts() {
  const c = state.charts;
  c.tps = timeChart("chart-tps", ["transactions/s"]);
  c.latency = timeChart("chart-latency", ["p50", "p95", "p99"]);
  c.queues = timeChart("chart-queues", []);
  c.cpu = timeChart("chart-cpu", []);
  c.cmdlog = timeChart("chart-cmdlog", ["KiB/s written", "syncs/s"]);
  c.procs = barChart("chart-procs", "calls/s");
  c.memory = barChart("chart-memory", "MiB", (item) => {
    const t = state.memoryTables?.[item.dataIndex];
    return t ? `${fmtBytes(t.bytes)}, ${fmtInt(t.rows)} rows` : "";
  });
}

/** Appends one point to every dataset of a time chart (values in dataset order). */
function pushPoint(chart, label, values) {
  chart.data.labels.push(label);
  values.forEach((v, i) => chart.data.datasets[i].data.push(v));
  if (chart.data.labels.length > HISTORY_POINTS) {
    chart.data.labels.shift();
    chart.data.datasets.forEach((d) => d.data.shift());
  }
  chart.update("none");
}

function setBars(chart, labels, values) {
  chart.data.labels = labels;
  chart.data.datasets[0].data = values;
  chart.update("none");
}

// ---- the live figures ----

/** Calls of applications (user procedures and ad-hoc SQL), not the system procedures. */
const isUserCall = (name) => !name.startsWith("@") || name.toLowerCase() === "@adhoc";

/**
 * A percentile of the calls counted between two reads of the histogram (counts per
 * bucket, the last one unbounded), interpolated inside its bucket as Prometheus'
 * histogram_quantile does. Null when no call ended in between.
 */
function percentileUs(bounds, before, after, q) {
  const delta = after.map((c, i) => c - (before?.[i] ?? 0));
  const total = delta.reduce((a, b) => a + b, 0);
  if (total <= 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < delta.length; i += 1) {
    if (seen + delta[i] >= rank && delta[i] > 0) {
      if (i >= bounds.length) return bounds[bounds.length - 1];
      const low = i === 0 ? 0 : bounds[i - 1];
      return low + (bounds[i] - low) * ((rank - seen) / delta[i]);
    }
    seen += delta[i];
  }
  return bounds[bounds.length - 1];
}

function onLive(live) {
  const prev = state.previous;
  state.previous = live;
  state.samples += 1;
  $("status").textContent = `live · ${clock(live.now_ms)}`;
  $("status").classList.remove("down");
  $("connections").textContent = fmtInt(live.connections);
  $("rss").textContent = fmtBytes(live.rss_bytes);
  $("partitions").textContent = String(live.partitions);
  $("uptime").textContent = fmtDuration(live.now_ms - live.started_ms);
  showDurability(live);
  showMemory(live.tables);
  const win = live.latency.window;
  $("latency-window").textContent = win.count
    ? `Last ${win.interval_ms / 1000} s window: ${fmtInt(win.count)} calls, p50 ${fmtMs(win.percentiles_us[0])} ms, `
      + `p99 ${fmtMs(win.percentiles_us[2])} ms, p99.9 ${fmtMs(win.percentiles_us[3])} ms, max ${fmtMs(win.max_us)} ms`
    : "No calls in the last 5 s window.";
  if (!prev) {
    showProcedures(live, null, 1);
    return;
  }
  const seconds = Math.max((live.now_ms - prev.now_ms) / 1000, 0.001);
  const label = clock(live.now_ms);
  const rates = showProcedures(live, prev, seconds);
  const tps = rates.filter((r) => isUserCall(r.name)).reduce((a, r) => a + r.rate, 0);
  $("tps-now").textContent = fmtInt(tps);
  pushPoint(state.charts.tps, label, [tps]);
  const lat = live.latency;
  const pct = [0.5, 0.95, 0.99].map((q) => percentileUs(lat.bounds_us, prev.latency.counts, lat.counts, q));
  pushPoint(state.charts.latency, label, pct.map((us) => (us === null ? null : us / 1000)));
  $("p99-now").textContent = pct[2] === null ? "–" : `${fmtMs(pct[2])} ms`;
  showQueues(live, label);
  showCpu(live, prev, seconds, label);
  const log = live.command_log, before = prev.command_log;
  pushPoint(state.charts.cmdlog, label, [(log.bytes - before.bytes) / 1024 / seconds, (log.syncs - before.syncs) / seconds]);
}

/** Fills the procedures table and chart; returns each procedure's calls per second. */
function showProcedures(live, prev, seconds) {
  const before = new Map((prev?.procedures ?? []).map((p) => [p.name, p]));
  const rows = live.procedures.map((p) => {
    const b = before.get(p.name);
    const calls = prev ? p.calls - (b?.calls ?? 0) : 0;
    const latency = prev ? p.latency_us - (b?.latency_us ?? 0) : 0;
    return { ...p, rate: calls / seconds, meanUs: calls > 0 ? latency / calls : (p.calls ? p.latency_us / p.calls : 0) };
  });
  const body = $("procedures").tBodies[0];
  body.replaceChildren(...rows.map((r) => tableRow([r.name, fmtInt(r.calls), fmtInt(r.rate), fmtMs(r.meanUs), fmtInt(r.aborts), fmtInt(r.failures)])));
  const busiest = rows.filter((r) => r.rate > 0).sort((a, b) => b.rate - a.rate).slice(0, PROCEDURES_CHARTED_MAX);
  setBars(state.charts.procs, busiest.map((r) => r.name), busiest.map((r) => Math.round(r.rate)));
  return rows;
}

function tableRow(cells) {
  const tr = document.createElement("tr");
  cells.forEach((text, i) => {
    const td = document.createElement("td");
    td.textContent = text;
    if (i > 0) td.className = "num";
    tr.append(td);
  });
  return tr;
}

function showQueues(live, label) {
  const chart = state.charts.queues;
  const names = live.queues.map((_, i) => `partition ${i}`).concat(["multi-partition"]);
  if (chart.data.datasets.length !== names.length) {
    chart.data.labels = [];
    chart.data.datasets = names.map((n, i) => lineDataset(n, i));
    chart.options.plugins.legend.display = true;
  }
  pushPoint(chart, label, live.queues.concat([live.mp_queue]));
}

/** The server's CPU and each partition's busy time, as percent of one core. */
function showCpu(live, prev, seconds, label) {
  const chart = state.charts.cpu;
  const names = ["server process"].concat(live.busy_seconds.map((_, i) => `partition ${i} busy`));
  if (chart.data.datasets.length !== names.length) {
    chart.data.labels = [];
    chart.data.datasets = names.map((n, i) => lineDataset(n, i));
    chart.options.plugins.legend.display = true;
  }
  const percent = (now, before) => Math.max(0, ((now - (before ?? now)) / seconds) * 100);
  const busy = live.busy_seconds.map((b, i) => percent(b, prev.busy_seconds?.[i]));
  pushPoint(chart, label, [percent(live.cpu_seconds, prev.cpu_seconds)].concat(busy));
}

function showMemory(tables) {
  if (!tables) {
    $("memory-note").textContent = "Waiting for the partitions' first report…";
    return;
  }
  const largest = [...tables.tables].sort((a, b) => b.bytes - a.bytes).slice(0, TABLES_CHARTED_MAX);
  state.memoryTables = largest;
  setBars(state.charts.memory, largest.map((t) => t.name), largest.map((t) => t.bytes / 1048576));
  const total = tables.tables.reduce((a, t) => a + t.bytes, 0);
  $("memory-note").textContent = `${fmtBytes(total)} in ${tables.tables.length} tables, as the partitions reported ${Math.round(tables.age_ms / 1000)} s ago (read every 5 s).`;
}

function showDurability(live) {
  const log = live.command_log;
  const items = [
    ["Command log", log.mode === "off" ? "off" : `${log.mode}${log.failed ? " — FAILED: writes are refused" : ""}`, log.failed],
  ];
  if (log.mode !== "off") {
    items.push(
      ["Written", `${fmtInt(log.records)} records, ${fmtBytes(log.bytes)}`],
      ["Syncs", `${fmtInt(log.syncs)}, the last took ${fmtMs(log.last_sync_us)} ms`],
      ["Waiting for the disk", `${fmtInt(log.queued)} records`],
      ["Write failures", fmtInt(log.failures), log.failures > 0],
    );
  }
  const snaps = live.snapshots;
  if (snaps) {
    items.push(["Snapshots", `${fmtInt(snaps.complete)} complete`]);
    if (snaps.newest) {
      items.push(["Newest snapshot", `#${snaps.newest.id}, ${new Date(snaps.newest.created_ms).toLocaleString("en-GB")}, ${fmtBytes(snaps.newest.bytes)}`]);
    }
    if (snaps.writing) items.push(["Being written", `#${snaps.writing.id}, ${fmtBytes(snaps.writing.bytes)} so far`]);
  }
  $("durability").replaceChildren(...items.flatMap(([name, value, bad]) => {
    const dt = document.createElement("dt");
    dt.textContent = name;
    const dd = document.createElement("dd");
    dd.textContent = value;
    if (bad) dd.className = "bad";
    return [dt, dd];
  }));
}

async function poll() {
  if (state.polling) {
    try {
      onLive(await getJson("/console/api/live"));
      state.lastError = null;
    } catch (e) {
      state.lastError = String(e.message || e);
      if (e instanceof LoginNeeded) askLogin(e.message);
      else {
        $("status").textContent = `server unreachable: ${state.lastError}`;
        $("status").classList.add("down");
      }
    }
  }
  setTimeout(poll, POLL_MS);
}

// ---- the schema ----

async function loadSchema() {
  try {
    renderSchema(await getJson("/console/api/schema"));
  } catch (e) {
    if (e instanceof LoginNeeded) askLogin(e.message);
    $("schema-note").textContent = `Cannot read the schema: ${e.message}`;
  }
}

function el(tag, text, className) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (className) e.className = className;
  return e;
}

function renderSchema(schema) {
  const root = $("schema");
  $("schema-note").textContent = `Catalog version ${schema.version}: ${schema.tables.length} tables, streams and views, ${schema.procedures.length} procedures.`;
  const tables = el("div", undefined, "schema-grid");
  schema.tables.forEach((t) => tables.append(tableCard(t)));
  const procs = el("table", undefined, "data");
  procs.id = "schema-procedures";
  procs.append(headRow(["procedure", "language", "partitioning", "statement"]));
  const body = el("tbody");
  schema.procedures.forEach((p) => {
    const part = p.partitioning.kind === "single-partition"
      ? `single-partition on ${p.partitioning.table}.${p.partitioning.column} (parameter ${p.partitioning.parameter + 1})`
      : p.partitioning.kind;
    const tr = el("tr");
    [p.name, p.language, part, p.sql ?? ""].forEach((c) => tr.append(el("td", c)));
    body.append(tr);
  });
  procs.append(body);
  root.replaceChildren(el("h2", "Tables, streams and views"), tables, el("h2", "Procedures"), procs);
}

function headRow(names) {
  const thead = el("thead");
  const tr = el("tr");
  names.forEach((n) => tr.append(el("th", n)));
  thead.append(tr);
  return thead;
}

function tableCard(t) {
  const card = el("div", undefined, "schema-item");
  card.dataset.table = t.name;
  const title = el("h3", t.name);
  title.append(el("span", t.kind, "badge"));
  let where = t.replicated ? "replicated" : (t.partition_column ? `partitioned on ${t.partition_column}` : "not partitioned");
  if (t.kind === "view") where = `view of ${t.source}${t.partition_column ? `, partitioned on ${t.partition_column}` : ""}`;
  title.append(el("span", where, "badge"));
  const cols = el("table", undefined, "data");
  cols.append(headRow(["column", "type", "null"]));
  const body = el("tbody");
  t.columns.forEach((c) => {
    const tr = el("tr");
    [c.name, c.type, c.nullable ? "yes" : "NOT NULL"].forEach((v) => tr.append(el("td", v)));
    body.append(tr);
  });
  cols.append(body);
  card.append(title, cols);
  t.indexes.forEach((i) => {
    const kind = i.primary ? "primary key" : (i.unique ? "unique index" : "index");
    card.append(el("p", `${kind} ${i.name} (${i.columns.join(", ")})`, "note"));
  });
  return card;
}

// ---- the SQL pane ----

/**
 * `exec Proc a b 'c d'` → { procedure, parameters }, or null when the text is not an exec.
 * Arguments are separated by spaces or commas; quotes ('…' or "…", doubled to escape)
 * keep spaces; an unquoted NULL is null; everything else goes as text, which the server
 * converts to the parameter's type as for any JSON API call.
 */
function parseExec(text) {
  const m = /^\s*exec(?:ute)?\s+([^\s,;]+)(.*)$/is.exec(text);
  if (!m) return null;
  const rest = m[2].replace(/;\s*$/, "");
  const parameters = [];
  let i = 0;
  while (i < rest.length) {
    const ch = rest[i];
    if (/[\s,]/.test(ch)) { i += 1; continue; }
    if (ch === "'" || ch === '"') {
      let value = "";
      i += 1;
      for (;;) {
        if (i >= rest.length) throw new Error(`an argument's quote (${ch}) is not closed`);
        if (rest[i] === ch && rest[i + 1] === ch) { value += ch; i += 2; continue; }
        if (rest[i] === ch) { i += 1; break; }
        value += rest[i];
        i += 1;
      }
      parameters.push(value);
      continue;
    }
    let word = "";
    while (i < rest.length && !/[\s,]/.test(rest[i])) { word += rest[i]; i += 1; }
    parameters.push(word.toUpperCase() === "NULL" ? null : word);
  }
  return { procedure: m[1], parameters };
}

async function runSql() {
  const text = $("sql-input").value.trim();
  const errorBox = $("sql-error");
  errorBox.hidden = true;
  $("sql-summary").textContent = "Running…";
  $("sql-result").replaceChildren();
  if (!text) { $("sql-summary").textContent = "Type a statement first."; return; }
  const started = performance.now();
  try {
    const call = parseExec(text) ?? { procedure: "@AdHoc", parameters: [text] };
    const answer = await callProcedure(call.procedure, call.parameters);
    const ms = Math.round(performance.now() - started);
    if (answer.status !== 1) {
      showSqlError(`${STATUS_NAMES[answer.status] ?? `status ${answer.status}`}: ${answer.statusstring ?? "(no message)"}`);
      $("sql-summary").textContent = `Failed after ${ms} ms.`;
      return;
    }
    const results = answer.results ?? [];
    $("sql-result").replaceChildren(...results.map(resultTable));
    const rows = results.reduce((a, r) => a + r.data.length, 0);
    $("sql-summary").textContent = `${call.procedure}: ${results.length} result table${results.length === 1 ? "" : "s"}, ${fmtInt(rows)} rows, ${ms} ms.`;
  } catch (e) {
    if (e instanceof LoginNeeded) askLogin(e.message);
    showSqlError(String(e.message || e));
    $("sql-summary").textContent = "";
  }
}

function showSqlError(message) {
  const box = $("sql-error");
  box.textContent = message;
  box.hidden = false;
}

function resultTable(result) {
  const wrap = el("div", undefined, "result");
  const table = el("table", undefined, "data");
  const head = headRow(result.schema.map((c) => c.name));
  head.querySelectorAll("th").forEach((th, i) => {
    const type = result.schema[i].type;
    th.title = TYPE_NAMES[type] ?? `type ${type}`;
    if (NUMERIC_TYPES.has(type)) th.className = "num";
  });
  table.append(head);
  const body = el("tbody");
  result.data.slice(0, RESULT_ROWS_SHOWN_MAX).forEach((row) => {
    const tr = el("tr");
    row.forEach((v, i) => tr.append(cell(v, result.schema[i]?.type)));
    body.append(tr);
  });
  table.append(body);
  wrap.append(table);
  if (result.data.length > RESULT_ROWS_SHOWN_MAX) {
    wrap.append(el("p", `Showing the first ${fmtInt(RESULT_ROWS_SHOWN_MAX)} of ${fmtInt(result.data.length)} rows.`, "note"));
  }
  return wrap;
}

function cell(value, type) {
  if (value === null) return el("td", "NULL", "null");
  if (type === 11 && typeof value === "number") return el("td", fmtTimestamp(value));
  return el("td", String(value), NUMERIC_TYPES.has(type) ? "num" : undefined);
}

// ---- the page ----

function showTab(name) {
  document.querySelectorAll("nav button").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
  document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t.id === `tab-${name}`));
  if (name === "schema") loadSchema();
}

function start() {
  setupCharts();
  setupLogin();
  document.querySelectorAll("nav button").forEach((b) => b.addEventListener("click", () => showTab(b.dataset.tab)));
  $("schema-refresh").addEventListener("click", loadSchema);
  $("sql-form").addEventListener("submit", (event) => { event.preventDefault(); runSql(); });
  $("sql-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); runSql(); }
  });
  poll();
}

start();
