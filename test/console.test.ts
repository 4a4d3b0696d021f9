import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import {
  CONSOLE_TEMPLATES,
  type ConsolePage,
  launchBrowser,
  navigate,
  openConsole,
  rowOf,
  screenshot,
  signIn,
  subscribed,
} from './helpers/browser';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';
import { startTcpGate, type TcpGate } from './helpers/tcp-gate';

const run = promisify(execFile);
const MiB = 1024 * 1024;

// An admin's session in the built console, in headless Chromium, against a Berth started here.
// The browser talks to Berth through a TCP gate that can hold an upload mid-way.
describeBackends('web console: an admin', (backend) => {
  let s: TestServer;
  let gate: TcpGate;
  let browser: Browser;
  let c: ConsolePage;
  let page: Page;
  let files: string;
  const admin = client(() => s.url, BOOTSTRAP);
  const sockets: { url: string; closed: boolean }[] = [];
  const requested: string[] = [];

  beforeAll(async () => {
    s = await startServer(backend, { TEMPLATES_FILE: CONSOLE_TEMPLATES });
    files = await mkdtemp(join(tmpdir(), 'berth-console-files-'));
    gate = await startTcpGate(s.url);
    browser = await launchBrowser();
    c = await openConsole(browser, gate.url);
    page = c.page;
    page.setDefaultTimeout(15_000);
    page.on('request', (req) => requested.push(req.url()));
    page.on('websocket', (ws) => {
      const entry = { url: ws.url(), closed: false };
      sockets.push(entry);
      ws.on('close', () => {
        entry.closed = true;
      });
    });
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-${backend}-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await browser?.close();
    await gate?.close();
    await s?.stop();
    if (files) await rm(files, { recursive: true, force: true });
  });

  it('refuses a wrong token, then signs in', async () => {
    await page.getByLabel('Token').fill('bct_not-a-real-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByLabel('Token').getAttribute('aria-invalid')).toBe('true');
    expect(await page.getByRole('alert').textContent()).toContain('refused');
    await screenshot(page, 'sign-in-refused');
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);

    await signIn(page, BOOTSTRAP);
    const nav = page.getByRole('navigation', { name: 'Main' });
    for (const link of ['Environments', 'Sandboxes', 'Artifacts', 'Snapshots', 'Settings', 'Quotas']) {
      expect(await nav.getByRole('link', { name: link, exact: true }).isVisible(), link).toBe(true);
    }
    await page.getByRole('heading', { level: 1, name: 'Environments' }).waitFor();
    await page.getByText('No environments yet').waitFor();
    await screenshot(page, 'environments-empty');
  });

  let envName = '';

  it('creates an environment, shows field errors next to their field, and watches its row reach ready', async () => {
    await page.getByRole('link', { name: 'New environment' }).click();
    await page.getByRole('heading', { level: 1, name: 'New environment' }).waitFor();
    await page.getByLabel('Template').selectOption('staged');
    await page.getByLabel('Labels').fill('team=console');
    await page.getByLabel('Hard').fill('25h');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    // The server's error for `hard` (extensions.field) sits under the Hard field and describes it.
    const hard = page.getByLabel('Hard');
    await expect.poll(() => hard.getAttribute('aria-invalid')).toBe('true');
    const described = await hard.getAttribute('aria-describedby');
    const errorText = await page.locator(`[id="${described!.split(' ').at(-1)}"]`).textContent();
    expect(errorText).toContain('24h');
    expect(await page.getByLabel('Idle').getAttribute('aria-invalid')).toBeNull();
    // The refused mutation's root field is null beside its error: the page reads it without a fault.
    expect(c.problems).toEqual([]);
    await screenshot(page, 'new-environment-error');

    await hard.fill('2h');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    const heading = page.getByRole('heading', { level: 1, name: /^Environment / });
    await heading.waitFor();
    envName = (await heading.textContent())!.replace('Environment ', '');
    expect(envName).toMatch(/^[a-z]+-[a-z]+-\d{4}$/);

    const mark = c.sent.length;
    await navigate(page, 'Environments');
    const row = rowOf(page, envName);
    await row.getByText('starting', { exact: true }).waitFor();
    await subscribed(c, 'EnvironmentRows', mark);
    expect(await row.textContent()).toContain('team=console');
    // From here on nothing reloads the page: a reload would lose this marker.
    await page.evaluate(() => Object.assign(window, { notReloaded: true }));
    s.clock.advance(10 * 60_000);
    await s.app.deps.background.tick();
    await row.getByText('ready', { exact: true }).waitFor();
    expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    await screenshot(page, 'environments');
  });

  it("shows an environment's page with its exec log live, keeps it alive, stops it and watches it reach stopped", async () => {
    const mark = c.sent.length;
    await rowOf(page, envName).getByRole('link', { name: envName }).click();
    await page.getByRole('heading', { level: 1, name: `Environment ${envName}` }).waitFor();
    await page.getByText('No commands recorded yet').waitFor();
    const recorded = await admin.post(`/v1/environments/${envName}/execs`, { command: 'make test', exitCode: 0, durationMs: 4200 });
    expect(recorded.status).toBe(201);
    await page.getByRole('region', { name: 'Commands' }).getByText('make test').waitFor();

    await page.getByRole('button', { name: 'Keep alive' }).click();
    await page.getByText('Kept alive').waitFor();
    const state = page.getByRole('definition').filter({ has: page.locator('.state') });
    expect(await state.textContent()).toBe('ready');
    await screenshot(page, 'environment');

    await subscribed(c, 'EnvironmentUpdates', mark);
    await page.getByRole('button', { name: 'Stop', exact: true }).click();
    await state.getByText('stopped', { exact: true }).waitFor();
    expect(await page.getByRole('button', { name: 'Stop', exact: true }).isDisabled()).toBe(true);
    await navigate(page, 'Environments');
    await rowOf(page, envName).getByText('stopped', { exact: true }).waitFor();
  });

  it('filters environments by state, template and label', async () => {
    const other = await admin.post('/v1/environments', { template: 'default', labels: { team: 'web' } });
    await rowOf(page, other.body.environment.name).waitFor();
    await page.getByLabel('Label').fill('team=console');
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect.poll(() => page.getByRole('region', { name: 'Environments' }).getByRole('row').count()).toBe(2);
    await rowOf(page, envName).waitFor();
    expect(page.url()).toContain('label=team%3Dconsole');
    await page.getByLabel('Label').fill('');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByLabel('State').selectOption('live');
    await expect.poll(() => rowOf(page, envName).count()).toBe(0);
    await rowOf(page, other.body.environment.name).waitFor();
    expect(page.url()).toContain('state=live');
    await page.getByLabel('State').selectOption('');
    await page.getByLabel('Template').selectOption('staged');
    await expect.poll(() => rowOf(page, other.body.environment.name).count()).toBe(0);
    await rowOf(page, envName).waitFor();
    await page.getByLabel('Template').selectOption('');
  });

  it('uploads a 20 MiB artifact with a progress bar that moves as bytes go, lists it and downloads it', async () => {
    await navigate(page, 'Artifacts');
    await page.getByText('No artifacts yet').waitFor();
    const bytes = randomBytes(20 * MiB);
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    // Chosen from disk, as a person would: a 20 MiB buffer would cross the browser protocol as base64.
    const file = join(files, 'build.bin');
    await writeFile(file, bytes);
    await page.getByLabel('File').setInputFiles(file);
    await page.getByLabel('Project', { exact: true }).fill('web');
    await page.getByLabel('Retention').fill('3d');
    await page.getByLabel('Labels').fill('build=42');
    await page.getByLabel('Link lifetime').fill('1h');

    // The gate stops the upload after 1 MiB: the bar must show a part, not just nothing or all.
    gate.holdAfter(MiB);
    await page.getByRole('button', { name: 'Upload', exact: true }).click();
    const bar = page.getByRole('progressbar', { name: 'Upload progress' });
    await bar.waitFor();
    await page.waitForFunction((el) => el instanceof HTMLProgressElement && el.value > 0 && el.value < el.max, await bar.elementHandle());
    const [sent, total] = await bar.evaluate((el) => [(el as HTMLProgressElement).value, (el as HTMLProgressElement).max]);
    expect(total).toBe(20 * MiB);
    expect(sent).toBeGreaterThan(0);
    expect(sent).toBeLessThan(total!);
    await screenshot(page, 'artifacts-uploading');
    gate.release();

    await page.getByRole('status').getByText('Stored').waitFor();
    expect(await bar.count()).toBe(0);
    const row = rowOf(page, 'build.bin');
    await row.waitFor();
    expect(await row.textContent()).toContain('20 MiB');
    expect(await row.textContent()).toContain(sha256);
    const link = await page.getByRole('textbox', { name: 'Link', exact: true }).inputValue();
    const viaLink = await fetch(link);
    expect(viaLink.status).toBe(200);
    expect(
      createHash('sha256')
        .update(Buffer.from(await viaLink.arrayBuffer()))
        .digest('hex'),
    ).toBe(sha256);
    await screenshot(page, 'artifacts');

    const [download] = await Promise.all([page.waitForEvent('download'), row.getByRole('button', { name: 'Download build.bin' }).click()]);
    expect(download.suggestedFilename()).toBe('build.bin');
    const saved = await readFile((await download.path())!);
    expect(createHash('sha256').update(saved).digest('hex')).toBe(sha256);
  });

  it("shows an artifact's page, makes a signed link and deletes it", async () => {
    await rowOf(page, 'build.bin').getByRole('link', { name: 'build.bin' }).click();
    await page.getByRole('heading', { level: 1, name: 'Artifact build.bin' }).waitFor();
    await page.getByRole('textbox', { name: 'Link lifetime' }).fill('10m');
    await page.getByRole('button', { name: 'Create link' }).click();
    const link = page.getByRole('textbox', { name: 'Link', exact: true });
    await link.waitFor();
    expect(await link.inputValue()).toContain('/v1/links/');
    await screenshot(page, 'artifact');
    await page.getByRole('button', { name: 'Delete', exact: true }).click();
    // The confirmation has the focus: Enter answers it.
    await page.getByRole('button', { name: 'Delete for good' }).waitFor();
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { level: 1, name: 'Artifacts' }).waitFor();
    await page.getByText('No artifacts yet').waitFor();
  });

  it('registers a sandbox, shows the join key once with the agent command, live counts, and its config without the keyring', async () => {
    const mark = c.sent.length;
    await navigate(page, 'Sandboxes');
    await page.getByText('No sandboxes yet').waitFor();
    await page.getByLabel('Name').fill('ci-box');
    await page.getByRole('button', { name: 'Register sandbox' }).click();
    const key = await page.getByRole('textbox', { name: 'Join key' }).inputValue();
    expect(key).toMatch(/^bjk_/);
    expect(await page.getByRole('textbox', { name: 'Agent command' }).inputValue()).toBe(
      `berth agent --server ${gate.url} --join ${key} --dir .`,
    );
    const row = rowOf(page, 'ci-box');
    await row.waitFor();
    expect(await row.getByRole('cell').first().textContent()).toBe('0');
    await screenshot(page, 'sandboxes');

    await subscribed(c, 'EnvironmentChanges', mark);
    const wired = await admin.post('/v1/environments', { template: 'default', sandbox: 'ci-box', project: 'web' });
    expect(wired.status).toBe(202);
    await expect.poll(() => row.getByRole('cell').first().textContent()).toBe('1');

    await row.getByRole('link', { name: 'ci-box' }).click();
    await page.getByRole('heading', { level: 1, name: 'Sandbox ci-box' }).waitFor();
    const wiredRow = rowOf(page, wired.body.environment.name);
    await wiredRow.waitFor();
    const config = (await admin.get(`/v1/sandboxes/${wired.body.environment.sandbox}/config`)).body.config;
    const content = await page.content();
    expect(content).not.toContain('"keyring"');
    for (const entry of config.keyring ?? []) expect(content).not.toContain(entry.key);
    await screenshot(page, 'sandbox');

    await admin.del(`/v1/environments/${wired.body.environment.id}`);
    await page.getByText('No live environment is wired to this sandbox').waitFor();
  });

  it('lists snapshots per project, newest first, with key prefix search', async () => {
    for (const key of ['ci/main/1', 'ci/main/2', 'nightly/1']) {
      const env = (await admin.post('/v1/environments', { template: 'default', project: 'web', snapshot: key })).body.environment;
      await untilState(s, BOOTSTRAP, env.id, 'ready');
      await admin.del(`/v1/environments/${env.id}`);
      await untilState(s, BOOTSTRAP, env.id, 'stopped');
    }
    await navigate(page, 'Snapshots');
    await page.getByText('Project default has no snapshots').waitFor();
    await page.getByLabel('Project').fill('web');
    await page.getByLabel('Key prefix').fill('ci/');
    await page.getByRole('button', { name: 'Search' }).click();
    const table = page.getByRole('region', { name: 'Snapshots' });
    await table.getByRole('link', { name: 'ci/main/2' }).first().waitFor();
    const keys = await table.getByRole('rowheader').allTextContents();
    // Two shares per key (src and out), newest key first; nightly/ is left out by the prefix.
    expect(keys).toEqual(['ci/main/2', 'ci/main/2', 'ci/main/1', 'ci/main/1']);
    await screenshot(page, 'snapshots');
    await table.getByRole('link', { name: 'ci/main/1' }).first().click();
    await page.getByRole('heading', { level: 1, name: 'Snapshot ci/main/1' }).waitFor();
    await page.getByRole('heading', { level: 2, name: /^Share src/ }).waitFor();
    await page.getByRole('heading', { level: 2, name: /^Share out/ }).waitFor();
    await screenshot(page, 'snapshot');
  });

  it('creates a CLI token in Settings that works with curl, and revokes it', async () => {
    await navigate(page, 'Settings');
    await page.getByLabel('Token name').fill('laptop');
    await page.getByRole('button', { name: 'Create token' }).click();
    const secret = await page.getByRole('textbox', { name: 'Token', exact: true }).inputValue();
    expect(secret).toMatch(/^bct_/);
    await screenshot(page, 'settings');
    const curl = (token: string) => run('curl', ['-s', '-w', '\n%{http_code}', '-H', `Authorization: Bearer ${token}`, `${s.url}/v1/me`]);
    const { stdout } = await curl(secret);
    const [body, status] = stdout.split('\n');
    expect(status).toBe('200');
    expect(JSON.parse(body!)).toMatchObject({ kind: 'person', name: 'admin@berth.local', admin: true });

    const row = page.getByRole('region', { name: 'CLI tokens' }).getByRole('row').filter({ hasText: 'laptop' });
    await row.getByRole('button', { name: /^Revoke laptop/ }).click();
    await row.getByRole('button').waitFor({ state: 'detached' });
    expect((await curl(secret)).stdout.split('\n')[1]).toBe('401');
  });

  it('lets an admin create an API key and shred a project, the name typed again to confirm', async () => {
    await page.getByLabel('Key name').fill('deploy-bot');
    await page.getByRole('button', { name: 'Create API key' }).click();
    const key = await page.getByRole('textbox', { name: 'API key', exact: true }).inputValue();
    expect(key).toMatch(/^bak_/);
    await page.getByRole('region', { name: 'API keys' }).getByRole('rowheader', { name: 'deploy-bot' }).waitFor();

    const shred = page.getByRole('button', { name: 'Shred project' });
    await page.getByLabel('Project to shred').fill('web');
    expect(await shred.isDisabled()).toBe(true);
    await page.getByLabel('Type the project name again to confirm').fill('wex');
    expect(await shred.isDisabled()).toBe(true);
    await page.getByLabel('Type the project name again to confirm').fill('web');
    await shred.click();
    await page.getByText(/Project web shredded at/).waitFor();
    expect((await admin.get('/v1/snapshots?project=web')).body.snapshots).toEqual([]);
  });

  it('lets an admin set a quota and shows its running count live', async () => {
    const mark = c.sent.length;
    await navigate(page, 'Quotas');
    await page.getByText('No quotas').waitFor();
    await page.getByLabel('Template').selectOption('default');
    await page.getByLabel('Max leases').fill('5');
    await page.getByLabel('Idle').fill('20m');
    await page.getByLabel('Hard').fill('2h');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText('Saved: default allows 5').waitFor();
    const row = rowOf(page, 'default');
    await row.waitFor();
    const cells = () => row.getByRole('cell').allTextContents();
    const [quota] = (await admin.get('/v1/quotas')).body.quotas;
    expect(quota).toMatchObject({ template: 'default', maxLeases: 5, idle: '20m0s', hard: '2h0m0s' });
    expect(await cells()).toEqual([String(quota.running), '5', '20m0s', '2h0m0s']);
    await subscribed(c, 'EnvironmentChanges', mark);
    const env = await admin.post('/v1/environments', { template: 'default' });
    expect(env.status).toBe(202);
    await expect.poll(async () => (await cells())[0], { timeout: 10_000 }).toBe(String(quota.running + 1));
    await screenshot(page, 'quotas');

    // Above what the pool can run at once (its 8 built-in nodes): saved, with the server's warning.
    await page.getByLabel('Max leases').fill('9');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText('Saved: default allows 9').waitFor();
    const warning =
      "pool default can run at most 8 of your organization's environments at once (its 8 built-in nodes; no node of your organization): leases of default past 8 wait in its queue";
    const notes = page.getByRole('note', { name: 'Warnings' });
    await expect.poll(() => notes.allTextContents()).toEqual([`default: ${warning}`, warning]);
    await screenshot(page, 'quotas-warning');
  });

  it('signs out: the token is forgotten and the WebSocket closed; no token ever was in a URL', async () => {
    expect(sockets.length).toBeGreaterThan(0);
    expect(sockets.every((ws) => new URL(ws.url).pathname === '/graphql')).toBe(true);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('Token').waitFor();
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
    await expect.poll(() => sockets.every((ws) => ws.closed)).toBe(true);
    await page.reload();
    await page.getByLabel('Token').waitFor();
    for (const url of requested) expect(url).not.toMatch(/bct_|bak_|bjk_|token=/);
    expect(c.problems).toEqual([]);
  });
});
