// A build that leaves FIFOs in its shares (docs/environments.md, "Shares"): the built-in node (in
// the server's own process) never opens them. Syncing the out share to a sandbox names the FIFO as
// skipped and sends the rest, saving the snapshot leaves it out, and the server answers everyone
// meanwhile. Each FIFO has a writer waiting on it: were it ever opened for reading (the server's
// thread stuck in open() until a writer comes) that writer would get through and end.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { openRelay } from '../src/agent/sandbox-agent';
import { duplexPair, receiveFolder, type SyncStats } from '../src/dataplane/folder-sync';
import { bridge } from '../src/dataplane/ws-bridge';
import { createOrganization } from '../src/modules/organizations/service';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';

/** A FIFO at `path` with a writer waiting for a reader; `opened()` says whether one came. */
function plantFifo(path: string): { opened(): boolean; remove(): void } {
  const made = spawnSync('mkfifo', [path], { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`mkfifo: ${made.stderr}`);
  const writer: ChildProcess = spawn('sh', ['-c', 'exec 3>"$0"', path], { stdio: 'ignore' });
  let ended = false;
  writer.once('exit', () => (ended = true));
  return { opened: () => ended, remove: () => void writer.kill() };
}

describeBackends('special files in shares', (backend) => {
  let s: TestServer;
  let local: string;
  const admin = client(() => s.url, BOOTSTRAP);
  let credential: string;
  let them: ReturnType<typeof client>;
  const fifos: ReturnType<typeof plantFifo>[] = [];
  const share = (id: string, name: string) => join(s.dataDir, 'workspaces', id, 'workspace', name);

  /** One run of the scheduler with the clock a second further, while others are served: the health check, and another organization. */
  async function step() {
    s.clock.advance(1000);
    const [, health, theirs] = await Promise.all([s.app.deps.background.tick(), fetch(`${s.url}/healthz`), them.get('/v1/environments')]);
    expect([health.status, theirs.status]).toEqual([200, 200]);
  }

  beforeAll(async () => {
    s = await startServer(backend);
    local = await mkdtemp(join(tmpdir(), 'berth-special-'));
    const mine = await admin.post('/v1/sandboxes', { name: 'mine' });
    credential = (await client(() => s.url).post('/v1/sandboxes/join', { key: mine.body.key })).body.credential;
    const other = await createOrganization(s.app.deps.prisma, 'fifo-other', 'boss@other.example');
    them = client(() => s.url, other.secret);
  });
  afterAll(async () => {
    for (const fifo of fifos) fifo.remove();
    await s?.stop();
    await rm(local, { recursive: true, force: true });
  });

  it('syncs the out share without its FIFO, which it names, and saves the snapshot without it', async () => {
    const created = await admin.post('/v1/environments', { template: 'default', sandbox: 'mine', snapshot: 'fifos' });
    expect(created.status).toBe(202);
    const id: string = created.body.environment.id;
    await untilState(s, BOOTSTRAP, id, 'ready');
    await writeFile(join(share(id, 'out'), 'result.txt'), 'built');
    fifos.push(plantFifo(join(share(id, 'out'), 'pipe')));
    await writeFile(join(share(id, 'src'), 'main.c'), 'int main;');
    fifos.push(plantFifo(join(share(id, 'src'), 'pipe')));

    // The sandbox's side of the out share's sync, as `berth agent` runs it.
    const ws = await openRelay(s.url, credential, { environment: id, kind: 'share', share: 'out' });
    const [near, far] = duplexPair();
    const ended = bridge(ws, near);
    const skipped: string[] = [];
    const batch = new Promise<SyncStats>((resolve, reject) => {
      receiveFolder(far, { root: local, onBatch: resolve, onSkipped: (path, kind) => skipped.push(`${path}: ${kind}`) }).catch(reject);
    });
    const [health, theirs, stats] = await Promise.all([fetch(`${s.url}/healthz`), them.get('/v1/environments'), batch]);
    expect([health.status, theirs.status]).toEqual([200, 200]);
    expect(stats).toMatchObject({ files: 1, skipped: 1 });
    expect(skipped).toEqual(['pipe: FIFO']);
    expect(await readdir(local)).toEqual(['result.txt']);
    ws.close();
    await ended;

    // Ending it saves the shares: the FIFO is left out.
    expect((await admin.del(`/v1/environments/${id}`)).status).toBe(200);
    await untilState(s, BOOTSTRAP, id, 'stopped', { between: step });
    const restored = await admin.post('/v1/environments', { template: 'default', restore: ['fifos'] });
    const back = restored.body.environment.id;
    await untilState(s, BOOTSTRAP, back, 'ready', { between: step });
    expect(await readdir(share(back, 'src'))).toEqual(['main.c']);
    expect(await readdir(share(back, 'out'))).toEqual(['result.txt']);
    for (const fifo of fifos) expect(fifo.opened()).toBe(false);
  });
});
