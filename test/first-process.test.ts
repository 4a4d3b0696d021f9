// The node's wait for a container's init to catch its go (src/node/first-process.ts goReady), on
// real processes of this machine standing in for a container's first process: a busybox shell that
// traps SIGUSR1 only when told to. The engine is a stand-in that reports that process as the
// container's; /proc, the signal masks and the processes are real.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { afterEach, expect, it } from 'vitest';
import type { Engine } from '../src/node/engine';
import { goReady } from '../src/node/first-process';

const started: ChildProcess[] = [];

afterEach(() => {
  for (const child of started.splice(0)) child.kill('SIGKILL');
});

/** A shell that waits for a line, then runs `then`. */
function shell(then: string): ChildProcess {
  const child = spawn('busybox', ['sh', '-c', `read line; ${then}`], { stdio: ['pipe', 'pipe', 'inherit'] });
  started.push(child);
  return child;
}

/** An engine that reports `child` as the container's running first process (its control group as the container's id). */
function engineOf(child: ChildProcess, local = true): Engine & { inspected: number } {
  const id = readFileSync(`/proc/${child.pid}/cgroup`, 'utf8').trim();
  const engine = {
    local,
    inspected: 0,
    async inspect() {
      engine.inspected++;
      return { id, running: true, pid: child.pid!, exitCode: 0, oomKilled: false, labels: {}, subnets: [], gateways: [] };
    },
  };
  return engine as unknown as Engine & { inspected: number };
}

it('waits until init catches its go, then the go reaches its handler', async () => {
  const child = shell('trap "echo caught" USR1; echo ready; while :; do sleep 1; done');
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  let pauses = 0;
  const pause = async () => {
    // It has looked three times and found no handler: now the shell installs it.
    if (++pauses === 3) {
      child.stdin!.write('\n');
      while (!output.includes('ready')) await once(child.stdout!, 'data');
    }
  };
  await goReady(engineOf(child), 'c', pause);
  expect(pauses).toBe(3);
  child.kill('SIGUSR1');
  while (!output.includes('caught')) await once(child.stdout!, 'data');
  expect(child.exitCode).toBeNull();
});

it('refuses when init ends before it catches its go', async () => {
  const child = shell('exit 120');
  const engine = engineOf(child);
  const pause = async () => {
    child.stdin!.write('\n');
    if (child.exitCode === null) await once(child, 'exit');
  };
  await expect(goReady(engine, 'c', pause)).rejects.toThrow(/ended as it started/);
  expect(child.exitCode).toBe(120);
});

it('does not watch where the engine is not this machine', async () => {
  const child = shell('exit 0');
  const engine = engineOf(child, false);
  await goReady(engine, 'c', async () => {
    throw new Error('a remote engine is not watched');
  });
  expect(engine.inspected).toBe(0);
});
