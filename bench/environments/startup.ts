/**
 * Goal 5, the embedded default as a user runs it: `npm start` (PGlite, filesystem blobs) spawned
 * with a fresh PORT. Time from spawn to the first 200 of /healthz, first on an empty DATA_DIR
 * (migrations, keys, the default organization), then again on that now existing DATA_DIR; idle
 * RSS of the server process (the node process running dist/server/main.js, the bundle of src/app/main.ts) once it has answered and
 * settled, and of the whole process tree `npm start` makes (npm and the server; sh and a launcher
 * too if the start script had them) as the sum of RSS and of PSS (shared pages counted once).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep } from './common';

export interface StartupRun {
  ms: number;
  serverRss?: number;
  treeRss?: number;
  treePss?: number;
  processes?: number;
  /** The tree's processes, by their first word (npm, node, …). */
  names?: string;
  /** RSS and PSS of each process of the tree by its role (npm, sh, server, built-in node). */
  split?: { role: string; rss: number; pss: number }[];
}

export interface StartupResult {
  first: StartupRun;
  existing: StartupRun[];
  settleSeconds: number;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

interface Proc {
  pid: number;
  ppid: number;
  cmdline: string;
}

async function processes(): Promise<Proc[]> {
  const out: Proc[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8');
      // The command name may hold spaces and parentheses: fields start after the last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmdline = (await readFile(`/proc/${entry}/cmdline`, 'utf8')).replaceAll('\0', ' ').trim();
      out.push({ pid: Number(entry), ppid, cmdline });
    } catch {
      // ended meanwhile
    }
  }
  return out;
}

export async function kib(path: string, field: string): Promise<number> {
  const text = await readFile(path, 'utf8').catch(() => '');
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
  return m ? Number(m[1]) * 1024 : 0;
}

/** The tree under `root`, each with its depth; the server is the deepest process running dist/server/main.js. */
export async function tree(root: number): Promise<{ all: (Proc & { depth: number })[]; server?: Proc }> {
  const procs = await processes();
  const all: (Proc & { depth: number })[] = [];
  const walk = (pid: number, depth: number) => {
    const p = procs.find((x) => x.pid === pid);
    if (p) all.push({ ...p, depth });
    for (const c of procs.filter((x) => x.ppid === pid)) walk(c.pid, depth + 1);
  };
  walk(root, 0);
  const server = all.filter((p) => p.cmdline.includes('dist/server/main.js')).sort((a, b) => b.depth - a.depth)[0];
  return { all, server };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  // Its own process group (detached): the signal reaches npm, the shell and the server.
  process.kill(-child.pid!, 'SIGTERM');
  const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 30_000);
  await exited;
  clearTimeout(timer);
}

/** A running `npm start`: its URL, how long it took to answer, and the deepest server process. */
export interface NpmStart {
  url: string;
  /** Spawn to the first 200 of /healthz. */
  ms: number;
  child: ChildProcess;
  stop: () => Promise<void>;
}

/**
 * Spawns `npm start` in `repo` on a free port, from this process's environment without the
 * settings that would point it elsewhere (embedded defaults) plus `env`, and resolves once
 * /healthz answers 200 (at most 120 s).
 */
export async function npmStart(repo: string, env: Record<string, string>): Promise<NpmStart> {
  const port = await freePort();
  const childEnv: NodeJS.ProcessEnv = { ...process.env };
  for (const name of ['DATABASE_URL', 'DATABASE_SCHEMA', 'AZURE_STORAGE_CONNECTION_STRING', 'NODE_ENV', 'BOOTSTRAP_TOKEN'])
    delete childEnv[name];
  Object.assign(childEnv, env, { PORT: String(port), HOST: '127.0.0.1' });
  const started = performance.now();
  const child = spawn('npm', ['start'], { cwd: repo, env: childEnv, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d));
  child.stderr!.on('data', (d: Buffer) => (output += d));
  const url = `http://127.0.0.1:${port}`;
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`npm start ended (${child.exitCode}):\n${output}`);
      if (performance.now() - started > 120_000) throw new Error(`no answer on /healthz within 120 s:\n${output}`);
      const ok = await fetch(`${url}/healthz`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) break;
      await sleep(20);
    }
  } catch (err) {
    await stop(child);
    throw err;
  }
  return { url, ms: performance.now() - started, child, stop: () => stop(child) };
}

async function startOnce(repo: string, dataDir: string, settleSeconds: number | undefined): Promise<StartupRun> {
  const { ms, child, stop } = await npmStart(repo, { DATA_DIR: dataDir });
  try {
    if (settleSeconds === undefined) return { ms };
    await sleep(settleSeconds * 1000);
    const { all, server } = await tree(child.pid!);
    if (!server) throw new Error(`no process running dist/server/main.js under npm start: ${JSON.stringify(all)}`);
    let treeRss = 0;
    let treePss = 0;
    const split: { role: string; rss: number; pss: number }[] = [];
    for (const p of all) {
      const rss = await kib(`/proc/${p.pid}/status`, 'VmRSS');
      const pss = await kib(`/proc/${p.pid}/smaps_rollup`, 'Pss');
      treeRss += rss;
      treePss += pss;
      const first = (p.cmdline.split(' ')[0] ?? '').split('/').at(-1) ?? '';
      const role = p === server ? 'server' : p.cmdline.includes(' node --builtin') ? 'built-in node' : first;
      split.push({ role, rss, pss });
    }
    const names = all.map((p) => (p.cmdline.split(' ')[0] ?? '').split('/').at(-1)).join(', ');
    return { ms, serverRss: await kib(`/proc/${server.pid}/status`, 'VmRSS'), treeRss, treePss, processes: all.length, names, split };
  } finally {
    await stop();
  }
}

export async function measureStartup(repo: string, starts: number, settleSeconds: number): Promise<StartupResult> {
  const dataDir = await mkdtemp(join(tmpdir(), 'berth-bench-start-'));
  try {
    const first = await startOnce(repo, dataDir, undefined);
    const existing: StartupRun[] = [];
    for (let i = 0; i < starts; i++) existing.push(await startOnce(repo, dataDir, settleSeconds));
    return { first, existing, settleSeconds };
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}
