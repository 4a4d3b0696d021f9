// Preview URLs (docs/environments.md, "Preview URLs"): a signed link to a port inside a ready
// environment, at `<port>-<name>.preview.localhost`, proxied over the node's relay: HTTP and
// WebSocket, the cookie the link sets, who may make and use one, and what a preview host never
// answers (the API, CORS). Real servers inside the environment: busybox httpd on 3000, and on
// 3001 a small nc script that serves a page and a WebSocket (test/fixtures would need a registry).
import { once } from 'node:events';
import { mkdtemp } from 'node:fs/promises';
import { type IncomingHttpHeaders, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { createOrganization } from '../src/modules/organizations/service';
import { launchBrowser, openConsole, screenshot, signIn } from './helpers/browser';
import { describeContainers, engine, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { berthExec, runBerth } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';

const WAIT = { timeout: 30_000, interval: 100 };

/** Port 3001: a page whose WebSocket says hello, then "received" once it heard from the page. */
const WS_SCRIPT = `#!/bin/sh
key=
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\\r')
  [ -z "$line" ] && break
  case "$line" in [Ss]ec-[Ww]eb[Ss]ocket-[Kk]ey:*) key=$(printf '%s' "\${line#*:}" | tr -d ' ') ;; esac
  case "$line" in [Cc]ookie:*|[Aa]uthorization:*) seen="$seen|$line" ;; esac
done
if [ -z "$key" ]; then
  page='<!doctype html><title>in the environment</title><h1>Served from inside</h1><p id="seen">'"$seen"'</p><p id="ws">connecting</p><script>const ws = new WebSocket(location.origin.replace("http", "ws") + "/socket"); const p = document.getElementById("ws"); ws.onmessage = (e) => { p.textContent = e.data; if (e.data === "hello") ws.send("hi"); };</script>'
  printf 'HTTP/1.1 200 OK\\r\\nContent-Type: text/html\\r\\nSet-Cookie: app=1\\r\\nContent-Length: %s\\r\\nConnection: close\\r\\n\\r\\n%s' "\${#page}" "$page"
  exit 0
fi
hex=$(printf '%s' "\${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11" | sha1sum | cut -c1-40)
accept=$(printf "$(printf '%s' "$hex" | sed 's/../\\\\x&/g')" | base64)
printf 'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: %s\\r\\n\\r\\n' "$accept"
printf '\\201\\005hello'
head -c 1 >/dev/null
printf '\\201\\010received'
cat >/dev/null
`;

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

describeContainers('preview URLs', () => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  let alice: ReturnType<typeof client>;
  let aliceToken: string;
  let bob: ReturnType<typeof client>;
  let bobToken: string;
  let stranger: ReturnType<typeof client>;
  let strangerToken: string;
  let envId: string;
  let name: string;
  let serverPort: string;

  /** A request to Berth's own address with `Host: <host>` (what a browser sends for a preview host). */
  const at = (host: string, path: string, headers: Record<string, string> = {}, method = 'GET'): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const req = request(`${s.url}${path}`, { method, headers: { ...headers, host: `${host}:${serverPort}` } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('error', reject);
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      });
      req.on('error', reject);
      req.end();
    });
  const host = (port: number) => `${port}-${name}.preview.localhost`;
  /** The link's host and path (a URL of Berth's PUBLIC_URL port). */
  const split = (link: string) => {
    const u = new URL(link);
    return { host: u.hostname, path: `${u.pathname}${u.search}`, token: u.searchParams.get('token') ?? '' };
  };
  const preview = async (who: ReturnType<typeof client>, port: number, expiresIn?: string) => {
    const res = await who.post(`/v1/environments/${name}/previews`, { port, expiresIn });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res.body.preview as { url: string; port: number; expires: string };
  };
  /** The cookie a link sets, as the browser sends it back. */
  const cookieOf = async (link: string) => {
    const { host: h, path } = split(link);
    const res = await at(h, path);
    expect(res.status).toBe(303);
    return String(res.headers['set-cookie']?.[0]).split(';')[0]!;
  };

  beforeAll(async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-previews-'));
    const templates = await writeCatalog(dir, [
      { name: 'web', image: TEST_IMAGE, services: [{ service: 'web', target: '127.0.0.1:3000' }], idle: '1h', hard: '4h' },
    ]);
    s = await startServer('pglite', { DOCKER_HOST: engine(), TEMPLATES_FILE: templates, PREVIEW_DOMAIN: 'preview.localhost' });
    serverPort = new URL(s.url).port;
    aliceToken = (await admin.post('/v1/tokens', { email: 'alice@example.com', name: 'cli' })).body.secret;
    alice = client(url, aliceToken);
    bobToken = (await admin.post('/v1/tokens', { email: 'bob@example.com', name: 'cli' })).body.secret;
    bob = client(url, bobToken);
    strangerToken = (await createOrganization(s.app.deps.prisma, 'elsewhere', 'eve@example.com')).secret;
    stranger = client(url, strangerToken);
    const created = await alice.post('/v1/environments', { template: 'web' });
    expect(created.status, JSON.stringify(created.body)).toBe(202);
    envId = created.body.environment.id;
    name = created.body.environment.name;
    await untilState(s, BOOTSTRAP, envId, 'ready');
    const setup = [
      'mkdir -p /www && echo "<h1>hello from httpd</h1>" > /www/index.html',
      'printf "%s" "$0" > /tmp/ws.sh && chmod +x /tmp/ws.sh',
      'httpd -p 3000 -h /www',
      '(setsid nc -ll -p 3001 -e /tmp/ws.sh </dev/null >/dev/null 2>&1 &)',
      // Both listen (so both left the command's session, which ends with it) before the command ends.
      'until netstat -ltn | grep -q ":3000 " && netstat -ltn | grep -q ":3001 "; do sleep 0.1; done',
    ].join(' && ');
    const ran = await berthExec(s.url, aliceToken, name, 'sh', '-c', setup, WS_SCRIPT);
    expect(ran.code, ran.stderr).toBe(0);
  });
  afterAll(() => s?.stop());

  it('makes a signed link whose visit sets a host-only HttpOnly cookie, then proxies the environment’s own web server', async () => {
    const made = await preview(alice, 3000, '30m');
    expect(made.port).toBe(3000);
    expect(made.url).toMatch(new RegExp(`^http://3000-${name}\\.preview\\.localhost:${serverPort}/__berth/preview\\?token=`));
    const { host: h, path } = split(made.url);
    const visit = await at(h, path);
    expect(visit.status).toBe(303);
    expect(visit.headers.location).toBe('/');
    const cookie = String(visit.headers['set-cookie']?.[0]);
    expect(cookie).toMatch(/^berth_preview=[^;]+; Max-Age=\d+; Path=\/; HttpOnly; SameSite=Lax$/);
    expect(cookie).not.toMatch(/domain/i);
    const page = await vi.waitFor(async () => {
      const res = await at(h, '/', { cookie: cookie.split(';')[0]! });
      expect(res.status, res.body).toBe(200);
      return res;
    }, WAIT);
    expect(page.body).toContain('hello from httpd');
    // An answer whose end is the connection's (httpd's 404 has no length): it ends, not hangs.
    const missing = await at(h, '/no-such-page', { cookie: cookie.split(';')[0]! });
    expect(missing.status).toBe(404);
    // No CORS grant on a preview, whatever the Origin says.
    const cross = await at(h, '/', { cookie: cookie.split(';')[0]!, origin: `http://127.0.0.1:${serverPort}` });
    expect(Object.keys(cross.headers).filter((k) => k.startsWith('access-control-'))).toEqual([]);
    // The API's own routes on a preview host are the environment's (3001 answers every path with its page), not Berth's.
    const api = await at(host(3001), '/v1/me', { authorization: `Bearer ${aliceToken}` });
    expect(api.status).toBe(200);
    expect(api.body).toContain('Served from inside');
    expect(api.body).not.toContain('alice@example.com');
    // The same through GraphQL, and the creation is on the audit log.
    const gql = await alice.post('/graphql', {
      query: `mutation { createPreview(environment: "${envId}", input: {port: 3000}) { url port expires } }`,
    });
    expect(gql.body.data.createPreview.url).toContain(`3000-${name}.preview.localhost`);
    const audit = await admin.get('/v1/audit?action=preview.create');
    expect(audit.status).toBe(200);
    expect(JSON.stringify(audit.body)).toContain(envId);
  }, 120_000);

  it('refuses anonymous, tampered, expired, misdirected and foreign credentials, and answers the API nothing', async () => {
    const made = await preview(alice, 3000, '1h');
    const { token } = split(made.url);
    // Anonymous: 401, on the API's own routes too.
    for (const path of ['/', '/v1/me', '/graphql', '/healthz']) {
      const res = await at(host(3000), path);
      expect(res.status, path).toBe(401);
      expect(JSON.parse(res.body)).toMatchObject({ code: 'unauthorized', error: expect.stringContaining('preview') });
    }
    // A tampered token: 401, as a link, a cookie or a bearer.
    const swapped = token.at(-10) === 'A' ? 'B' : 'A';
    const tampered = `${token.slice(0, -10)}${swapped}${token.slice(-9)}`;
    expect((await at(host(3000), `/__berth/preview?token=${tampered}`)).status).toBe(401);
    expect((await at(host(3000), '/', { cookie: `berth_preview=${tampered}` })).status).toBe(401);
    expect((await at(host(3000), '/', { authorization: `Bearer ${tampered}` })).status).toBe(401);
    // The token of port 3000 on the host of port 3001: 403.
    expect((await at(host(3001), `/__berth/preview?token=${token}`)).status).toBe(403);
    expect((await at(host(3001), '/', { cookie: `berth_preview=${token}` })).status).toBe(403);
    // Berth credentials as bearers: the owner passes; a colleague 403; another organization 404.
    expect((await at(host(3000), '/', { authorization: `Bearer ${aliceToken}` })).status).toBe(200);
    expect((await at(host(3000), '/', { authorization: `Bearer ${bobToken}` })).status).toBe(403);
    expect((await at(host(3000), '/', { authorization: `Bearer ${strangerToken}` })).status).toBe(404);
    expect((await at(host(3000), '/', { authorization: 'Bearer bct_nonsense' })).status).toBe(401);
    // Making one: a colleague 403, another organization 404, bad input 422.
    expect((await bob.post(`/v1/environments/${name}/previews`, { port: 3000 })).status).toBe(403);
    expect((await stranger.post(`/v1/environments/${name}/previews`, { port: 3000 })).status).toBe(404);
    for (const body of [{ port: 0 }, { port: 65_536 }, { port: 3000, expiresIn: 'soon' }, { port: 3000, expiresIn: '25h' }]) {
      const res = await alice.post(`/v1/environments/${name}/previews`, body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(res.body).toMatchObject({ code: 'invalid', error: expect.any(String) });
    }
    // A host under the domain that names no preview, and a host of no environment.
    expect((await at('preview.localhost', '/')).status).toBe(404);
    expect((await at('3000-no-such-env.preview.localhost', '/', { authorization: `Bearer ${aliceToken}` })).status).toBe(404);
    // Expired: 403 (the server's clock moves on; the environment's idle time-out is 1h).
    const short = await preview(alice, 3000, '1m');
    const cookie = await cookieOf(short.url);
    s.clock.advance(2 * 60_000);
    const expired = await at(host(3000), '/', { cookie });
    expect(expired.status).toBe(403);
    expect(JSON.parse(expired.body)).toMatchObject({ code: 'forbidden', error: expect.stringContaining('expired') });
  });

  it('passes a WebSocket through, and neither Berth’s cookie nor its bearer reaches the environment', async () => {
    const made = await preview(alice, 3001);
    const cookie = await cookieOf(made.url);
    const page = await vi.waitFor(async () => {
      const res = await at(host(3001), '/', { cookie: `${cookie}; theirs=1`, authorization: 'Basic dTpw' });
      expect(res.status, res.body).toBe(200);
      return res;
    }, WAIT);
    // What the app saw: its own cookie and authorization, not Berth's.
    expect(page.body).toContain('Cookie: theirs=1');
    expect(page.body).toMatch(/authorization: Basic dTpw/i);
    expect(page.body).not.toContain('berth_preview');
    expect(page.headers['set-cookie']).toEqual(['app=1']);
    const bearer = await at(host(3001), '/', { authorization: `Bearer ${aliceToken}` });
    expect(bearer.status).toBe(200);
    expect(bearer.body).not.toContain(aliceToken);
    // A WebSocket on the preview host: hello from inside, then "received" after our message.
    const ws = new WebSocket(`ws://127.0.0.1:${serverPort}/socket`, { headers: { host: `${host(3001)}:${serverPort}`, cookie } });
    const messages: string[] = [];
    ws.on('message', (data) => {
      messages.push(data.toString());
      if (data.toString() === 'hello') ws.send('hi');
    });
    await vi.waitFor(() => expect(messages).toEqual(['hello', 'received']), WAIT);
    // The app inside never answers a close frame (a shell script): the connection is cut instead.
    ws.terminate();
    await once(ws, 'close');
    // Without a credential the upgrade is refused before it reaches the environment.
    const refused = new WebSocket(`ws://127.0.0.1:${serverPort}/socket`, { headers: { host: `${host(3001)}:${serverPort}` } });
    refused.on('error', () => undefined);
    const [, res] = await once(refused, 'unexpected-response');
    expect(res.statusCode).toBe(401);
    refused.terminate();
  });

  it('answers 502 for a port nothing listens on; prints the link with berth preview', async () => {
    const made = await preview(alice, 3999);
    const cookie = await cookieOf(made.url);
    const res = await at(host(3999), '/', { cookie });
    expect(res.status).toBe(502);
    expect(JSON.parse(res.body)).toMatchObject({ code: 'bad_gateway', error: expect.stringContaining('port 3999') });

    const cli = await runBerth(['preview', name, '3000', '--expires', '2h'], { BERTH_URL: s.url, BERTH_TOKEN: aliceToken });
    expect(cli.code, cli.stderr).toBe(0);
    const printed = cli.stdout.trim();
    expect(printed).toMatch(new RegExp(`^http://3000-${name}\\.preview\\.localhost:${serverPort}/__berth/preview\\?token=`));
    expect((await at(host(3000), split(printed).path)).status).toBe(303);
    const bad = await runBerth(['preview', name, '70000'], { BERTH_URL: s.url, BERTH_TOKEN: aliceToken });
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('port');
  });

  it('loads the page and its WebSocket in Chromium', async () => {
    const made = await preview(alice, 3001);
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      await page.goto(made.url);
      expect(new URL(page.url()).pathname).toBe('/');
      await expect.poll(() => page.locator('h1').textContent(), WAIT).toBe('Served from inside');
      await expect.poll(() => page.locator('#ws').textContent(), WAIT).toBe('received');
      await screenshot(page, 'preview');
      // The cookie is the preview host's alone, and the page's script cannot read it.
      const cookies = await page.context().cookies();
      expect(cookies.find((c) => c.name === 'berth_preview')).toMatchObject({ domain: host(3001), httpOnly: true });
      expect(await page.evaluate(() => document.cookie)).not.toContain('berth_preview');
      // From the console: the environment page's Open buttons, a service's and any port's, in a new tab.
      const c = await openConsole(browser, s.url);
      await signIn(c.page, aliceToken);
      await c.page.goto(`/environments/${envId}`);
      const [web] = await Promise.all([c.page.waitForEvent('popup'), c.page.getByRole('button', { name: 'Open web' }).click()]);
      const section = c.page.getByRole('form', { name: 'Open a port' });
      await expect.poll(() => web.locator('h1').textContent(), WAIT).toBe('hello from httpd');
      expect(new URL(web.url()).host).toBe(`${host(3000)}:${serverPort}`);
      await section.getByRole('textbox', { name: 'Port' }).fill('3001');
      const [other] = await Promise.all([c.page.waitForEvent('popup'), section.getByRole('button', { name: 'Open', exact: true }).click()]);
      await expect.poll(() => other.locator('#ws').textContent(), WAIT).toBe('received');
      await section.getByRole('textbox', { name: 'Port' }).fill('70000');
      await section.getByRole('button', { name: 'Open', exact: true }).click();
      await expect.poll(() => c.page.getByRole('alert').textContent()).toMatch(/1 to 65535/);
      expect(c.problems).toEqual([]);
    } finally {
      await browser.close();
    }
  });

  it('ends with its environment: 410 once it ended, never a hang', async () => {
    const made = await preview(alice, 3000);
    const cookie = await cookieOf(made.url);
    expect((await alice.del(`/v1/environments/${name}`)).status).toBeLessThan(300);
    await untilState(s, BOOTSTRAP, envId, 'stopped');
    const res = await at(host(3000), '/', { cookie });
    expect(res.status).toBe(410);
    expect(JSON.parse(res.body)).toMatchObject({ code: 'gone', error: expect.stringContaining('ended') });
    expect((await alice.post(`/v1/environments/${name}/previews`, { port: 3000 })).status).toBe(410);
  });
});

describeContainers('preview URLs without PREVIEW_DOMAIN', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer('pglite');
  });
  afterAll(() => s?.stop());

  it('answers 409 naming the setting', async () => {
    const res = await client(() => s.url, BOOTSTRAP).post('/v1/environments/env_nothing/previews', { port: 3000 });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ code: 'conflict', error: expect.stringContaining('PREVIEW_DOMAIN') });
    const gql = await client(() => s.url, BOOTSTRAP).post('/graphql', {
      query: 'mutation { createPreview(environment: "env_nothing", input: {port: 3000}) { url } }',
    });
    expect(gql.body.errors[0].extensions.code).toBe('conflict');
  });
});
