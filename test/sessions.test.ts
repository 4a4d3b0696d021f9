// Interactive commands (docs/agents.md, "Sessions"): the WebSocket session on an environment's exec
// path and `berth exec` / `berth shell` over it, on both kinds of node, with a real engine.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import WebSocket from 'ws';
import { loadConfig } from '../src/app/config';
import { createOrganization } from '../src/modules/organizations/service';
import { describeContainers, engine, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';
import { recorded } from './helpers/states';
import { startTcpGate } from './helpers/tcp-gate';

const root = new URL('..', import.meta.url).pathname;

/** A port nothing listens on now. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** One session as a test drives it: what came out, and how it ended. */
interface Session {
  ws: WebSocket;
  stdout(): string;
  stderr(): string;
  /** Resolves once stdout matches `re`. */
  waitFor(re: RegExp): Promise<void>;
  /** The exit message (or null when the socket closed without one), and the close code. */
  ended: Promise<{ exit: Record<string, any> | null; code: number; reason: string }>;
  send(text: string): void;
  /** The session's id, from its first message. */
  id: Promise<string>;
  /** Its text messages so far. */
  messages: Record<string, any>[];
}

for (const kind of ['built-in pool', 'berth node'] as const) {
  describeContainers(`interactive sessions on the ${kind}`, () => {
    let s: TestServer;
    let dir: string;
    let node: Proc | undefined;
    let envId: string;
    const admin = client(() => s.url, BOOTSTRAP);

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'berth-sessions-'));
      const pool = kind === 'berth node' ? 'remote' : 'default';
      const templates = await writeCatalog(
        dir,
        [
          { name: 'box', pool, image: TEST_IMAGE, workdir: '/tmp' },
          { name: 'ash', pool, image: TEST_IMAGE, shell: '/bin/ash' },
          { name: 'files', pool },
        ],
        [{ name: 'remote', hotNodes: 0, maxQueued: 100 }],
      );
      s = await startServer('pglite', {
        TEMPLATES_FILE: templates,
        DOCKER_HOST: kind === 'built-in pool' ? engine() : 'none',
        NODE_HEARTBEAT_MS: '250',
        // Long enough to attach again at once, short enough to see a dropped session killed.
        SESSION_GRACE: '4s',
        // A restart keeps the address, so the node finds the server again.
        PORT: String(await freePort()),
      });
      if (kind === 'berth node') {
        const created = await admin.post('/v1/nodes', { name: 'builder', pool: 'remote' });
        node = spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'node'), '--slots', '8', '--engine', engine()], {
          BERTH_NODE_TOKEN: created.body.secret,
        });
        await node.waitFor(/online as builder/);
      }
      envId = (await lease('box')).id;
    }, 120_000);
    afterAll(async () => {
      const live = await admin.get('/v1/environments?state=live');
      for (const env of live.body.environments ?? []) await admin.del(`/v1/environments/${env.id}`);
      for (let i = 0; i < 30 && (await admin.get('/v1/environments?state=live')).body.environments?.length; i++) {
        await s.app.deps.background.tick();
      }
      await node?.kill();
      await s?.stop();
      await rm(dir, { recursive: true, force: true });
    });

    async function lease(template: string, token = BOOTSTRAP): Promise<Record<string, any>> {
      const made = await client(() => s.url, token).post('/v1/environments', { template });
      expect(made.status, JSON.stringify(made.body)).toBe(202);
      return untilState(s, BOOTSTRAP, made.body.environment.id, 'ready');
    }

    const sessionUrl = (id: string, query = '', session?: string) =>
      `${s.url.replace(/^http/, 'ws')}/v1/environments/${id}/${session ? `sessions/${session}` : 'exec'}${query}`;

    function open(
      id: string,
      query = '',
      options: { token?: string; protocols?: string[]; headers?: Record<string, string>; session?: string } = {},
    ): Session {
      const headers = options.protocols
        ? (options.headers ?? {})
        : { authorization: `Bearer ${options.token ?? BOOTSTRAP}`, ...options.headers };
      const ws = new WebSocket(sessionUrl(id, query, options.session), options.protocols ?? ['berth.exec.v1'], { headers });
      let out = '';
      let err = '';
      let exit: Record<string, any> | null = null;
      let named: (id: string) => void = () => undefined;
      const sessionId = new Promise<string>((resolve) => {
        named = resolve;
      });
      if (options.session) named(options.session);
      const waiters: { re: RegExp; resolve: () => void }[] = [];
      const messages: Record<string, any>[] = [];
      ws.on('message', (data: Buffer, binary: boolean) => {
        if (!binary) {
          const message = JSON.parse(data.toString());
          messages.push(message);
          if (message.type === 'exit') exit = message;
          if (message.type === 'session') named(message.session);
          return;
        }
        if (data[0] === 2) err += data.subarray(1).toString();
        else out += data.subarray(1).toString();
        for (const w of [...waiters]) {
          if (w.re.test(out)) {
            waiters.splice(waiters.indexOf(w), 1);
            w.resolve();
          }
        }
      });
      const ended = new Promise<{ exit: Record<string, any> | null; code: number; reason: string }>((resolve, reject) => {
        ws.on('close', (code, reason) => resolve({ exit, code, reason: reason.toString() }));
        ws.on('unexpected-response', (_req, res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d));
          res.on('end', () => reject(Object.assign(new Error(body), { status: res.statusCode, body: JSON.parse(body) })));
        });
        ws.on('error', () => undefined);
      });
      return {
        ws,
        stdout: () => out,
        stderr: () => err,
        waitFor: (re) =>
          new Promise((resolve, reject) => {
            if (re.test(out)) return resolve();
            waiters.push({ re, resolve });
            void ended.then(() => reject(new Error(`the session ended before ${re}: ${out}`)), reject);
          }),
        ended,
        send: (text) => ws.send(Buffer.from(text), { binary: true }),
        id: sessionId,
        messages,
      };
    }

    /** Attaches to a running session again. */
    const attach = (id: string, session: string, token = BOOTSTRAP) => open(id, '', { session, token });

    const listed = async (id: string) => (await admin.get(`/v1/environments/${id}/sessions`)).body.sessions as Record<string, any>[];

    /** A command line as the query of a new session. */
    const commandQuery = (script: string, tty = false) =>
      `?${new URLSearchParams([['command', 'sh'], ['command', '-c'], ['command', script], ...(tty ? [['tty', '1']] : [])])}`;

    /** The refusal of an upgrade: its status and `{error, code}`. */
    async function refused(session: Session): Promise<{ status: number; body: { error: string; code: string } }> {
      try {
        await session.ended;
      } catch (error) {
        return error as { status: number; body: { error: string; code: string } };
      }
      throw new Error('the upgrade was not refused');
    }

    /** `berth …` as a real process with `input` on its stdin. */
    function berth(
      args: string[],
      input: Buffer | string,
      token = BOOTSTRAP,
    ): Promise<{ code: number | null; stdout: string; stderr: string }> {
      const child = spawn(process.execPath, ['bin/berth.js', ...args], {
        cwd: root,
        env: { ...process.env, BERTH_URL: s.url, BERTH_TOKEN: token },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      child.stdin!.end(input);
      return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })));
    }

    it('runs everything after the environment as the command, options of its own included', async () => {
      expect(await berth(['exec', envId, 'echo', '-n', 'no newline'], '')).toMatchObject({ code: 0, stdout: 'no newline' });
      expect(await berth(['exec', envId, '--', 'sh', '-c', 'echo "$0"', '-x'], '')).toMatchObject({ code: 0, stdout: '-x\n' });
      // An option of berth's written after the environment: what to write instead, as a usage error.
      const misplaced = await berth(['exec', envId, '-t', 'sh'], '');
      expect(misplaced.code).toBe(2);
      expect(misplaced.stderr).toContain('options go before the environment (berth exec -t ENV COMMAND…)');
      expect(await berth(['exec', envId, '--'], '')).toMatchObject({ code: 2, stderr: expect.stringContaining('the command is missing') });
    });

    it('passes piped input to `berth exec`, its end included, and exits with the exit code', async () => {
      const cat = await berth(['exec', envId, '--', 'sh', '-c', 'cat; echo " [end]"; exit 4'], 'hi from the pipe');
      expect(cat).toMatchObject({ code: 4, stdout: 'hi from the pipe [end]\n' });
      // A few MiB through a command that takes its time: every byte, in order (flow control both ways).
      const big = Buffer.alloc(3 * 1024 * 1024 + 7, 'abcdefghij');
      const counted = await berth(['exec', envId, '--', 'sh', '-c', 'md5sum | cut -c1-32'], big);
      const { createHash } = await import('node:crypto');
      expect(counted.stdout.trim()).toBe(createHash('md5').update(big).digest('hex'));
      expect(counted.code).toBe(0);
      const execs = (await admin.get(`/v1/environments/${envId}/execs`)).body.execs;
      expect(execs.map((e: { command: string }) => e.command)).toContain('sh -c \'cat; echo " [end]"; exit 4\'');
    });

    /**
     * `berth shell` on a terminal of its own, as a person's would be: util-linux's script(1) (its
     * output adds a \r to each line end: this side's raw mode keeps output processing, as Node's does).
     */
    function shell(url: string) {
      const line = `stty cols 90 rows 33 2>/dev/null; exec ${JSON.stringify(process.execPath)} bin/berth.js shell ${envId}`;
      const child = spawn('script', ['-qefc', line, '/dev/null'], {
        cwd: root,
        env: { ...process.env, BERTH_URL: url, BERTH_TOKEN: BOOTSTRAP },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let out = '';
      const waiters: { re: RegExp; resolve: () => void }[] = [];
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        for (const w of [...waiters]) if (w.re.test(out) && waiters.splice(waiters.indexOf(w), 1)) w.resolve();
      });
      return {
        child,
        output: () => out,
        /** Resolves once the terminal's output matches `re`. */
        seen: (re: RegExp) => new Promise<void>((resolve) => (re.test(out) ? resolve() : waiters.push({ re, resolve }))),
        closed: new Promise<number | null>((resolve) => child.once('close', resolve)),
      };
    }

    it.runIf(existsSync('/usr/bin/script'))('berth shell: raw keys, Ctrl-C to the command, the exit code', async () => {
      const { child, seen, closed } = shell(s.url);
      await seen(/[$#] /);
      child.stdin!.write('stty size; echo "in=$0"\r');
      await seen(/33 90\r+\nin=\/bin\/sh/);
      child.stdin!.write("sh -c 'echo sleep''ing; sleep 300'\r");
      await seen(/\nsleeping\r+\n/);
      // Raw mode here: Ctrl-C is a byte for the environment's terminal, which interrupts the sleep only.
      child.stdin!.write('\x03');
      child.stdin!.write('echo still-here\r');
      await seen(/\nstill-here\r+\n/);
      child.stdin!.write('exit 7\r');
      expect(await closed).toBe(7);
    });

    it.runIf(existsSync('/usr/bin/script'))(
      'berth shell attaches again by itself after a drop, showing nothing twice; berth session ls and attach',
      async () => {
        const gate = await startTcpGate(s.url);
        try {
          const { child, seen, closed, output } = shell(gate.url);
          await seen(/[$#] /);
          child.stdin!.write('echo first-$((1+1))\r');
          await seen(/first-2/);
          gate.drop();
          await seen(/attaching to session ses_\w+ again/);
          const id = /attaching to session (ses_\w+) again/.exec(output())![1]!;
          child.stdin!.write('echo second-$((2+2))\r');
          await seen(/second-4/);
          // The replay after the drop held the first command's output: it was not shown again.
          expect(output().match(/first-2/g)).toHaveLength(1);
          const ls = await berth(['session', 'ls', envId], '');
          expect(ls.code).toBe(0);
          expect(ls.stdout).toMatch(new RegExp(`${id}\\s+/bin/sh\\s+yes\\s+1`));
          child.stdin!.write('exit 6\r');
          expect(await closed).toBe(6);
        } finally {
          await gate.close();
        }
        // Another's session, attached from the command line with piped input.
        const session = open(envId, commandQuery('echo hello-attach; read x; echo "got $x"'));
        await session.waitFor(/hello-attach/);
        const id = await session.id;
        session.ws.terminate();
        expect(await berth(['session', 'attach', envId, id], 'piped\n')).toMatchObject({ code: 0, stdout: 'hello-attach\ngot piped\n' });
        expect(await berth(['session', 'attach', envId, id], '')).toMatchObject({
          code: 1,
          stderr: expect.stringMatching(/not_found|ended|never was/),
        });
      },
    );

    it('keeps the output of a quick command that takes no input', async () => {
      // Input that reaches the command as it ends (Podman's attach race): the output still comes.
      for (let i = 0; i < 5; i++) {
        expect(await berth(['exec', envId, '--', 'sh', '-c', 'pwd; exit 7'], 'unread input')).toMatchObject({ code: 7, stdout: '/tmp\n' });
      }
    });

    it("opens the template's shell on a terminal of the asked size, passes resizes, and records the exit", async () => {
      const ash = await lease('ash');
      const shell = open(ash.id, '?tty=1&rows=30&cols=100');
      // (busybox ash asks the terminal where its cursor is after the prompt: ESC [6n.)
      await shell.waitFor(/[$#] /);
      shell.send('stty size; tty; echo "shell=$0"\r');
      await shell.waitFor(/30 100\r\n\/dev\/pts\/\d+\r\nshell=\/bin\/ash/);
      shell.ws.send(JSON.stringify({ type: 'resize', rows: 40, cols: 120 }));
      shell.send('stty size\r');
      await shell.waitFor(/40 120/);
      // Ctrl-C reaches the command through its terminal: the shell lives on.
      shell.send("sh -c 'echo sleep''ing; sleep 300'\r");
      await shell.waitFor(/\r\nsleeping\r\n/);
      shell.send('\x03');
      shell.send('echo after-interrupt\r');
      await shell.waitFor(/\r\nafter-interrupt\r\n/);
      shell.send('exit 3\r');
      const { exit, code } = await shell.ended;
      expect(code).toBe(1000);
      expect(exit).toMatchObject({ type: 'exit', exitCode: 3, exec: { lease: ash.id, command: '/bin/ash', exitCode: 3 } });
      const execs = (await admin.get(`/v1/environments/${ash.id}/execs`)).body.execs;
      expect(execs[0]).toMatchObject({ command: '/bin/ash', exitCode: 3 });
    });

    it('kills a dropped session nobody attaches to again once its grace ran out: its whole command, recorded with 137', async () => {
      const session = open(envId, commandQuery('sleep 301 & sleep 302 & echo started; wait'));
      await session.waitFor(/started/);
      const id = await session.id;
      session.ws.terminate();
      // Meanwhile it runs on, listed with no one attached.
      await expect.poll(async () => (await listed(envId)).find((x) => x.id === id)?.attached).toBe(0);
      const ps = async () => {
        const res = await fetch(`${s.url}/v1/environments/${envId}/exec`, {
          method: 'POST',
          headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json' },
          body: JSON.stringify({ command: ['ps', '-o', 'args'] }),
        });
        return res.text();
      };
      const found = await recorded(s.url, BOOTSTRAP, envId, 'sleep 301');
      expect(found.exitCode).toBe(137);
      expect(await ps()).not.toMatch(/sleep 30[12]/);
      expect((await listed(envId)).map((x) => x.id)).not.toContain(id);
    });

    it('ends a session at once when its caller closes it (1000), as a finished conversation', async () => {
      const session = open(envId, commandQuery('echo started; sleep 304'));
      await session.waitFor(/started/);
      session.ws.close(1000);
      expect((await recorded(s.url, BOOTSTRAP, envId, 'sleep 304')).exitCode).toBe(137);
    });

    it('a dropped session runs on: listed, attached to again with its scrollback, by several connections at once', async () => {
      // 100 KB of output first: more than a screen, all of it within the scrollback.
      const script = 'head -c 100000 /dev/zero | tr "\\0" x; echo; echo ready; read a; echo "got $a"; read b; echo "and $b"; exit 5';
      const first = open(envId, commandQuery(script));
      await first.waitFor(/ready/);
      const id = await first.id;
      expect(id).toMatch(/^ses_/);
      const [row] = (await listed(envId)).filter((x) => x.id === id);
      expect(row).toMatchObject({ id, command: `sh -c '${script.replace(/'/g, `'\\''`)}'`, tty: false, attached: 1 });
      expect(Object.keys(row!).sort()).toEqual(['attached', 'command', 'created', 'id', 'lastActivity', 'tty']);
      first.ws.terminate();
      const again = attach(envId, id);
      await again.waitFor(/ready\n/);
      // The whole output so far, replayed first, from its first byte.
      expect(again.stdout()).toBe(`${'x'.repeat(100000)}\nready\n`);
      expect(again.messages[0]).toEqual({ type: 'session', session: id, offset: 0 });
      again.send('one\n');
      await again.waitFor(/got one/);
      // A second connection at once: the replay, then the same live output as the first.
      const third = attach(envId, id);
      await third.waitFor(/got one\n/);
      await expect.poll(async () => (await listed(envId)).find((x) => x.id === id)?.attached).toBe(2);
      third.send('two\n');
      await Promise.all([again.waitFor(/and two/), third.waitFor(/and two/)]);
      for (const view of [again, third]) {
        const { exit, code } = await view.ended;
        expect(code).toBe(1000);
        expect(exit).toMatchObject({ type: 'exit', exitCode: 5, exec: { lease: envId, exitCode: 5 } });
      }
      const execs = (await admin.get(`/v1/environments/${envId}/execs`)).body.execs;
      expect(execs.filter((e: { command: string }) => e.command.includes('got $a'))).toHaveLength(1);
      expect((await listed(envId)).map((x) => x.id)).not.toContain(id);
      // An ended session cannot be attached to.
      expect(await refused(attach(envId, id))).toMatchObject({ status: 404, body: { code: 'not_found' } });
    });

    it("keeps the last MiB of a session's output for the next connection, and says where it starts", async () => {
      const total = 1536 * 1024;
      const session = open(envId, commandQuery(`head -c ${total} /dev/zero | tr "\\0" y; echo; echo done; sleep 307`));
      await session.waitFor(/done\n/);
      const id = await session.id;
      session.ws.terminate();
      const again = attach(envId, id);
      await again.waitFor(/done\n/);
      const whole = total + 'y\ndone\n'.length - 1;
      expect(again.stdout().length).toBe(1024 * 1024);
      expect(again.messages[0]).toEqual({ type: 'session', session: id, offset: whole - 1024 * 1024 });
      again.ws.close(1000);
      expect((await recorded(s.url, BOOTSTRAP, envId, 'sleep 307')).exitCode).toBe(137);
    });

    it('a terminal session attached again shows its screen and keeps its terminal', async () => {
      const shell = open(envId, '?tty=1&rows=24&cols=80');
      await shell.waitFor(/[$#] /);
      shell.send('echo marker-$((6*7))\r');
      await shell.waitFor(/marker-42/);
      const id = await shell.id;
      shell.ws.terminate();
      const again = attach(envId, id);
      await again.waitFor(/marker-42/);
      again.send('tty; exit 9\r');
      const { exit } = await again.ended;
      expect(again.stdout()).toMatch(/\/dev\/pts\/\d+/);
      expect(exit).toMatchObject({ exitCode: 9 });
    });

    it('holds at most 32 sessions in an environment, and SESSION_GRACE takes a duration up to 24h or 0', async () => {
      const box = await lease('box');
      // Three principals (each may hold 16 connections): the environment's bound is what refuses.
      const keys = await Promise.all(
        ['a', 'b'].map(async (k) => (await admin.post('/v1/keys', { name: `sessions-${k}-${kind.length}` })).body.secret as string),
      );
      const tokens = [BOOTSTRAP, keys[0]!, keys[1]!];
      const sessions: Session[] = [];
      for (let i = 0; i < 32; i++) sessions.push(open(box.id, commandQuery('echo up; sleep 308'), { token: tokens[Math.floor(i / 15)] }));
      await Promise.all(sessions.map((x) => x.waitFor(/up/)));
      const refusal = await refused(open(box.id, commandQuery('true'), { token: keys[1] }));
      expect(refusal).toMatchObject({ status: 429, body: { code: 'too_many_sessions' } });
      expect(refusal.body.error).toMatch(/has 32 sessions running/);
      sessions[0]!.ws.close(1000);
      await expect.poll(async () => (await listed(box.id)).length).toBe(31);
      const room = open(box.id, commandQuery('echo room'), { token: keys[1] });
      expect((await room.ended).exit).toMatchObject({ exitCode: 0 });
      for (const x of sessions.slice(1)) x.ws.close(1000);
      expect(loadConfig({}).sessionGraceMs).toBe(5 * 60_000);
      expect(loadConfig({ SESSION_GRACE: '0' }).sessionGraceMs).toBe(0);
      expect(loadConfig({ SESSION_GRACE: '90s' }).sessionGraceMs).toBe(90_000);
      expect(() => loadConfig({ SESSION_GRACE: '25h' })).toThrow(/SESSION_GRACE must be at most 24h/);
      expect(() => loadConfig({ SESSION_GRACE: 'soon' })).toThrow(/SESSION_GRACE/);
      await admin.del(`/v1/environments/${box.id}`);
    });

    it('DELETE ends a session (137); strangers, other organizations and colleagues reach none', async () => {
      const session = open(envId, commandQuery('echo started; sleep 305'));
      await session.waitFor(/started/);
      const id = await session.id;
      const other = await createOrganization(s.app.deps.prisma, `sessions-other-${kind.length}`, 'mallory@example.com');
      const bob = (await admin.post('/v1/tokens', { email: `carol-${kind.length}@example.com`, name: 'cli' })).body.secret as string;
      const anonymous = client(() => s.url);
      expect((await anonymous.get(`/v1/environments/${envId}/sessions`)).status).toBe(401);
      expect((await anonymous.del(`/v1/environments/${envId}/sessions/${id}`)).status).toBe(401);
      for (const [token, status] of [
        [other.secret, 404],
        [bob, 403],
      ] as const) {
        const them = client(() => s.url, token);
        expect((await them.get(`/v1/environments/${envId}/sessions`)).status).toBe(status);
        expect((await them.del(`/v1/environments/${envId}/sessions/${id}`)).status).toBe(status);
        expect((await refused(attach(envId, id, token))).status).toBe(status);
      }
      expect((await admin.del(`/v1/environments/${envId}/sessions/ses_nonesuch`)).status).toBe(404);
      expect(await refused(attach(envId, 'ses_nonesuch'))).toMatchObject({ status: 404, body: { code: 'not_found' } });
      expect(await refused(open(envId, '?tty=1', { session: id }))).toMatchObject({ status: 422, body: { code: 'invalid' } });
      // Still running, and listed in GraphQL too.
      const gql = await admin.post('/graphql', { query: `{ environment(id: "${envId}") { sessions { id attached tty } } }` });
      expect(gql.body.data.environment.sessions).toContainEqual({ id, attached: 1, tty: false });
      const ended = await admin.del(`/v1/environments/${envId}/sessions/${id}`);
      expect(ended.status).toBe(200);
      expect(ended.body.exec).toMatchObject({ lease: envId, command: "sh -c 'echo started; sleep 305'", exitCode: 137 });
      const { exit } = await session.ended;
      expect(exit).toMatchObject({ exitCode: 137, exec: { id: ended.body.exec.id } });
      expect((await listed(envId)).map((x) => x.id)).not.toContain(id);
    });

    it(
      kind === 'berth node'
        ? 'a session outlives a restart of the API server: it lives on its node'
        : "a restart of the server ends the built-in node's sessions, recorded with 137",
      async () => {
        const session = open(envId, commandQuery('echo before; read a; echo "after $a"; sleep 306'));
        await session.waitFor(/before/);
        const id = await session.id;
        const before = node?.output().length ?? 0;
        await s.restart();
        await session.ended;
        if (kind === 'built-in pool') {
          expect((await recorded(s.url, BOOTSTRAP, envId, 'sleep 306')).exitCode).toBe(137);
          expect((await listed(envId)).map((x) => x.id)).not.toContain(id);
          return;
        }
        // Online again with the new server (the node list may still show the state the old one left).
        await node!.waitFor(/online as builder/, before);
        const again = attach(envId, id);
        await again.waitFor(/before\n/);
        again.send('restart\n');
        await again.waitFor(/after restart/);
        again.ws.close(1000);
        expect((await recorded(s.url, BOOTSTRAP, envId, 'sleep 306')).exitCode).toBe(137);
      },
    );

    it('ends the command when the handshake is refused after the checks', async () => {
      // Every check passes, then the WebSocket handshake itself is malformed: nothing may run on.
      const query = new URLSearchParams([
        ['command', 'sh'],
        ['command', '-c'],
        ['command', 'sleep 303'],
      ]);
      const res = await new Promise<IncomingMessage>((resolve, reject) => {
        const req = request(`${s.url}/v1/environments/${envId}/exec?${query}`, {
          headers: {
            authorization: `Bearer ${BOOTSTRAP}`,
            connection: 'Upgrade',
            upgrade: 'websocket',
            'sec-websocket-version': '13',
            'sec-websocket-key': 'not a key',
            'sec-websocket-protocol': 'berth.exec.v1',
          },
        });
        req.once('response', resolve);
        req.once('upgrade', () => reject(new Error('upgraded')));
        req.once('error', reject);
        req.end();
      });
      expect(res.statusCode).toBe(400);
      res.resume();
      const found = await recorded(s.url, BOOTSTRAP, envId, 'sleep 303');
      expect(found.exitCode).toBe(137);
    });

    it('takes a browser credential as a subprotocol and never echoes it', async () => {
      const session = open(envId, '?command=echo&command=from-a-browser', { protocols: ['berth.exec.v1', `berth.bearer.${BOOTSTRAP}`] });
      await once(session.ws, 'open');
      expect(session.ws.protocol).toBe('berth.exec.v1');
      const { exit } = await session.ended;
      expect(exit?.exitCode).toBe(0);
      expect(session.stdout()).toBe('from-a-browser\n');
    });

    it('refuses before the upgrade: no credential, another organization, a colleague, bad sizes, files only, a foreign origin', async () => {
      expect(await refused(open(envId, '', { protocols: ['berth.exec.v1'] }))).toMatchObject({
        status: 401,
        body: { code: 'unauthorized' },
      });
      const other = await createOrganization(s.app.deps.prisma, `elsewhere-${kind.length}`, 'eve@example.com');
      expect(await refused(open(envId, '', { token: other.secret }))).toMatchObject({ status: 404, body: { code: 'not_found' } });
      const bob = (await admin.post('/v1/tokens', { email: `bob-${kind.length}@example.com`, name: 'cli' })).body.secret as string;
      expect(await refused(open(envId, '', { token: bob }))).toMatchObject({ status: 403, body: { code: 'forbidden' } });
      for (const query of ['?tty=1&rows=0&cols=80', '?tty=1&rows=24&cols=100000', '?tty=maybe', '?rows=24']) {
        expect(await refused(open(envId, query))).toMatchObject({ status: 422, body: { code: 'invalid' } });
      }
      expect(await refused(open(envId, '?command='))).toMatchObject({ status: 422, body: { code: 'invalid' } });
      const files = await lease('files');
      expect(await refused(open(files.id))).toMatchObject({ status: 409, body: { code: 'no_runtime' } });
      expect(await refused(open(envId, '', { headers: { origin: 'https://evil.example' } }))).toMatchObject({
        status: 403,
        body: { code: 'forbidden' },
      });
      // The CLI says the server's reason.
      const cli = await berth(['exec', files.id, '--', 'true'], '');
      expect(cli.code).toBe(1);
      expect(cli.stderr).toMatch(/holds files only/);
    });

    it('closes a session that sends what the protocol does not allow, and one whose credential is revoked', async () => {
      const bad = open(envId, '?command=sleep&command=300');
      await once(bad.ws, 'open');
      bad.ws.send('not json');
      expect((await bad.ended).code).toBe(4400);
      // An API key may run commands in every environment of its organization.
      const made = await admin.post('/v1/keys', { name: `revoked-${kind.length}` });
      const revoked = open(envId, '?command=sleep&command=300', { token: made.body.secret });
      await once(revoked.ws, 'open');
      expect((await admin.del(`/v1/keys/${made.body.key.id}`)).status).toBe(200);
      expect((await revoked.ended).code).toBe(4401);
    });
  });
}
