// Shared by the tests: a runtime over the checkout's agentproto and its mock scripts, with a
// temp HOME (nothing a test starts writes under ~), closed when the test ends.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { AgentProtoError, Runtime, kindOf } from "../dist/index.js";

export const ROOT = join(import.meta.dirname, "../../..");
export const SCRIPTS = join(ROOT, "fixtures", "mock-scripts");
/** The interpreter that runs the sidecar (the pytest wrapper passes its own). */
export const PYTHON = process.env.AGENTPROTO_TEST_PYTHON ?? "python3";
export const SIDECAR = [PYTHON, "-m", "agentproto"];

export function tempDir(t, prefix = "agentproto-ts-") {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The sidecar's environment: this one, the checkout importable, HOME and XDG dirs in `home`. */
export function sidecarEnv(home) {
  return {
    ...process.env,
    PYTHONPATH: ROOT,
    HOME: home,
    XDG_CONFIG_HOME: join(home, ".config"),
    XDG_CACHE_HOME: join(home, ".cache"),
    XDG_DATA_HOME: join(home, ".local", "share"),
    XDG_STATE_HOME: join(home, ".local", "state"),
  };
}

/** A runtime over a mock script (a name in fixtures/mock-scripts, or a script object). */
export async function start(t, script, options = {}) {
  const home = tempDir(t);
  const mock = typeof script === "string" ? join(SCRIPTS, `${script}.json`) : script;
  const rt = await Runtime.start({ bin: SIDECAR, mock, env: sidecarEnv(home), ...options });
  t.after(() => rt.close());
  return rt;
}

/** Reads the stream to its end. */
export async function drain(session) {
  const seen = [];
  for await (const ev of session.events()) seen.push(ev);
  return seen;
}

/** Events until `kind` (inclusive). */
export async function until(session, kind) {
  const seen = [];
  for await (const ev of session.events()) {
    seen.push(ev);
    if (kindOf(ev) === kind) return seen;
  }
  throw new Error(`stream ended before ${kind}; saw ${seen.map(kindOf).join(",")}`);
}

export function texts(events) {
  return events.flatMap((ev) => (kindOf(ev) === "TextDelta" ? [ev.kind.TextDelta.text] : []));
}

/** `promise` rejects with an AgentProtoError of `kind`; returns it. */
export async function rejects(promise, kind) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof AgentProtoError, String(error));
    assert.equal(error.kind, kind, error.message);
    return error;
  }
  throw new Error(`resolved, expected ${kind}`);
}

/** True while a process of that id exists. */
export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    assert.equal(error.code, "ESRCH");
    return false;
  }
}

/** A fake sidecar: node running `source` (an ES module) stands in for the binary. */
export function fakeBin(t, source) {
  const path = join(tempDir(t, "agentproto-fake-"), "fake.mjs");
  writeFileSync(path, source);
  return [process.execPath, path];
}
