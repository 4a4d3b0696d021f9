// vitest global setup: a container engine for the suites that run environments as containers.
// BERTH_TEST_ENGINE names one (unix:///… or tcp://…); otherwise, where Podman is installed (as
// .ci/run installs it), a Podman service is started on a socket of its own for this run, with runc
// and the cgroupfs manager (crun refuses these machines' hybrid cgroups: ../shared/DESIGN.md).
// The test image is built offline from Debian's busybox-static (no registry is reachable here).
// Suites read the engine with inject('engine'); '' means none, and they skip saying why.
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestProject } from 'vitest/node';
import { Engine } from '../../src/node/engine';
import { poll } from './wait';

export const TEST_IMAGE = 'localhost/berth-test/busybox:1';
export const TEST_USER_IMAGE = 'localhost/berth-test/busybox-user:1';
/** Its command waits for /tmp/go, then eats memory until the limit kills it. */
export const TEST_HOG_IMAGE = 'localhost/berth-test/busybox-hog:1';
/** Its command serves an echo on the environment's port 7000 and a byte counter (`wc -c`) on 9000. */
export const TEST_ECHO_IMAGE = 'localhost/berth-test/busybox-echo:1';
/** Its /.berth is a link (to /tmp): berth-envd's place, which such an image must not move. */
export const TEST_LINKED_IMAGE = 'localhost/berth-test/busybox-linked:1';
/** How the podman command must run here (runc and cgroupfs: ../shared/DESIGN.md). */
export const PODMAN_FLAGS = ['--runtime', 'runc', '--cgroup-manager', 'cgroupfs'];
const BUSYBOX = '/bin/busybox';

declare module 'vitest' {
  export interface ProvidedContext {
    engine: string;
    engineMissing: string;
  }
}

let service: ChildProcess | undefined;
let dir: string | undefined;

