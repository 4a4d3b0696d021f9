import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client } from './helpers/server';

const root = new URL('..', import.meta.url).pathname;

interface Started {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the exit code, or with the output once `until` appears on stdout or stderr. */
  settled: Promise<{ code: number | null } | { ready: string }>;
}

/** Runs what `npm start` runs (the bundle of scripts/build-server.mjs) as a real process with only the given environment. */
function start(env: Record<string, string>, until = 'Try:'): Started {
  const child = spawn(process.execPath, ['dist/server/main.js'], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', ...env },
  });
  let out = '';
  let err = '';
  const settled = new Promise<{ code: number | null } | { ready: string }>((resolve) => {
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes(until)) resolve({ ready: out });
    });
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      if (err.includes(until)) resolve({ ready: err });
    });
    child.on('exit', (code) => resolve({ code }));
  });
  return { child, stdout: () => out, stderr: () => err, settled };
}

async function stop(p: Started): Promise<void> {
  if (p.child.exitCode !== null) return;
  const exited = new Promise((r) => p.child.once('exit', r));
  p.child.kill('SIGTERM');
  await exited;
}

describe('starting Berth', () => {
  let dir: string;
  let blocker: Server;
  let takenPort: number;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-start-'));
    blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
    takenPort = (blocker.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((r) => blocker.close(r));
    await rm(dir, { recursive: true, force: true });
  });

  const failsWithOneLine = async (p: Started, phrase: string | RegExp) => {
    const result = await p.settled;
    expect(result).toMatchObject({ code: expect.any(Number) });
    expect((result as { code: number }).code).not.toBe(0);
    const lines = p.stderr().trim().split('\n');
    expect(lines, p.stderr()).toHaveLength(1);
    expect(lines[0]).toMatch(phrase);
    expect(p.stderr()).not.toMatch(/\n\s+at /);
  };

  it('stops with one clear line for a bad templates file, a missing file or bad settings', async () => {
    const bad = join(dir, 'bad-templates.json');
    await writeFile(bad, JSON.stringify({ pools: [], templates: [{ name: 'x' }] }));
    await failsWithOneLine(start({ DATA_DIR: join(dir, 'a'), PORT: '0', TEMPLATES_FILE: bad }), /bad-templates\.json/);
    await failsWithOneLine(start({ DATA_DIR: join(dir, 'b'), PORT: '0', TEMPLATES_FILE: join(dir, 'missing.json') }), /missing\.json/);
    await failsWithOneLine(start({ DATA_DIR: join(dir, 'c'), PORT: '0', MASTER_KEY: 'short' }), /MASTER_KEY/);
    await failsWithOneLine(start({ DATA_DIR: join(dir, 'd'), PORT: '0', TRUST_PROXY: 'yes' }), /TRUST_PROXY/);
  });

  it('stops with one clear line when the port is taken, and shows the first admin token on the next start', async () => {
    const data = join(dir, 'first');
    await failsWithOneLine(start({ DATA_DIR: data, PORT: String(takenPort) }), new RegExp(`port ${takenPort}.*in use`));
    const next = start({ DATA_DIR: data, PORT: '0' });
    try {
      const result = await next.settled;
      expect(result).toMatchObject({ ready: expect.any(String) });
      // Not on a terminal, the log is JSON lines on stdout; the banner goes to stderr.
      const token = /export BERTH_TOKEN=(\S+)/.exec(next.stderr())?.[1];
      expect(token).toMatch(/^bct_/);
      const url = /listening on (\S+)/.exec(next.stderr())![1]!;
      // Not the berth command's default address: the start says how to point it here.
      expect(next.stderr()).toContain(`export BERTH_URL=${url}\n`);
      expect((await client(() => url, token).get('/v1/me')).body).toMatchObject({ admin: true, organization: { name: 'default' } });
      // Every whole line of stdout so far is a JSON log line.
      for (const line of next.stdout().split('\n').slice(0, -1)) expect(JSON.parse(line)).toMatchObject({ level: expect.anything() });
      expect(next.stdout()).not.toContain('Berth listening');
      expect(next.stdout()).not.toContain(token);
    } finally {
      await stop(next);
    }
  });
});
