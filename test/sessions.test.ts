// Interactive commands (docs/agents.md, "Sessions"): the WebSocket session on an environment's exec
// path and `berth exec` / `berth shell` over it, on both kinds of node, with a real engine.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { type IncomingMessage, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createOrganization } from '../src/modules/organizations/service';
import { describeContainers, engine, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';
import { recorded } from './helpers/states';

const root = new URL('..', import.meta.url).pathname;

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

    const sessionUrl = (id: string, query = '') => `${s.url.replace(/^http/, 'ws')}/v1/environments/${id}/exec${query}`;

    function open(
      id: string,
      query = '',
      options: { token?: string; protocols?: string[]; headers?: Record<string, string> } = {},
    ): Session {
      const headers = options.protocols
        ? (options.headers ?? {})
        : { authorization: `Bearer ${options.token ?? BOOTSTRAP}`, ...options.headers };
      const ws = new WebSocket(sessionUrl(id, query), options.protocols ?? ['berth.exec.v1'], { headers });
      let out = '';
      let err = '';
      let exit: Record<string, any> | null = null;
      const waiters: { re: RegExp; resolve: () => void }[] = [];
      ws.on('message', (data: Buffer, binary: boolean) => {
        if (!binary) {
          const message = JSON.parse(data.toString());
          if (message.type === 'exit') exit = message;
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
      };
    }

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

    // util-linux's script(1) gives `berth shell` a terminal of its own, as a person's would be
    // (its output adds a \r to each line end: this side's raw mode keeps output processing, as Node's does).
    it.runIf(existsSync('/usr/bin/script'))('berth shell: raw keys, Ctrl-C to the command, the exit code', async () => {
      const line = `stty cols 90 rows 33 2>/dev/null; exec ${JSON.stringify(process.execPath)} bin/berth.js shell ${envId}`;
      const child = spawn('script', ['-qefc', line, '/dev/null'], {
        cwd: root,
        env: { ...process.env, BERTH_URL: s.url, BERTH_TOKEN: BOOTSTRAP },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let out = '';
      const waiters: { re: RegExp; resolve: () => void }[] = [];
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        for (const w of [...waiters]) if (w.re.test(out) && waiters.splice(waiters.indexOf(w), 1)) w.resolve();
      });
      const seen = (re: RegExp) => new Promise<void>((resolve) => (re.test(out) ? resolve() : waiters.push({ re, resolve })));
      const closed = new Promise<number | null>((resolve) => child.once('close', resolve));
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

    it('ends the whole command at once when the caller goes away, recorded with 137', async () => {
      const session = open(
        envId,
        `?${new URLSearchParams([
          ['command', 'sh'],
          ['command', '-c'],
          ['command', 'sleep 301 & sleep 302 & echo started; wait'],
        ])}`,
      );
      await session.waitFor(/started/);
      session.ws.terminate();
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
    });

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