function which(program: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${program}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Runs the podman command on the tests' storage, here in the global setup (no server shares its process); its output, trimmed. */
const podmanHere = (...args: string[]) =>
  execFileSync('podman', [...PODMAN_FLAGS, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    .toString()
    .trim();

const run = promisify(execFile);

/**
 * Runs the podman command on the tests' storage; its output, trimmed. Never blocking: a suite's
 * server runs in the suite's process, and a waitFor asking podman every 100 ms would starve it
 * (a `podman ps` takes 0.2-1 s).
 */
export async function podman(...args: string[]): Promise<string> {
  return (await run('podman', [...PODMAN_FLAGS, ...args])).stdout.trim();
}

/** The busybox image (and one with a user of its own), imported from a root file system made here. */
export function buildImages(): void {
  const have = podmanHere('images', '--format', '{{.Repository}}:{{.Tag}}');
  if ([TEST_IMAGE, TEST_USER_IMAGE, TEST_HOG_IMAGE, TEST_ECHO_IMAGE, TEST_LINKED_IMAGE].every((image) => have.includes(image))) return;
  // (Delete the images to build them again after changing them here.)
  const root = mkdtempSync(join(tmpdir(), 'berth-rootfs-'));
  try {
    for (const d of ['bin', 'etc', 'tmp', 'root', 'home/builder']) mkdirSync(join(root, d), { recursive: true });
    execFileSync('cp', [BUSYBOX, join(root, 'bin/busybox')]);
    for (const applet of execFileSync(BUSYBOX, ['--list']).toString().split('\n').filter(Boolean)) {
      if (applet !== 'busybox' && !existsSync(join(root, 'bin', applet))) symlinkSync('busybox', join(root, 'bin', applet));
    }
    writeFileSync(join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nbuilder:x:1234:1234:builder:/home/builder:/bin/sh\n');
    writeFileSync(join(root, 'etc/group'), 'root:x:0:\nbuilder:x:1234:\n');
    writeFileSync(join(root, 'etc/berth-image'), 'the berth test image\n');
    execFileSync('chown', ['1234:1234', join(root, 'home/builder')]);
    const tar = join(root, '..', `${root.split('/').pop()}.tar`);
    execFileSync('tar', ['-C', root, '-cf', tar, '.']);
    podmanHere('import', '--change', 'CMD ["sh"]', tar, TEST_IMAGE);
    podmanHere('import', '--change', 'CMD ["sh"]', '--change', 'USER builder', '--change', 'WORKDIR /home/builder', tar, TEST_USER_IMAGE);
    const hog = 'while [ ! -e /tmp/go ]; do sleep 0.1; done; head -c 1000000000 /dev/zero | tail';
    podmanHere('import', '--change', `CMD ["sh", "-c", "${hog}"]`, tar, TEST_HOG_IMAGE);
    const services = 'nc -ll -p 9000 -e wc -c & exec nc -ll -p 7000 -e cat';
    podmanHere('import', '--change', `CMD ["sh", "-c", "${services}"]`, tar, TEST_ECHO_IMAGE);
    symlinkSync('/tmp', join(root, '.berth'));
    execFileSync('tar', ['-C', root, '-cf', tar, '.']);
    podmanHere('import', '--change', 'CMD ["sh"]', tar, TEST_LINKED_IMAGE);
    rmSync(tar, { force: true });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

async function answers(socket: string): Promise<boolean> {
  const { request } = await import('node:http');
  return new Promise((resolve) => {
    const req = request({ socketPath: socket, path: '/_ping' }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.end();
  });
}

/** Starts a Podman service on a socket of its own; resolves with its address, or why there is none. */
export async function startPodman(): Promise<{ engine: string } | { missing: string }> {
  if (!which('podman') || !existsSync(BUSYBOX)) {
    return { missing: 'no container engine: install podman, runc and busybox-static (.ci/run does), or set BERTH_TEST_ENGINE' };
  }
  buildImages();
  dir = mkdtempSync(join(tmpdir(), 'berth-podman-'));
  const socket = join(dir, 'podman.sock');
  service = await serve(socket, dir);
  return service ? { engine: `unix://${socket}` } : { missing: 'the Podman service did not answer on its socket' };
}

/**
 * A Podman service on `socket`, in the folder `cwd` (conmon leaves an empty `oom` file in its
 * working folder when a command is killed for memory, which must not land in the checkout), once
 * it answers; undefined when it does not.
 */
async function serve(socket: string, cwd: string): Promise<ChildProcess | undefined> {
  const child = spawn('podman', [...PODMAN_FLAGS, 'system', 'service', '--time=0', `unix://${socket}`], { stdio: 'ignore', cwd });
  // The service makes its socket a moment after it starts.
  const up = await poll('the Podman service to answer', async () => ((await answers(socket)) ? true : undefined), {
    timeout: 10_000,
  }).catch(() => false);
  if (up) return child;
  child.kill();
  return undefined;
}

/**
 * A suite's own Podman service on the tests' storage (the same images and containers), in `dir`,
 * which the suite stops and starts again: an engine that goes away and comes back. Containers run
 * on while it is stopped (conmon keeps them).
 */
export async function ownPodman(dir: string): Promise<{ engine: string; stop: () => Promise<void>; start: () => Promise<void> }> {
  const socket = join(dir, 'podman.sock');
  let child: ChildProcess | undefined;
  const start = async () => {
    if (child) return;
    child = await serve(socket, dir);
    if (!child) throw new Error(`the Podman service did not answer on ${socket}`);
  };
  const stop = async () => {
    const running = child;
    child = undefined;
    if (!running || running.exitCode !== null) return;
    await new Promise((resolve) => {
      running.once('exit', resolve);
      running.kill();
    });
  };
  await start();
  return { engine: `unix://${socket}`, stop, start };
}

/**
 * A benchmark's engine: BENCH_ENGINE (the test images built for it), else a Podman service of its
 * own (`pid`: that service's process). `stop` removes the Berth containers made since (Berth's
 * containers outlive it by design, its next start takes them back; a benchmark's Berth goes with
 * its data, and what it left would share the machine with every later run), then ends what was started.
 */
export async function benchEngine(): Promise<{ engine: string; pid?: number; stop: () => Promise<void> }> {
  let engine = process.env.BENCH_ENGINE;
  let pid: number | undefined;
  let end: () => void = () => undefined;
  if (engine) buildImages();
  else {
    const started = await startPodman();
    if (!('engine' in started)) throw new Error(started.missing);
    engine = started.engine;
    pid = service?.pid;
    end = stopPodman;
  }
  const containers = await Engine.open(engine);
  const made = async () => (await containers.list({})).filter((c) => 'berth.owner' in c.labels).map((c) => c.id);
  const before = new Set(await made());
  return {
    engine,
    pid,
    async stop() {
      for (const id of await made()) if (!before.has(id)) await containers.remove(id);
      end();
    },
  };
}

/** Stops the service startPodman started. */
export function stopPodman(): void {
  service?.kill();
  if (dir) rmSync(dir, { recursive: true, force: true });
}

export default async function setup(project: TestProject): Promise<() => void> {
  let engine = process.env.BERTH_TEST_ENGINE ?? '';
  let missing = '';
  if (!engine) {
    const started = await startPodman();
    if ('engine' in started) engine = started.engine;
    else missing = started.missing;
  }
  project.provide('engine', engine);
  project.provide('engineMissing', missing);
  return () => {
    // Whatever a failed suite left behind: containers of the test images. BERTH_TEST_KEEP_CONTAINERS
    // leaves them to a run of other suites going on at the same time (theirs would go too).
    if (which('podman') && !process.env.BERTH_TEST_KEEP_CONTAINERS) {
      for (const image of [TEST_IMAGE, TEST_USER_IMAGE, TEST_HOG_IMAGE, TEST_ECHO_IMAGE, TEST_LINKED_IMAGE]) {
        const ids = podmanHere('ps', '-aq', '--filter', `ancestor=${image}`).split('\n').filter(Boolean);
        if (ids.length) podmanHere('rm', '-f', ...ids);
      }
    }
    stopPodman();
  };
}
