// The organization's command line (`berth sandbox|node|webhook|key|quota …`, `berth completion`)
// run as users run it: real processes, each user with a HOME of their own where `berth login` kept
// their credential (an admin, a member, another organization's admin), against one Berth started by
// the suite. Every --json answer is checked against what the API answers.
import { execFile, execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createOrganization } from '../src/modules/organizations/service';
import { type Run, runBerth, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';

const root = new URL('..', import.meta.url).pathname;
const run = promisify(execFile);

/** Whether zsh is installed: its completion is tried only then. */
const hasZsh = (() => {
  try {
    execFileSync('zsh', ['-fc', 'true']);
    return true;
  } catch {
    return false;
  }
})();

const TEMPLATES = {
  pools: [
    { name: 'default', hotNodes: 2, maxQueued: 10 },
    { name: 'remote', hotNodes: 0, maxQueued: 10 },
  ],
  templates: [
    { name: 'default', pool: 'default', startMs: 10, idle: '30m', hard: '6h', shares: [], services: [] },
    { name: 'nodeless', pool: 'remote', startMs: 10, idle: '30m', hard: '6h', shares: [], services: [] },
  ],
};

/** A webhook endpoint on loopback: answers 500 to its first request and 204 afterwards. */
async function receiver() {
  let got = 0;
  const waiters: { n: number; resolve: () => void }[] = [];
  const server = http.createServer((req, res) => {
    req.resume().on('end', () => {
      res.writeHead(got === 0 ? 500 : 204).end(got === 0 ? 'boom' : '');
      got++;
      for (const w of waiters.filter((w) => got >= w.n)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    /** Resolves once `n` requests arrived (the test's time-out bounds it). */
    received: (n: number) => new Promise<void>((resolve) => (got >= n ? resolve() : waiters.push({ n, resolve }))),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('berth sandbox, node, webhook, key, quota and completion', () => {
  let s: TestServer;
  let dir: string;
  const api = client(() => s.url, BOOTSTRAP);
  let memberApi: ReturnType<typeof client>;
  const homes = { admin: '', member: '', stranger: '' };

  /** `berth args…` as `who`: their own HOME, where `berth login` kept their credential. */
  const berth = (who: keyof typeof homes, ...args: string[]) =>
    runBerth(args, { HOME: homes[who], XDG_CONFIG_HOME: join(homes[who], '.config') });
  const admin = (...args: string[]) => berth('admin', ...args);
  const member = (...args: string[]) => berth('member', ...args);
  const stranger = (...args: string[]) => berth('stranger', ...args);

  /** The --json answer of a command that succeeded. */
  function answer(r: Run): any {
    expect(r).toMatchObject({ code: 0, stderr: '' });
    return JSON.parse(r.stdout);
  }

  /** A command the server refused: exit 1 and its message, one line. */
  const refused = (message: string) => ({ code: 1, stdout: '', stderr: `berth: ${message}\n` });

  /** A usage error: exit 2, what was wrong and the help command to run. */
  function misused(r: Run, what: string | RegExp, command: string) {
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(what);
    expect(r.stderr).toContain(`Run "berth ${command} --help" for its usage.`);
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-cli-admin-'));
    await writeFile(join(dir, 'templates.json'), JSON.stringify(TEMPLATES));
    s = await startServer('pglite', {
      TEMPLATES_FILE: join(dir, 'templates.json'),
      WEBHOOK_ALLOW_PRIVATE: '1',
      WEBHOOK_TIMEOUT_MS: '1000',
    });
    const memberToken: string = (await api.post('/v1/tokens', { email: 'dev@example.com', name: 'laptop' })).body.secret;
    memberApi = client(() => s.url, memberToken);
    const strangerToken = (await createOrganization(s.app.deps.prisma, 'elsewhere', 'eve@elsewhere.test')).secret;
    const tokens = { admin: BOOTSTRAP, member: memberToken, stranger: strangerToken };
    await Promise.all(
      (Object.keys(homes) as (keyof typeof homes)[]).map(async (who) => {
        homes[who] = await mkdtemp(join(dir, `${who}-`));
        expect((await berth(who, 'login', s.url, '--token', tokens[who])).code).toBe(0);
      }),
    );
  });
  afterAll(async () => {
    await s?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('registers a sandbox with the agent line to run, lists it and removes it by name', async () => {
    const [created, createdJson] = await Promise.all([
      admin('sandbox', 'create', 'laptop'),
      admin('sandbox', 'create', 'ci-box', '--json'),
    ]);
    expect(created).toMatchObject({ code: 0, stderr: '' });
    const [, id, key] = /^registered sandbox laptop \((sb_\S+)\)\njoin key \(single use, valid one hour\): (bjk_\S+)\n/.exec(
      created.stdout,
    )!;
    expect(created.stdout).toContain(`\n  berth agent --server ${s.url} --join ${key} --dir .\n`);
    // The key printed is the sandbox's: its agent's first call spends it.
    expect((await client(() => s.url).post('/v1/sandboxes/join', { key })).status).toBe(201);

    const json = answer(createdJson);
    expect(json).toMatchObject({ sandbox: { name: 'ci-box' }, key: expect.stringMatching(/^bjk_/), config: expect.any(Object) });
    expect((await api.get('/v1/sandboxes/ci-box')).body.sandbox).toEqual(json.sandbox);
    const listed = answer(await admin('sandbox', 'ls', '--json'));
    expect(listed).toEqual((await api.get('/v1/sandboxes')).body);
    expect(listed.sandboxes.map((e: { sandbox: { name: string } }) => e.sandbox.name).sort()).toEqual(['ci-box', 'laptop']);

    // Another organization's sandbox is not there; a member removes only the sandboxes they registered.
    const theirs = await memberApi.del(`/v1/sandboxes/${id}`);
    expect(theirs.status).toBe(403);
    const [elsewhere, notMine, badName, noName] = await Promise.all([
      stranger('sandbox', 'rm', id!),
      member('sandbox', 'rm', 'laptop'),
      admin('sandbox', 'create', 'Not A Label'),
      admin('sandbox', 'create'),
    ]);
    expect(elsewhere).toEqual(refused(`sandbox ${id} not found`));
    expect(notMine).toEqual(refused(theirs.body.error));
    expect(badName).toMatchObject({ code: 1, stderr: expect.stringMatching(/^berth: name: .* must be a DNS label/) });
    misused(noName, "missing required argument 'name'", 'sandbox create');

    expect(await admin('sandbox', 'rm', 'laptop')).toEqual({ code: 0, stdout: `${id} laptop removed\n`, stderr: '' });
    expect((await api.get(`/v1/sandboxes/${id}`)).body.sandbox.removed).toBeTruthy();
    const table = await admin('sandbox', 'ls', '--removed');
    expect(table.stdout.split('\n')[0]!.split(/\s{2,}/)).toEqual(['ID', 'NAME', 'ENVIRONMENTS', 'LAST SEEN', 'STATE', 'REGISTERED BY']);
    expect(table.stdout).toMatch(new RegExp(`^${id} +laptop +0 .* removed \\d+s ago +admin@berth\\.local$`, 'm'));
  });

  it('creates a node credential whose printed line serves the pool, lists nodes and drains one by name', async () => {
    const created = await admin('node', 'create', 'builder-1', '--pool', 'remote');
    expect(created).toMatchObject({ code: 0, stderr: '' });
    expect(created.stdout).toMatch(
      /^created node builder-1 \(nod_\S+\) for pool remote\ntoken \(shown once; it won't be shown again\): bnd_/,
    );
    const line = /^ {2}BERTH_NODE_TOKEN=(bnd_\S+) berth node --server (\S+) --dir (\S+)$/m.exec(created.stdout)!;
    expect(line[2]).toBe(s.url);
    // That line, with a folder of the test's and no container engine: `berth node` serves the pool.
    const agent = spawnNode(['bin/berth.js', 'node', '--server', line[2]!, '--dir', join(dir, 'node'), '--engine', 'none'], {
      BERTH_NODE_TOKEN: line[1]!,
    });
    try {
      await agent.waitFor(/online as builder-1 \(pool remote, 1 slot\)/);
      // As the API lists them, but for when each was last heard from, which moves on.
      const unseen = ({ nodes }: { nodes: Record<string, unknown>[] }) => nodes.map(({ lastSeen: _, ...n }) => n);
      const listed = answer(await admin('node', 'ls', '--json'));
      expect(unseen(listed)).toEqual(unseen((await api.get('/v1/nodes')).body));
      const builder = listed.nodes.find((n: { name: string }) => n.name === 'builder-1');
      expect(builder).toMatchObject({ pool: 'remote', state: 'online' });
      const table = (await admin('node', 'ls')).stdout.split('\n');
      expect(table[0]!.split(/\s{2,}/)).toEqual(['ID', 'NAME', 'POOL', 'STATE', 'SLOTS', 'ALLOCATED', 'LAST SEEN', 'ENVIRONMENTS']);
      expect(table.find((l) => l.includes('builder-1'))).toMatch(/ online {2,}0\/1 {2,}0\/\d+ CPU, 0 B\/[\d.]+ GiB /);

      // Cordon and uncordon by name: admins of its organization only.
      const forbidden = await memberApi.post(`/v1/nodes/${builder.id}/cordon`, {});
      expect(await member('node', 'cordon', 'builder-1')).toEqual(refused(forbidden.body.error));
      expect(await stranger('node', 'cordon', builder.id)).toEqual(refused(`node ${builder.id} not found`));
      expect(await admin('node', 'cordon', 'builder-1')).toEqual({
        code: 0,
        stdout: `${builder.id} builder-1: takes no new leases\n`,
        stderr: '',
      });
      const cordoned = (await api.get('/v1/nodes')).body.nodes.find((n: { id: string }) => n.id === builder.id);
      expect(cordoned.cordoned).toMatchObject({ by: expect.any(String), at: expect.any(String) });
      expect((await admin('node', 'ls')).stdout).toMatch(/builder-1 +remote +online, cordoned /);
      const uncordoned = answer(await admin('node', 'uncordon', 'builder-1', '--json'));
      expect(uncordoned.node).toMatchObject({ id: builder.id, state: 'online' });
      expect(uncordoned.node.cordoned).toBeUndefined();
    } finally {
      await agent.kill();
    }

    const json = answer(await admin('node', 'create', 'builder-2', '--json'));
    expect(json).toMatchObject({ node: { name: 'builder-2', pool: 'default', builtin: false }, secret: expect.stringMatching(/^bnd_/) });
    expect((await api.get('/v1/nodes')).body.nodes).toContainEqual(json.node);

    const forbidden = await memberApi.post('/v1/nodes', { name: 'mine', pool: 'default' });
    expect(forbidden.status).toBe(403);
    const [notAdmin, elsewhere, unknown, builtin] = await Promise.all([
      member('node', 'create', 'mine'),
      stranger('node', 'rm', json.node.id),
      admin('node', 'rm', 'no-such-node'),
      admin('node', 'rm', 'builtin'),
    ]);
    expect(notAdmin).toEqual(refused(forbidden.body.error));
    expect(elsewhere).toEqual(refused(`node ${json.node.id} not found`));
    expect(unknown).toEqual(refused('node no-such-node not found'));
    expect(builtin).toMatchObject({ code: 1, stderr: expect.stringMatching(/^berth: the built-in node is the server's/) });

    const drained = await admin('node', 'rm', 'builder-2');
    expect(drained).toEqual({
      code: 0,
      stdout: `${json.node.id} builder-2 draining: revoked once its live environments have ended\n`,
      stderr: '',
    });
    // Nothing lived on it: it is revoked at once, and gone from the list.
    expect((await api.get('/v1/nodes')).body.nodes.map((n: { id: string }) => n.id)).not.toContain(json.node.id);
  });

  it('adds webhooks, lists and removes them; only admins of their organization', async () => {
    const url = 'http://127.0.0.1:9/hook';
    const added = await admin('webhook', 'add', url, '--event', 'artifact.created', 'environment.created');
    expect(added).toMatchObject({ code: 0, stderr: '' });
    const [, id] =
      /^added webhook (whk_\S+) for artifact\.created, environment\.created\nsigning secret \(shown once; it won't be shown again\): whsec_\S+\n$/.exec(
        added.stdout,
      )!;
    const second = answer(await admin('webhook', 'add', url, '--event', 'project.shredded', '--event', 'snapshot.created', '--json'));
    expect(second).toMatchObject({
      webhook: { url, events: ['project.shredded', 'snapshot.created'] },
      secret: expect.stringMatching(/^whsec_/),
    });
    const [listed, table] = await Promise.all([admin('webhook', 'ls', '--json'), admin('webhook', 'ls')]);
    expect(answer(listed)).toEqual((await api.get('/v1/webhooks')).body);
    expect(answer(listed).webhooks.map((w: { id: string }) => w.id)).toEqual([second.webhook.id, id]);
    expect(table.stdout).toMatch(
      new RegExp(`^${id} +${url} +artifact\\.created,environment\\.created +ok +admin@berth\\.local +\\d+s$`, 'm'),
    );

    // Members are refused what only admins may; another organization's endpoint is not there.
    const forbidden = await memberApi.get('/v1/webhooks');
    expect(forbidden.status).toBe(403);
    const [list, add, deliveriesElsewhere, rmElsewhere, noEvent, badEvent] = await Promise.all([
      member('webhook', 'ls'),
      member('webhook', 'add', url, '--event', 'artifact.created'),
      stranger('webhook', 'deliveries', id!),
      stranger('webhook', 'rm', id!),
      admin('webhook', 'add', url),
      admin('webhook', 'add', url, '--event', 'artifact.made'),
    ]);
    expect(list).toEqual(refused(forbidden.body.error));
    expect(add).toEqual(refused(forbidden.body.error));
    expect(deliveriesElsewhere).toEqual(refused(`webhook ${id} not found`));
    expect(rmElsewhere).toEqual(refused(`webhook ${id} not found`));
    misused(noEvent, "required option '--event <type...>' not specified", 'webhook add');
    misused(badEvent, /argument 'artifact\.made' is invalid\. Allowed choices are environment\.created, /, 'webhook add');

    const [removed, removedJson] = await Promise.all([admin('webhook', 'rm', id!), admin('webhook', 'rm', second.webhook.id, '--json')]);
    expect(removed).toEqual({ code: 0, stdout: `removed webhook ${id}\n`, stderr: '' });
    expect(answer(removedJson)).toEqual({ deleted: second.webhook.id });
    expect((await api.get('/v1/webhooks')).body.webhooks).toEqual([]);
  });

  it("shows a webhook's deliveries with every attempt: its status and error", async () => {
    const r = await receiver();
    try {
      const { webhook } = answer(await admin('webhook', 'add', r.url, '--event', 'artifact.created', '--json'));
      // An artifact: the first attempt fails (500), the retry a backoff later succeeds.
      const upload = await fetch(`${s.url}/v1/artifacts?project=hooks`, {
        method: 'POST',
        headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/octet-stream' },
        body: 'bytes',
      });
      expect(upload.status).toBe(201);
      await r.received(1);
      const deliveries = async () => (await api.get(`/v1/webhooks/${webhook.id}/deliveries`)).body;
      await vi.waitFor(async () => expect((await deliveries()).deliveries[0]?.attempts).toBe(1), { timeout: 30_000, interval: 100 });
      s.clock.advance(5_000);
      await s.app.deps.background.tick();
      await r.received(2);
      await vi.waitFor(async () => expect((await deliveries()).deliveries[0]?.delivered).toBeDefined(), { timeout: 30_000, interval: 100 });

      const [shown, readable] = await Promise.all([
        admin('webhook', 'deliveries', webhook.id, '--json'),
        admin('webhook', 'deliveries', webhook.id),
      ]);
      expect(answer(shown)).toEqual(await deliveries());
      const [delivery] = answer(shown).deliveries;
      expect(readable).toEqual({
        code: 0,
        stdout: [
          `${delivery.id} artifact.created delivered ${delivery.delivered} (2 attempts, created ${delivery.created})`,
          `  #1 ${delivery.history[0].at} 500 HTTP 500: boom`,
          `  #2 ${delivery.history[1].at} 204 ok`,
          '',
        ].join('\n'),
        stderr: '',
      });
      expect((await admin('webhook', 'rm', webhook.id)).code).toBe(0);
    } finally {
      await r.close();
    }
  });

  it('creates an API key that works, lists keys, and revokes one by name so it no longer works', async () => {
    const created = await admin('key', 'create', 'deploy-bot', '--admin');
    expect(created).toMatchObject({ code: 0, stderr: '' });
    const [, id, secret] =
      /^created admin API key deploy-bot \((key_\S+)\)\nsecret \(shown once; it won't be shown again\): (bak_\S+)\n$/.exec(created.stdout)!;
    // The secret acts as an admin: it lists the keys itself.
    const [byKey, ci] = await Promise.all([
      admin('key', 'ls', '--json', '--token', secret!),
      admin('key', 'create', 'ci', '--expires-in', '90d', '--json'),
    ]);
    expect(answer(byKey).keys.map((k: { id: string }) => k.id)).toContain(id);
    expect(answer(ci)).toMatchObject({
      key: { name: 'ci', admin: false, expires: expect.any(String) },
      secret: expect.stringMatching(/^bak_/),
    });
    const [listed, table] = await Promise.all([admin('key', 'ls', '--json'), admin('key', 'ls')]);
    expect(answer(listed)).toEqual((await api.get('/v1/keys')).body);
    expect(
      answer(listed)
        .keys.map((k: { name: string }) => k.name)
        .sort(),
    ).toEqual(['ci', 'deploy-bot']);
    expect(table.stdout).toMatch(new RegExp(`^${id} +deploy-bot +admin +bak_\\S+… +admin@berth\\.local +\\d+s +\\d+s +active$`, 'm'));
    expect(table.stdout).toMatch(/ ci +member +.* active until \d{4}-/);

    const forbidden = await memberApi.post('/v1/keys', { name: 'mine' });
    expect(forbidden.status).toBe(403);
    const [create, list, elsewhere, badExpiry] = await Promise.all([
      member('key', 'create', 'mine'),
      member('key', 'ls'),
      stranger('key', 'revoke', id!),
      admin('key', 'create', 'x', '--expires-in', 'soon'),
    ]);
    expect(create).toEqual(refused(forbidden.body.error));
    expect(list).toEqual(refused((await memberApi.get('/v1/keys')).body.error));
    expect(elsewhere).toEqual(refused(`key ${id} not found`));
    misused(badExpiry, /option '--expires-in <duration>' argument 'soon' is invalid/, 'key create');

    expect(await admin('key', 'revoke', 'deploy-bot')).toEqual({ code: 0, stdout: `${id} deploy-bot revoked\n`, stderr: '' });
    expect((await api.get('/v1/keys')).body.keys.find((k: { id: string }) => k.id === id).revoked).toBeTruthy();
    // Its secret no longer works; its name, no live key's now, is passed on as it is: not found.
    const [after, again] = await Promise.all([admin('env', 'ls', '--token', secret!), admin('key', 'revoke', 'deploy-bot')]);
    expect(after).toEqual(refused((await client(() => s.url, secret).get('/v1/environments')).body.error));
    expect(again).toEqual(refused('key deploy-bot not found'));
  });

  it('sets quotas and lists them; members may read, not set', async () => {
    const set = await admin('quota', 'set', 'default', '--max', '2', '--idle', '10m');
    expect(set).toMatchObject({ code: 0, stderr: '' });
    const { quotas } = (await api.get('/v1/quotas')).body;
    const quota = quotas.find((q: { template: string }) => q.template === 'default');
    expect(quota).toMatchObject({ maxLeases: 2, running: 0 });
    expect(set.stdout).toBe(`default: at most 2 live (0 now), idle ${quota.idle}, hard ${quota.hard}\n`);
    const [all, unreachable] = await Promise.all([
      admin('quota', 'set', '*', '--max', '5', '--hard', '2h', '--json'),
      admin('quota', 'set', 'nodeless', '--max', '4'),
    ]);
    expect(answer(all)).toEqual({ quota: (await api.get('/v1/quotas')).body.quotas.find((q: { template: string }) => q.template === '*') });
    // Above what its pool runs at once: kept, with why it cannot be reached.
    expect(unreachable.code).toBe(0);
    expect(unreachable.stderr).toMatch(/^warning: nodeless: /);

    const [listed, table] = await Promise.all([member('quota', 'ls', '--json'), member('quota', 'ls')]);
    expect(answer(listed)).toEqual((await api.get('/v1/quotas')).body);
    expect(table.stdout.split('\n')[0]!.split(/\s+/)).toEqual(['TEMPLATE', 'RUNNING', 'MAX', 'IDLE', 'HARD']);
    expect(table.stdout).toMatch(new RegExp(`^default +0 +2 +${quota.idle} +${quota.hard}$`, 'm'));
    expect(table.stderr).toMatch(/^warning: nodeless: /m);

    const forbidden = await memberApi.put('/v1/quotas/default', { maxLeases: 1 });
    expect(forbidden.status).toBe(403);
    const [notAdmin, noMax, badMax, badIdle] = await Promise.all([
      member('quota', 'set', 'default', '--max', '1'),
      admin('quota', 'set', 'default'),
      admin('quota', 'set', 'default', '--max', 'lots'),
      admin('quota', 'set', 'default', '--max', '1', '--idle', '10 minutes'),
    ]);
    expect(notAdmin).toEqual(refused(forbidden.body.error));
    expect((await api.get('/v1/quotas')).body.quotas.find((q: { template: string }) => q.template === 'default').maxLeases).toBe(2);
    misused(noMax, "required option '--max <n>' not specified", 'quota set');
    misused(badMax, /argument 'lots' is invalid\. must be a whole number/, 'quota set');
    misused(badIdle, /--idle <duration>' argument '10 minutes' is invalid/, 'quota set');
  });

  describe('completion', () => {
    /** What bash completes after each of these command lines (the last word is the one being completed). */
    async function bashCompletes(...lines: string[][]): Promise<string[]> {
      const cases = lines.map(
        (words) => `COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _berth; echo "\${COMPREPLY[*]}"`,
      );
      const { stdout } = await run('bash', ['-c', `source <(${process.execPath} bin/berth.js completion bash)\n${cases.join('\n')}`], {
        cwd: root,
      });
      return stdout.split('\n').slice(0, lines.length);
    }

    it('completes the commands, subcommands and options of the program in bash', async () => {
      // Every command the help lists, as the program has them now.
      const help = (await admin('--help')).stdout;
      const commands = help
        .slice(help.indexOf('Commands:'))
        .split('\n')
        .slice(1)
        .map((l) => l.trim().split(/\s/)[0])
        .filter(Boolean);
      expect(commands).toContain('webhook');
      const [top, sandbox, node, quota, events, value, shells] = await bashCompletes(
        ['berth', ''],
        ['berth', 'sandbox', ''],
        ['berth', 'node', 'c'],
        ['berth', 'quota', 'set', 'default', '--'],
        ['berth', 'webhook', 'add', 'http://x', '--event', ''],
        ['berth', 'env', 'create', '--template', ''],
        ['berth', 'completion', ''],
      );
      expect(top!.split(' ')).toEqual(commands);
      expect(sandbox).toBe('create ls rm help');
      expect(node).toBe('create cordon');
      expect(quota).toBe('--max --idle --hard --json --server --token --help');
      expect(events).toBe(
        'environment.created environment.state artifact.created artifact.deleted snapshot.created project.shredded template.changed',
      );
      // An option's value is not a subcommand: bash offers file names (complete -o default).
      expect(value).toBe('');
      expect(shells).toBe('bash zsh');
      misused(
        await admin('completion', 'fish'),
        /value 'fish' is invalid for argument 'shell'\. Allowed choices are bash, zsh\./,
        'completion',
      );
    });

    it.runIf(hasZsh)('completes in zsh, with descriptions', async () => {
      // compinit's completers stand in for what the line editor would show.
      const script = `autoload -U compinit && compinit -u
source <(${process.execPath} bin/berth.js completion zsh)
print -r -- "defined: \${_comps[berth]}"
_describe() { shift 3; print -r -- "\${(Pj:|:)1}" }
compadd() { shift; print -r -- "\${(Pj:|:)1}" }
_files() { print -r -- files }
try() { words=("$@"); CURRENT=$#words; _berth }
try berth key ''
try berth webhook add u --event ''
try berth env get ''`;
      const { stdout } = await run('zsh', ['-f', '-c', script], { cwd: root });
      const [defined, key, events, leaf] = stdout.trim().split('\n');
      expect(defined).toBe('defined: _berth');
      expect(key!.split('|')).toEqual([
        'create:create an API key; prints its secret once',
        'ls:list the API keys, revoked ones included',
        'revoke:revoke an API key (by id, or the name of a live one); it stops working at once',
        'help:display help for command',
      ]);
      expect(events).toBe('environment.created|environment.state|artifact.created|artifact.deleted|snapshot.created|project.shredded');
      expect(leaf).toBe('files');
    });
  });
});
