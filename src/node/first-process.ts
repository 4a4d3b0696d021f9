// A container's first process (berth-envd init) as this machine's process: by the pid the engine
// reports, trusted only while that pid is still in the container's own control group, so a pid
// that ended and was reused (or one of another pid namespace) is never taken for it.

import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';
import type { Engine } from './engine';

export interface FirstProcess {
  id: string;
  pid: number;
}

/** SIGUSR1's bit in /proc's signal masks: init's go. */
const GO_BIT = 1n << 9n;
/** How long init may take to be ready for its go once the engine said it started. */
const GO_READY_MS = 10_000;

/** The container's first process, while it runs. */
export async function firstProcess(engine: Engine, name: string): Promise<FirstProcess | undefined> {
  const state = await engine.inspect(name);
  if (!state?.running || state.pid <= 0) return undefined;
  return { id: state.id, pid: state.pid };
}

/** Whether `first`'s pid is still in its container's control group (else it ended, and the pid may be another's). */
export function inContainer(first: FirstProcess): boolean {
  try {
    return readFileSync(`/proc/${first.pid}/cgroup`, 'utf8').includes(first.id);
  } catch {
    return false;
  }
}

/** Whether the process catches SIGUSR1; undefined when it is gone. */
async function catchesGo(pid: number): Promise<boolean | undefined> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => undefined);
  const caught = status && /^SigCgt:\s*([0-9a-f]+)$/m.exec(status)?.[1];
  return caught ? (BigInt(`0x${caught}`) & GO_BIT) !== 0n : undefined;
}

/**
 * Resolves once the container's init catches its go (SIGUSR1). The engine's start can return
 * before init has run its first line, and a PID namespace's init drops a signal it has no handler
 * for: a go sent then would be lost, and an init that refuses its place (/.berth) would seem to
 * have taken it. Rejects when init ended first (the caller asks the engine why). Where the
 * engine's processes are not this machine's, there is nothing to watch: it resolves at once.
 */
export async function goReady(engine: Engine, name: string, pause: (ms: number) => Promise<unknown> = delay): Promise<void> {
  if (!engine.local) return;
  const first = await firstProcess(engine, name);
  if (!first) throw new Error('its first process ended as it started');
  if (!inContainer(first)) return;
  const deadline = Date.now() + GO_READY_MS;
  for (let wait = 1; ; wait = Math.min(wait * 2, 50)) {
    const catches = await catchesGo(first.pid);
    if (catches === undefined || !inContainer(first)) throw new Error('its first process ended as it started');
    if (catches) return;
    if (Date.now() > deadline) throw new Error(`berth-envd init was not ready for its go within ${GO_READY_MS / 1000} s`);
    await pause(wait);
  }
}
