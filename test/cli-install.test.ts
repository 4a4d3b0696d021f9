// The server serves its CLI (docs/cli.md, "Install"): /install.sh run as a user runs it
// (`curl -fsSL URL/install.sh | sh`: the script on sh's stdin, a HOME of its own, a PATH with node
// but not the checkout), then the installed single-file `berth` against the server that served it.
// And what the script must never do: name a server a Host header chose when PUBLIC_URL is set,
// carry a Host header's shell syntax, or hold anything secret.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCliInstallHandler } from '../src/edges/cli-install';
import { rawRequest } from './helpers/raw-http';
import { BOOTSTRAP, startServer, type TestServer } from './helpers/server';

const root = new URL('..', import.meta.url).pathname;
const { version } = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { version: string };
/** node and the usual tools (sh, curl, sed…), nothing of the checkout. */
const PATH = `${dirname(process.execPath)}:/usr/bin:/bin`;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `command args…` with exactly `env`, `input` on its stdin; resolves when it has ended. */
function run(command: string, args: string[], env: Record<string, string>, input = ''): Promise<Run> {
  const child = spawn(command, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.end(input);
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

/** GET `path` with the given headers (Host included, which fetch will not send as given). */
function get(url: string, path: string, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }>((resolve, reject) => {
    const req = request(new URL(path, url), { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The value of the script's BERTH_SERVER line. */
const serverOf = (script: string) => /^BERTH_SERVER=(.*)$/m.exec(script)?.[1];

describe('GET /install.sh and the berth it installs', () => {
  let s: TestServer;
  let dir: string;
  let script: string;
  /** A user who installed berth into ~/tools, and runs it with only that HOME and PATH. */
  let user: {
    home: string;
    bin: string;
    install: Run;
    berth: (args: string[], extra?: Record<string, string>) => Promise<Run>;
  };

  beforeAll(async () => {
    s = await startServer('pglite');
    dir = await mkdtemp(join(tmpdir(), 'berth-install-'));
    const res = await fetch(`${s.url}/install.sh`);
    expect(res.status).toBe(200);
    script = await res.text();
    // curl -fsSL URL/install.sh | sh -s -- --dir ~/tools
    const { home: h, env } = await home();
    const bin = join(h, 'tools');
    const install = await run('sh', ['-s', '--', '--dir', bin], env, script);
    const berth = (args: string[], extra: Record<string, string> = {}) => run(join(bin, 'berth'), args, { ...env, ...extra });
    user = { home: h, bin, install, berth };
  });
  afterAll(async () => {
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** A fresh HOME, and the env a user's shell there has. */
  async function home(): Promise<{ home: string; env: Record<string, string> }> {
    const h = await mkdtemp(join(dir, 'home-'));
    return { home: h, env: { HOME: h, PATH } };
  }

  it('is a POSIX sh script naming the server it came from, for anyone, without a secret', async () => {
    const res = await fetch(`${s.url}/install.sh`);
    expect(res.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(res.headers.get('cache-control')).toBe('no-cache');
    expect(res.headers.get('vary')).toBe('Host');
    expect(serverOf(script)).toBe(`'${s.url}'`);
    for (const shell of ['sh', 'dash']) expect(await run(shell, ['-n'], { PATH }, script)).toMatchObject({ code: 0, stderr: '' });
    if (existsSync('/usr/bin/shellcheck')) {
      expect(await run('/usr/bin/shellcheck', ['-s', 'sh', '-'], { PATH }, script)).toMatchObject({ code: 0, stdout: '' });
    }
    for (const secret of [BOOTSTRAP, s.dataDir, root]) expect(script).not.toContain(secret);
    // Asked again with its ETag: unchanged.
    const again = await fetch(`${s.url}/install.sh`, { headers: { 'if-none-match': res.headers.get('etag')! } });
    expect(again.status).toBe(304);
  });

  it('installs berth into --dir: one executable file, nothing beside it, no credential', async () => {
    const { home: h, bin, install } = user;
    expect(install).toMatchObject({ code: 0, stderr: '' });
    expect(install.stdout).toContain(`berth ${version} installed as ${bin}/berth; its server: ${s.url}\n`);
    expect(install.stdout).toContain(`${bin} is not on PATH: add it, e.g. in ~/.profile:\n  export PATH="${bin}:$PATH"\n`);
    expect(await readdir(bin)).toEqual(['berth']);
    expect((await stat(join(bin, 'berth'))).mode & 0o777).toBe(0o755);
    expect(await readdir(h)).toEqual(['tools']);
    const installed = await readFile(join(bin, 'berth'), 'utf8');
    expect(installed.split('\n', 2)).toEqual(['#!/usr/bin/env node', `var BERTH_INSTALLED_URL = "${s.url}";`]);
    expect(await user.berth(['--version'])).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  });

  it('the installed berth talks to the server it came from; --server, BERTH_URL and a login win', async () => {
    const { berth } = user;
    // No BERTH_URL, no --server, no login: the installer's URL.
    expect(await berth(['env', 'ls'], { BERTH_TOKEN: BOOTSTRAP })).toMatchObject({ code: 0, stderr: 'no environments\n' });
    const templates = await berth(['template', 'ls'], { BERTH_TOKEN: BOOTSTRAP });
    expect(templates).toMatchObject({ code: 0, stderr: '' });
    expect(templates.stdout).toMatch(/^default\b/m);
    const elsewhere = 'http://127.0.0.1:9';
    for (const [args, extra] of [
      [['env', 'ls'], { BERTH_URL: elsewhere }],
      [['env', 'ls', '--server', elsewhere], {}],
    ] as const) {
      const failed = await berth([...args], { BERTH_TOKEN: BOOTSTRAP, ...extra });
      expect(failed.code).toBe(1);
      expect(failed.stderr).toMatch(/^berth: cannot reach Berth at http:\/\/127\.0\.0\.1:9: /);
    }
    // `berth login` with no URL logs in to the installer's server; the commands then need no token.
    const login = await berth(['login', '--token', BOOTSTRAP]);
    expect(login).toMatchObject({ code: 0, stderr: '' });
    expect(login.stdout).toMatch(new RegExp(`^Logged in to ${s.url} as admin@berth.local`));
    expect(await berth(['env', 'ls'])).toMatchObject({ code: 0, stderr: 'no environments\n' });
  });

  it('installs into ~/.local/bin by default, and says nothing of PATH when that is on it', async () => {
    const { home: h, env } = await home();
    const bin = join(h, '.local', 'bin');
    const first = await run('sh', [], env, script);
    expect(first).toMatchObject({ code: 0, stderr: '' });
    expect(first.stdout).toContain(`export PATH="${bin}:$PATH"`);
    // Again, with the folder on PATH: the file is replaced whole, and PATH needs nothing.
    const onPath = { ...env, PATH: `${bin}:${PATH}` };
    const second = await run('sh', [], onPath, script);
    expect(second).toMatchObject({ code: 0, stderr: '' });
    expect(second.stdout).not.toContain('PATH');
    expect(await readdir(bin)).toEqual(['berth']);
    expect(await run('sh', ['-c', 'command -v berth && berth --version'], onPath)).toEqual({
      code: 0,
      stdout: `${bin}/berth\n${version}\n`,
      stderr: '',
    });
  });

  it('the installed berth runs the agent and says where the server-side commands run', async () => {
    const { home: h, berth } = user;
    // The sandbox agent is in the file: it starts and asks for its join key.
    expect(await berth(['agent', '--dir', join(h, 'work')])).toEqual({
      code: 1,
      stdout: '',
      stderr: `berth: no sandbox credential in ${join(h, 'work', '.berth')}; start once with --join KEY\n`,
    });
    // The database and the node runtime are not: one line each, no stack.
    const checkout =
      'berth: this command runs only from a Berth server checkout (npm run berth -- … there): the single-file berth has no database or node runtime\n';
    expect(await berth(['token', 'create', '--org', 'default', '--admin'])).toEqual({ code: 1, stdout: '', stderr: checkout });
    expect(await berth(['node', '--server', s.url, '--dir', h], { BERTH_NODE_TOKEN: 'bnd_x' })).toEqual({
      code: 1,
      stdout: '',
      stderr: checkout,
    });
  });

  it('refuses a node older than 20, or none, in one line', async () => {
    const { home: h } = await home();
    const none = await run('/bin/sh', ['-s'], { HOME: h, PATH: join(h, 'empty') }, script);
    expect(none).toEqual({
      code: 1,
      stdout: '',
      stderr: 'berth install: berth needs Node.js 20 or later, and there is no node on PATH (https://nodejs.org)\n',
    });
    const old = join(h, 'old');
    await mkdir(old);
    await writeFile(join(old, 'node'), '#!/bin/sh\nif [ "$1" = -p ]; then echo 18; else echo v18.20.4; fi\n');
    await chmod(join(old, 'node'), 0o755);
    const older = await run('/bin/sh', ['-s'], { HOME: h, PATH: old }, script);
    expect(older).toEqual({ code: 1, stdout: '', stderr: 'berth install: berth needs Node.js 20 or later; node on PATH is v18.20.4\n' });
    expect(await readdir(h)).toEqual(['old']);
  });

  it('GET /cli/berth.mjs: the single file, for anyone, cacheable, without a secret', async () => {
    const res = await get(s.url, '/cli/berth.mjs');
    expect(res.status).toBe(200);
    expect(res.headers).toMatchObject({
      'content-type': 'text/javascript; charset=utf-8',
      'cache-control': 'no-cache',
      'x-content-type-options': 'nosniff',
    });
    expect(res.body.equals(await readFile(join(root, 'dist/install/berth.mjs')))).toBe(true);
    const text = res.body.toString();
    for (const secret of [BOOTSTRAP, s.dataDir, root]) expect(text).not.toContain(secret);
    expect((await get(s.url, '/cli/berth.mjs', { 'if-none-match': String(res.headers.etag) })).status).toBe(304);
  });

  it('a Host header that is not a host and port is refused, never put in the script', async () => {
    const marker = join(dir, 'pwned');
    for (const host of [`x$(touch ${marker})`, `x';touch ${marker};'`, 'x`id`', 'x y']) {
      const reply = await rawRequest(s.url, `GET /install.sh HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
      expect(reply).toMatchObject({ status: 400, json: { code: 'bad_request' } });
    }
    expect(existsSync(marker)).toBe(false);
    // Without TRUST_PROXY, a client's X-Forwarded-Host and -Proto are not believed.
    const res = await get(s.url, '/install.sh', {
      host: 'berth.internal:8080',
      'x-forwarded-host': 'evil.example',
      'x-forwarded-proto': 'https',
    });
    expect(serverOf(res.body.toString())).toBe("'http://berth.internal:8080'");
  });
});

describe('/install.sh behind a proxy', () => {
  let fixed: TestServer;
  let proxied: TestServer;

  beforeAll(async () => {
    [fixed, proxied] = await Promise.all([
      startServer('pglite', { PUBLIC_URL: 'https://berth.example.com/berth/', TRUST_PROXY: '1' }),
      startServer('pglite', { TRUST_PROXY: '1' }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([fixed?.stop(), proxied?.stop()]);
  });

  it('with PUBLIC_URL, names it whatever the Host and forwarded headers say', async () => {
    const tries: Record<string, string>[] = [
      {},
      { host: 'evil.example' },
      { 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'http' },
    ];
    for (const headers of tries) {
      const res = await get(fixed.url, '/install.sh', headers);
      expect(res.status).toBe(200);
      expect(serverOf(res.body.toString())).toBe("'https://berth.example.com/berth'");
      expect(res.headers.vary).toBeUndefined();
    }
    // Not even a Host that could not go in a script matters then.
    const reply = await rawRequest(fixed.url, 'GET /install.sh HTTP/1.1\r\nHost: x$(id)\r\nConnection: close\r\n\r\n');
    expect(reply?.status).toBe(200);
  });

  it('with TRUST_PROXY, the nearest proxy names the scheme and host, checked as a Host is', async () => {
    const res = await get(proxied.url, '/install.sh', {
      'x-forwarded-proto': 'http, https',
      'x-forwarded-host': 'evil.example, berth.example.com',
    });
    expect(serverOf(res.body.toString())).toBe("'https://berth.example.com'");
    expect(res.headers.vary).toBe('Host, X-Forwarded-Host, X-Forwarded-Proto');
    const refused = await get(proxied.url, '/install.sh', { 'x-forwarded-host': 'x$(id)' });
    expect(refused.status).toBe(400);
    expect(JSON.parse(refused.body.toString())).toMatchObject({ code: 'bad_request' });
  });
});

describe('GET /cli/berth.mjs where it is not built', () => {
  it("answers 404 in the API's error shape, and the installer stops there, installing nothing", async () => {
    const cli = createCliInstallHandler({ trustProxy: 0, file: join(tmpdir(), 'berth-not-built', 'berth.mjs') });
    const server = createServer((req, res) => void cli.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const res = await fetch(`${url}/cli/berth.mjs`);
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({
        error: 'the berth command line is not built here (dist/install/berth.mjs): `npm start` builds it',
        code: 'not_found',
      });
      // The installer stops at its download, saying what it could not get.
      const h = await mkdtemp(join(tmpdir(), 'berth-install-'));
      const script = await (await fetch(`${url}/install.sh`)).text();
      const install = await run('sh', ['-s', '--', '--dir', h], { HOME: h, PATH }, script);
      expect(install.code).toBe(1);
      expect(install.stderr).toMatch(new RegExp(`berth install: cannot download ${url}/cli/berth.mjs\n$`));
      expect(await readdir(h)).toEqual([]);
      await rm(h, { recursive: true });
    } finally {
      server.close();
      server.closeAllConnections();
    }
  });
});
