import { rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { CONSOLE_TEMPLATES, type ConsolePage, launchBrowser, navigate, openConsole, rowOf, screenshot, signIn } from './helpers/browser';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';

/** Environments per page of the console's list (PAGE_SIZE in console/src/pages/Environments.tsx). */
const PAGE_SIZE = 25;

// An admin's session in the built console: an environment's page with an error and with a sandbox
// wired, every field of the New environment form, and the pages of the Environments list.
describeBackends('web console: environment pages, the full form and paging', (backend) => {
  let s: TestServer;
  let browser: Browser;
  let c: ConsolePage;
  let page: Page;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer(backend, { TEMPLATES_FILE: CONSOLE_TEMPLATES });
    browser = await launchBrowser();
    c = await openConsole(browser, s.url);
    page = c.page;
    page.setDefaultTimeout(15_000);
    await signIn(page, BOOTSTRAP);
    await page.getByRole('heading', { level: 1, name: 'Environments' }).waitFor();
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-pages-${backend}-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  /** Opens an environment's page from its row in the Environments list (no reload). */
  const openEnvironment = async (name: string) => {
    await navigate(page, 'Environments');
    await rowOf(page, name).getByRole('link', { name, exact: true }).click();
    await page.getByRole('heading', { level: 1, name: `Environment ${name}` }).waitFor();
  };
  /** The value of a field (`<dt>name</dt><dd>value</dd>`) of the environment's page. */
  const field = (name: string) =>
    page
      .locator('dl.fields > div')
      .filter({ has: page.getByRole('term').getByText(name, { exact: true }) })
      .getByRole('definition');

  it("shows a failed environment's error reason", async () => {
    // Its node cannot prepare it: the hot pool's workspaces folder is a file for a moment.
    const workspaces = join(s.dataDir, 'workspaces');
    await rename(workspaces, `${workspaces}.aside`).catch(() => undefined);
    await writeFile(workspaces, 'not a folder');
    let failed: Record<string, any>;
    try {
      const env = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
      failed = await untilState(s, BOOTSTRAP, env.id, 'failed');
    } finally {
      await rm(workspaces, { force: true });
      await rename(`${workspaces}.aside`, workspaces).catch(() => undefined);
    }
    expect(failed.error).toContain('could not prepare');

    await openEnvironment(failed.name);
    const note = page.getByRole('note', { name: 'Error' });
    await note.waitFor();
    expect(await note.textContent()).toBe(`Error: ${failed.error}`);
    expect(await field('State').textContent()).toBe('failed');
    expect(await page.getByRole('button', { name: 'Stop', exact: true }).isDisabled()).toBe(true);
    await screenshot(page, 'environment-failed');

    // One that did not fail shows no error.
    const fine = (await admin.post('/v1/environments', { template: 'default' })).body.environment;
    await untilState(s, BOOTSTRAP, fine.id, 'ready');
    await openEnvironment(fine.name);
    await field('State').getByText('ready', { exact: true }).waitFor();
    expect(await page.getByRole('note', { name: 'Error' }).count()).toBe(0);
    await page.getByText('No services exported: it is not wired to a sandbox').waitFor();
    await page.getByText('No shares.').waitFor();
  });

  it('shows what an environment runs with: image, network, resources, working directory', async () => {
    const spec = {
      pool: 'default',
      idle: '30m',
      hard: '1h',
      image: 'localhost/console-pages:1',
      resources: { cpus: 1, memory: '2GiB', pids: 1024, disk: '8GiB' },
      network: 'egress',
      workdir: '/workspace/src',
    };
    expect((await admin.put('/v1/templates/runtime-shown', spec)).status).toBe(201);
    const env = (await admin.post('/v1/environments', { template: 'runtime-shown' })).body.environment;
    await openEnvironment(env.name);
    expect(await field('Image').textContent()).toBe('localhost/console-pages:1');
    expect(await field('Network').textContent()).toBe('egress');
    expect(await field('Resources').textContent()).toBe('1 CPU · 2GiB memory · 8GiB disk · 1024 processes');
    expect(await field('Working directory').textContent()).toBe('/workspace/src');
    await admin.del(`/v1/environments/${env.id}`);
  });

  let sandbox: { id: string; name: string };

  it('lists the exports and shares of an environment wired to a sandbox on its page', async () => {
    const registered = await admin.post('/v1/sandboxes', { name: 'pages-box' });
    expect(registered.status).toBe(201);
    sandbox = registered.body.sandbox;
    const leased = await admin.post('/v1/environments', {
      template: 'default',
      sandbox: sandbox.name,
      shares: { src: 'app/', out: 'build/out' },
    });
    expect(leased.status).toBe(202);
    const env = leased.body.environment;
    expect(env.exports).toEqual([{ service: 'postgres', listen: expect.stringMatching(/^127\.0\.0\.1:\d+$/), target: '127.0.0.1:5432' }]);
    expect(env.shares).toHaveLength(2);

    await openEnvironment(env.name);
    // The sandbox by its name, a link to its page.
    await field('Sandbox').getByRole('link', { name: 'pages-box', exact: true }).waitFor();
    expect(await field('Sandbox').getByRole('link').getAttribute('href')).toBe(`/sandboxes/${sandbox.id}`);
    const exports = page.getByRole('region', { name: 'Exports' });
    await exports.waitFor();
    const exportRows = await exports
      .locator('tbody tr')
      .evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll('th, td')].map((cell) => cell.textContent)));
    expect(exportRows).toEqual(
      env.exports.map((x: { service: string; listen: string; target: string }) => [x.service, x.listen, x.target]),
    );

    const shares = page.getByRole('region', { name: 'Shares' });
    const shareRows = await shares
      .locator('tbody tr')
      .evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll('th, td')].map((cell) => cell.textContent)));
    expect(shareRows).toEqual([
      ['src', 'in', '/workspace/src', 'app', '–'],
      ['out', 'out', '/workspace/out', 'build/out', '–'],
    ]);
    expect(shareRows).toEqual(
      env.shares.map((x: { name: string; direction: string; envPath: string; localPath: string; files: string[] }) => [
        x.name,
        x.direction,
        x.envPath,
        x.localPath,
        x.files.length ? x.files.join(', ') : '–',
      ]),
    );
    await screenshot(page, 'environment-wired');
  });

  it('creates an environment with sandbox, a share, project, snapshot and restore keys from the form', async () => {
    // A snapshot of project `web` under `base/1` to restore from.
    const saved = (await admin.post('/v1/environments', { template: 'default', project: 'web', snapshot: 'base/1' })).body.environment;
    await untilState(s, BOOTSTRAP, saved.id, 'ready');
    await admin.del(`/v1/environments/${saved.id}`);
    await untilState(s, BOOTSTRAP, saved.id, 'stopped');
    const snapshots = (await admin.get('/v1/snapshots?project=web&prefix=base/')).body.snapshots;
    expect(snapshots.map((x: { key: string }) => x.key)).toEqual(['base/1', 'base/1']);

    await navigate(page, 'Environments');
    await page.getByRole('link', { name: 'New environment' }).click();
    await page.getByRole('heading', { level: 1, name: 'New environment' }).waitFor();
    await page.getByLabel('Template').selectOption('default');
    await page.getByLabel('Sandbox').selectOption({ label: 'pages-box' });
    await page.getByLabel('Share src').fill('app');
    // Share out left empty: not sent, so it uses the folder of its name (an unmapped share).
    await page.getByLabel('Project').fill('web');
    await page.getByLabel('Snapshot').fill('next/1');
    // The first key has no snapshot: the second is restored.
    await page.getByLabel('Restore').fill('missing/1, base/1');
    await screenshot(page, 'new-environment-filled');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    const heading = page.getByRole('heading', { level: 1, name: /^Environment / });
    await heading.waitFor();
    const name = (await heading.textContent())!.replace('Environment ', '');

    const created = (await admin.get(`/v1/environments/${name}`)).body;
    expect(created).toMatchObject({
      template: 'default',
      sandbox: sandbox.id,
      project: 'web',
      snapshot: 'next/1',
      shares: [
        { name: 'src', direction: 'in', envPath: '/workspace/src', localPath: 'app', files: [] },
        { name: 'out', direction: 'out', envPath: '/workspace/out', localPath: 'out', files: [] },
      ],
    });
    expect(created.exports.map((x: { service: string }) => x.service)).toEqual(['postgres']);
    const ready = await untilState(s, BOOTSTRAP, created.id, 'ready');
    expect(ready.restored).toEqual({ key: 'base/1', root: snapshots[0].root, files: snapshots[0].files, created: snapshots[0].created });

    // Its page shows what was asked for, and what it was restored from once known.
    expect(await field('Project').textContent()).toBe('web');
    expect(await field('Snapshot').textContent()).toBe('next/1');
    await field('Sandbox').getByRole('link', { name: 'pages-box', exact: true }).waitFor();
    await field('Restored')
      .getByText(/^base\/1 \(/)
      .waitFor();
    await page.getByRole('region', { name: 'Shares' }).getByRole('rowheader', { name: 'src' }).waitFor();
    await screenshot(page, 'environment-restored');
  });

  it('says why a pending environment waits, on its page and in the list, and changes the words as the queue moves', async () => {
    // The earlier tests' environments end first: the pool's 8 hot nodes are all free.
    for (const env of (await admin.get('/v1/environments?state=live&limit=500')).body.environments) {
      await admin.del(`/v1/environments/${env.id}`);
      await untilState(s, BOOTSTRAP, env.id, 'stopped');
    }
    // The pool's 8 hot nodes take ten minutes to start these: two more leases wait behind them.
    const busy = await Promise.all(Array.from({ length: 8 }, () => admin.post('/v1/environments', { template: 'staged' })));
    for (const res of busy) await untilState(s, BOOTSTRAP, res.body.environment.id, 'starting');
    const first = (await admin.post('/v1/environments', { template: 'staged' })).body.environment;
    const second = (await admin.post('/v1/environments', { template: 'staged' })).body.environment;
    const words = (ahead: string) => `pool default: 8 of 8 nodes busy (8 starting), ${ahead}`;
    await expect.poll(async () => (await admin.get(`/v1/environments/${second.id}`)).body.waiting).toBe(words('1 lease ahead'));

    await navigate(page, 'Environments');
    await rowOf(page, second.name).getByText(words('1 lease ahead')).waitFor();
    await openEnvironment(second.name);
    const waiting = page.getByRole('status', { name: 'Why it waits' });
    expect(await waiting.textContent()).toBe(`Waiting: ${words('1 lease ahead')}`);
    await screenshot(page, 'environment-waiting');
    // The lease ahead ends: the page says so without a reload.
    await admin.del(`/v1/environments/${first.id}`);
    await waiting.getByText(words('next in line')).waitFor();
    // A node frees: it is placed, and nothing says it waits any more.
    await admin.del(`/v1/environments/${busy[0]!.body.environment.id}`);
    await field('State').getByText('starting', { exact: true }).waitFor();
    expect(await waiting.count()).toBe(0);
    for (const res of [...busy, { body: { environment: second } }]) await admin.del(`/v1/environments/${res.body.environment.id}`);
  });

  it('pages through the environments: next and previous, each environment once, in the order of the REST list', async () => {
    // More than two pages, made in parallel: several share their creation millisecond.
    const made = await Promise.all(
      Array.from({ length: 2 * PAGE_SIZE + 5 }, () => admin.post('/v1/environments', { template: 'staged', labels: { batch: 'paging' } })),
    );
    expect(made.map((r) => r.status)).toEqual(made.map(() => 202));
    const all = (await admin.get('/v1/environments?limit=500')).body.environments.map((e: { name: string }) => e.name) as string[];
    expect(all.length).toBeGreaterThan(2 * PAGE_SIZE);
    expect(all.length).toBeLessThanOrEqual(3 * PAGE_SIZE);
    expect(new Set(all).size).toBe(all.length);
    const expected = [all.slice(0, PAGE_SIZE), all.slice(PAGE_SIZE, 2 * PAGE_SIZE), all.slice(2 * PAGE_SIZE)];

    await navigate(page, 'Environments');
    const table = page.getByRole('region', { name: 'Environments' });
    const names = () => table.getByRole('rowheader').allTextContents();
    const pager = page.getByRole('navigation', { name: 'Pages' });
    const next = pager.getByRole('button', { name: 'Next page' });
    const previous = pager.getByRole('button', { name: 'Previous page' });
    const shown: string[][] = [];

    await expect.poll(names).toEqual(expected[0]);
    expect(await pager.getByText('Page 1').count()).toBe(1);
    expect(await previous.isDisabled()).toBe(true);
    shown.push(await names());

    await next.click();
    await pager.getByText('Page 2').waitFor();
    await expect.poll(names).toEqual(expected[1]);
    shown.push(await names());
    expect(await previous.isDisabled()).toBe(false);
    await screenshot(page, 'environments-page-2');

    await next.click();
    await pager.getByText('Page 3').waitFor();
    await expect.poll(names).toEqual(expected[2]);
    shown.push(await names());
    expect(await next.isDisabled()).toBe(true);

    // Every environment once, none left out, none on two pages.
    expect(shown.flat()).toEqual(all);
    expect(shown[1]!.filter((n) => shown[0]!.includes(n))).toEqual([]);

    await previous.click();
    await pager.getByText('Page 2').waitFor();
    await expect.poll(names).toEqual(expected[1]);
    await previous.click();
    await pager.getByText('Page 1').waitFor();
    await expect.poll(names).toEqual(expected[0]);
    expect(await previous.isDisabled()).toBe(true);
    expect(c.problems).toEqual([]);
  });
});
