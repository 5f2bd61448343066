// Starting a real lockstep server and running its benchmark, for the console's browser
// test (console.test.mjs) and its cost measurement (cost.mjs).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

/** How long a server may take to print its ready line. */
const SERVER_READY_TIMEOUT_MS = 30_000;

/**
 * Starts `lockstep server` on free ports (client and HTTP) with a fresh data directory;
 * resolves once its ready line names both addresses.
 */
export function startServer(bin, extraArgs = []) {
  const data = mkdtempSync(join(tmpdir(), "lockstep-console-"));
  const child = spawn(bin, ["server", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--pg", "off", "--data", data, ...extraArgs], {
    env: { ...process.env, LOCKSTEP_LOG: "warn" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const stop = () => {
    child.kill("SIGTERM");
    rmSync(data, { recursive: true, force: true });
  };
  // However the test ends (its watchdog exits the process), the server goes with it.
  process.on("exit", stop);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { stop(); reject(new Error(`the server printed no ready line within ${SERVER_READY_TIMEOUT_MS} ms`)); }, SERVER_READY_TIMEOUT_MS);
    child.on("exit", (code) => reject(new Error(`the server exited (code ${code}) before it was ready`)));
    createInterface({ input: child.stdout }).on("line", (line) => {
      if (!line.includes("ready")) return;
      const addr = /listening on ([^,\s]+)/.exec(line)?.[1];
      const http = /HTTP on ([^,\s]+)/.exec(line)?.[1];
      clearTimeout(timer);
      if (!addr || !http) { stop(); reject(new Error(`cannot read the addresses from the ready line: ${line}`)); return; }
      resolve({ addr, base: `http://${http}`, stop });
    });
  });
}

/** Runs `lockstep bench voter` for `seconds`; resolves with its output and the total tps. */
export function benchVoter(bin, addr, seconds) {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, ["bench", "voter", "--server", addr, "--duration", String(seconds)], { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (d) => { output += d; });
    child.stderr.on("data", (d) => { output += d; });
    child.on("exit", (code) => {
      if (code !== 0) { reject(new Error(`lockstep bench voter failed (code ${code}):\n${output}`)); return; }
      const all = /^ALL\s+\d+\s+(\d+)/m.exec(output);
      resolve({ output, tps: all ? Number(all[1]) : null });
    });
  });
}

/** Calls a procedure through the JSON API, as the console's SQL pane does. */
export async function callApi(base, procedure, parameters) {
  const body = new URLSearchParams({ Procedure: procedure, Parameters: JSON.stringify(parameters) });
  const response = await fetch(`${base}/api/1.0/`, { method: "POST", body });
  return response.json();
}
