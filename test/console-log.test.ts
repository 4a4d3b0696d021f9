// The environment page's Log section (docs/console.md), in Chromium, with a real engine: what the
// template's lifecycle commands printed, each under its header, growing as they print while the
// environment starts, and kept when one fails the lease.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { type ConsolePage, launchBrowser, openConsole, screenshot, signIn } from './helpers/browser';
import { describeContainers, engine, removeOwned, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';
import { poll } from './helpers/wait';

describeContainers("web console: an environment's log, live", () => {
  let s: TestServer;
  let dir: string;
  let browser: Browser;
  let c: ConsolePage;
  let page: Page;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-console-log-'));
    const templates = await writeCatalog(dir, [
      {
        name: 'slowstart',
        image: TEST_IMAGE,
        workdir: '/tmp',
        lifecycle: [
          { phase: 'onCreateCommand', argv: ['sh', '-c', 'echo made by onCreate'] },
          // It waits for the test's word, so the page shows the log while the environment starts.
          { phase: 'postStartCommand', argv: ['sh', '-c', 'echo waiting for go; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo went'] },
        ],
      },
      {
        name: 'failing',
        image: TEST_IMAGE,
        lifecycle: [{ phase: 'postCreateCommand', argv: ['sh', '-c', 'echo cannot install; exit 3'] }],
      },
      { name: 'quiet', image: TEST_IMAGE },
    ]);
    s = await startServer('pglite', { TEMPLATES_FILE: templates, DOCKER_HOST: engine() });
    browser = await launchBrowser();
    c = await openConsole(browser, s.url);
    page = c.page;
    page.setDefaultTimeout(20_000);
    await signIn(page, BOOTSTRAP);
  }, 60_000);
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-log-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await browser?.close();
    const live = await admin.get('/v1/environments?state=live');
    for (const env of live.body.environments ?? []) await admin.del(`/v1/environments/${env.id}`);
    await s?.stop();
    await removeOwned(s.app.deps.builtin.owner);
    await rm(dir, { recursive: true, force: true });
  });

  const log = () => page.getByRole('log', { name: 'Log' });
  const logText = async (id: string) =>
    (await fetch(`${s.url}/v1/environments/${id}/log`, { headers: { authorization: `Bearer ${BOOTSTRAP}` } })).text();

  it('shows the log while the environment starts and follows it as its commands print', async () => {
    const id = (await admin.post('/v1/environments', { template: 'slowstart' })).body.environment.id as string;
    await poll('postStartCommand to wait', async () => ((await logText(id)).includes('waiting for go') ? true : undefined), {
      timeout: 60_000,
    });
    await page.goto(`/environments/${id}`);
    await page.getByRole('heading', { level: 2, name: 'Log' }).waitFor();
    await expect
      .poll(() => log().textContent())
      .toMatch(/^==> onCreateCommand \(.+\)\nmade by onCreate\n==> postStartCommand \(.+\)\nwaiting for go\n$/);
    // The command goes on: its next line shows without a reload, and the environment becomes ready.
    await podman('exec', `berth-${id}`, 'touch', '/tmp/go');
    await expect.poll(() => log().textContent()).toMatch(/waiting for go\nwent\n$/);
    await untilState(s, BOOTSTRAP, id, 'ready');
    await expect.poll(() => log().textContent()).toBe(await logText(id));
    expect(c.problems).toEqual([]);
  });

  it('keeps the log of a lease a command failed, beside its error', async () => {
    const id = (await admin.post('/v1/environments', { template: 'failing' })).body.environment.id as string;
    await untilState(s, BOOTSTRAP, id, 'failed');
    await page.goto(`/environments/${id}`);
    await expect.poll(() => page.getByRole('note', { name: 'Error' }).textContent()).toBe('Error: postCreateCommand exited 3');
    await expect
      .poll(() => log().textContent())
      .toMatch(/^==> postCreateCommand \(.+\)\ncannot install\n==> berth \(.+\)\npostCreateCommand exited 3\n$/);
  });

  it('says when there is nothing in the log', async () => {
    const id = (await admin.post('/v1/environments', { template: 'quiet' })).body.environment.id as string;
    await untilState(s, BOOTSTRAP, id, 'ready');
    await page.goto(`/environments/${id}`);
    await page.getByText('Nothing yet: what its lifecycle commands print shows here as they print it.').waitFor();
    await admin.del(`/v1/environments/${id}`);
    await page.getByText('Empty: its template ran no lifecycle commands, or they printed nothing.').waitFor();
  });
});
