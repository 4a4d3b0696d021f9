// `berth login` and `berth logout` run as a user runs them: real processes, a HOME of their own
// (XDG_CONFIG_HOME), a Berth started by the test, and a terminal (script(1)) for the asked token.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runBerth } from './helpers/processes';
import { BOOTSTRAP, startServer, type TestServer } from './helpers/server';

const root = new URL('..', import.meta.url).pathname;

describe('berth login and logout', () => {
  let s: TestServer;
  let dir: string;
  let config: string;
  /** Another server, which must never see the stored credential. */
  let other: Server;
  let otherUrl: string;
  const seenByOther: (string | undefined)[] = [];

  /** `berth args…` with only this test's config home: no BERTH_URL or BERTH_TOKEN unless given. */
  const berth = (args: string[], env: Record<string, string> = {}) => runBerth(args, { XDG_CONFIG_HOME: config, ...env });

  const stored = () => join(config, 'berth', 'config.json');

  beforeAll(async () => {
    s = await startServer('pglite');
    dir = await mkdtemp(join(tmpdir(), 'berth-login-'));
    other = createServer((req, res) => {
      seenByOther.push(req.headers.authorization);
      res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"who are you","code":"unauthorized"}');
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
  });
  beforeEach(async () => {
    config = await mkdtemp(join(dir, 'home-'));
  });
  afterAll(async () => {
    await new Promise((resolve) => other?.close(resolve));
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('checks the token, keeps it for the user only, and the other commands use it', async () => {
    const login = await berth(['login', s.url, '--token', BOOTSTRAP]);
    expect(login).toMatchObject({ code: 0, stderr: '' });
    expect(login.stdout).toBe(`Logged in to ${s.url} as admin@berth.local (admin of default); kept in ${stored()}\n`);
    expect(JSON.parse(await readFile(stored(), 'utf8'))).toEqual({ url: s.url, token: BOOTSTRAP });
    expect((await stat(stored())).mode & 0o777).toBe(0o600);
    expect((await stat(join(config, 'berth'))).mode & 0o777).toBe(0o700);

    // No BERTH_URL, no BERTH_TOKEN: the login's server and credential.
    expect(await berth(['env', 'ls'])).toMatchObject({ code: 0, stderr: 'no environments\n' });
    // The environment and flags still win.
    const refused = await berth(['env', 'ls'], { BERTH_TOKEN: 'bct_not-a-real-token' });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^berth: .*(invalid|unknown|revoked)/i);

    // Another server named: the stored credential is not sent to it.
    const elsewhere = await berth(['env', 'ls', '--server', otherUrl]);
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stderr).toContain(`no credential for ${otherUrl}: run \`berth login\``);
    const elsewhereByEnv = await berth(['env', 'ls'], { BERTH_URL: otherUrl });
    expect(elsewhereByEnv.code).toBe(1);
    expect(seenByOther).toEqual([]);

    // Logged in again elsewhere, with a token that server refuses: nothing is kept.
    const bad = await berth(['login', otherUrl, '--token', 'bct_other']);
    expect(bad).toMatchObject({ code: 1, stdout: '', stderr: 'berth: who are you\n' });
    expect(seenByOther).toEqual(['Bearer bct_other']);
    expect(JSON.parse(await readFile(stored(), 'utf8'))).toEqual({ url: s.url, token: BOOTSTRAP });

    expect(await berth(['logout'])).toMatchObject({ code: 0, stdout: `Logged out of ${s.url} (removed ${stored()})\n` });
    await expect(stat(stored())).rejects.toMatchObject({ code: 'ENOENT' });
    const after = await berth(['env', 'ls'], { BERTH_URL: s.url });
    expect(after.code).toBe(1);
    expect(after.stderr).toContain('no credential');
    expect(await berth(['logout'])).toMatchObject({ code: 0, stdout: 'Not logged in.\n' });
  });

  it('says what to do without a token off a terminal, and about a file that is not a login', async () => {
    const none = await berth(['login', s.url]);
    expect(none).toMatchObject({
      code: 1,
      stderr: 'berth: no token: pass --token (or set BERTH_TOKEN), or run berth login on a terminal\n',
    });
    await expect(stat(stored())).rejects.toMatchObject({ code: 'ENOENT' });
    expect((await berth(['login', 'ftp://example.test', '--token', BOOTSTRAP])).stderr).toContain('URL must be an http:// or https:// URL');

    const { writeFile, mkdir } = await import('node:fs/promises');
    await mkdir(join(config, 'berth'), { recursive: true });
    await writeFile(stored(), 'not json');
    const broken = await berth(['env', 'ls'], { BERTH_URL: s.url });
    expect(broken).toMatchObject({
      code: 1,
      stderr: `berth: ${stored()} is not a berth login (run \`berth login\` again, or remove it)\n`,
    });
    // Flags and the environment that say everything need no file.
    expect((await berth(['env', 'ls'], { BERTH_URL: s.url, BERTH_TOKEN: BOOTSTRAP })).code).toBe(0);
    expect(await berth(['logout'])).toMatchObject({ code: 0, stdout: 'Not logged in.\n' });
    await expect(stat(stored())).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('asks for the token on a terminal without showing it', async () => {
    const { BERTH_URL: _url, BERTH_TOKEN: _token, ...inherited } = process.env;
    const command = [process.execPath, 'bin/berth.js', 'login', s.url].join(' ');
    const child = spawn('script', ['-qec', command, '/dev/null'], {
      cwd: root,
      env: { ...inherited, XDG_CONFIG_HOME: config },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    const asked = new Promise<void>((resolve) =>
      child.stdout!.on('data', (d) => {
        out += d;
        if (out.includes('Token for')) resolve();
      }),
    );
    const closed = new Promise<number | null>((resolve) => child.on('close', resolve));
    await asked;
    child.stdin!.write(`${BOOTSTRAP}\r`);
    expect(await closed).toBe(0);
    expect(out).toContain(`Token for ${s.url} (the console makes one under Settings`);
    expect(out).toContain(`Logged in to ${s.url} as admin@berth.local`);
    expect(out).not.toContain(BOOTSTRAP);
    expect(JSON.parse(await readFile(stored(), 'utf8'))).toEqual({ url: s.url, token: BOOTSTRAP });
  });
});
