// The console's cost to a flat-out benchmark: `lockstep bench voter` against one server,
// in turns, with nothing watching, with the console open in headless Chromium (the page
// and its charts, on this machine), and with only its live read polled once a second (the
// server's share alone). Prints each run's throughput and the mean per mode. A measurement,
// not a test: it asserts nothing.
//
// Usage: node cost.mjs path/to/lockstep [SECONDS_PER_RUN] [ROUNDS]   (CHROMIUM overrides the browser)
import { chromium } from "playwright-core";
import { benchVoter, startServer } from "./server.mjs";

/** How often the poll-only mode reads the live figures (the page's own period). */
const POLL_MS = 1000;

const [bin, secondsArg, roundsArg] = process.argv.slice(2);
if (!bin) {
  console.error("usage: node cost.mjs path/to/lockstep [SECONDS_PER_RUN] [ROUNDS]");
  process.exit(2);
}
const seconds = Number(secondsArg || 10);
const rounds = Number(roundsArg || 2);

const server = await startServer(bin, ["--sites", "2"]);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: process.getuid?.() === 0 ? ["--no-sandbox"] : [],
});

const modes = {
  async "no console"() { return () => {}; },
  async "console open in Chromium"() {
    const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
    await page.goto(server.base);
    await page.waitForFunction(() => window.lockstepConsole?.samples >= 1);
    return () => page.close();
  },
  async "live read polled, no browser"() {
    const timer = setInterval(() => { fetch(`${server.base}/console/api/live`).then((r) => r.arrayBuffer()).catch(() => {}); }, POLL_MS);
    return () => clearInterval(timer);
  },
};

const results = Object.fromEntries(Object.keys(modes).map((m) => [m, []]));
try {
  await benchVoter(bin, server.addr, 3); // load the schema and warm up
  for (let round = 0; round < rounds; round += 1) {
    for (const [name, open] of Object.entries(modes)) {
      const close = await open();
      const { tps } = await benchVoter(bin, server.addr, seconds);
      await close();
      results[name].push(tps);
      console.log(`round ${round + 1}, ${name}: ${tps} txn/s`);
    }
  }
  for (const [name, runs] of Object.entries(results)) {
    const mean = runs.reduce((a, b) => a + b, 0) / runs.length;
    console.log(`${name}: mean ${Math.round(mean)} txn/s over ${runs.length} runs of ${seconds} s (${runs.join(", ")})`);
  }
} finally {
  await browser.close();
  server.stop();
}
