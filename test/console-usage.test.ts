// The environment page's Usage section (docs/console.md): CPU, memory and disk charts against the
// template's limits, drawn from the history and moving with each new sample, in Chromium.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Locator, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { type ConsolePage, launchBrowser, openConsole, screenshot, signIn } from './helpers/browser';
import { describeContainers, engine, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';

const MIB = 2 ** 20;

describeContainers("web console: an environment's usage, live", () => {
  let s: TestServer;
  let dir: string;
  let browser: Browser;
  let c: ConsolePage;
  let page: Page;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-usage-'));
    const templates = await writeCatalog(dir, [
      { name: 'metered', image: TEST_IMAGE, workdir: '/tmp', resources: { cpus: 2, memory: '256MiB', disk: '1GiB' } },
      { name: 'files', shares: [{ name: 'src', direction: 'in', envPath: '/workspace/src' }], services: [] },
    ]);
    // Samples every 200 ms, so that a change shows in the page soon after it is made.
    s = await startServer('pglite', { TEMPLATES_FILE: templates, DOCKER_HOST: engine(), USAGE_SAMPLE_MS: '200' });
    browser = await launchBrowser();
    c = await openConsole(browser, s.url);
    page = c.page;
    page.setDefaultTimeout(15_000);
    await signIn(page, BOOTSTRAP);
  }, 60_000);
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-usage-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const lease = async (template: string): Promise<string> => {
    const made = await admin.post('/v1/environments', { template });
    expect(made.status, JSON.stringify(made.body)).toBe(202);
    const id = made.body.environment.id as string;
    await untilState(s, BOOTSTRAP, id, 'ready');
    return id;
  };
  /** A chart: its figure (named by its title) and the picture in it, named for assistive technology. */
  const chart = (title: string): { figure: Locator; picture: Locator; value: () => Promise<string> } => {
    const figure = page.getByRole('figure', { name: title, exact: true });
    const picture = figure.getByRole('img', { name: `${title} usage` });
    // The value under the title, which the picture names as its description.
    const value = async () => {
      const id = await picture.getAttribute('aria-describedby');
      return (await figure.locator(`[id="${id}"]`).textContent()) ?? '';
    };
    return { figure, picture, value };
  };
  /** MiB in a value such as `64 MiB of 1 GiB` (0 for bytes and KiB). */
  const mib = (text: string) => {
    const m = /^([\d.]+) (B|KiB|MiB|GiB)/.exec(text);
    if (!m) return Number.NaN;
    return (Number(m[1]) * { B: 1, KiB: 2 ** 10, MiB: MIB, GiB: 2 ** 30 }[m[2] as 'B']) / MIB;
  };

  it('charts CPU, memory and disk against the limits, and the disk grows as a file is written', async () => {
    const id = await lease('metered');
    await page.goto(`/environments/${id}`);
    await page.getByRole('heading', { level: 2, name: 'Usage' }).waitFor();
    const cpu = chart('CPU');
    const memory = chart('Memory');
    const disk = chart('Disk');
    for (const each of [cpu, memory, disk]) await each.picture.waitFor();
    // CPU needs two samples (cores are CPU time over time): not measured until the second.
    await expect.poll(cpu.value).toMatch(/^\d+\.\d\d of 2 cores$/);
    await expect.poll(memory.value).toMatch(/ of 256 MiB$/);
    await expect.poll(disk.value).toMatch(/ of 1 GiB$/);
    expect(mib(await disk.value())).toBeLessThan(64);
    await screenshot(page, 'usage-before');

    // 64 MiB written inside the environment: the next samples show it without a reload.
    const ran = await fetch(`${s.url}/v1/environments/${id}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command: ['dd', 'if=/dev/zero', 'of=usage.bin', 'bs=1048576', 'count=64'] }),
    });
    expect(ran.status).toBe(200);
    expect(await ran.text()).toMatch(/"exitCode":0/);
    // (The text rounds: at least the 64 MiB written.)
    await expect.poll(async () => mib(await disk.value())).toBeGreaterThanOrEqual(64);
    // Each chart draws its line and the limit's (a horizontal line has no height: attached, not visible).
    for (const each of [cpu, memory, disk]) {
      await each.picture.locator('polyline').waitFor();
      await each.picture.locator('line.usage-limit').waitFor({ state: 'attached' });
    }
    await screenshot(page, 'usage-after');

    // Once it ended, its page still draws the samples it had, from the history.
    expect((await admin.del(`/v1/environments/${id}`)).status).toBe(200);
    await untilState(s, BOOTSTRAP, id, 'stopped');
    await page.reload();
    await disk.picture.locator('polyline').waitFor();
    expect(mib(await disk.value())).toBeGreaterThanOrEqual(64);
    expect(c.problems).toEqual([]);
  });

  it('says what a files-only environment does not measure, and that its template sets no limits', async () => {
    const id = await lease('files');
    await page.goto(`/environments/${id}`);
    await page.getByRole('heading', { level: 2, name: 'Usage' }).waitFor();
    await expect.poll(chart('CPU').value).toBe('not measured');
    await expect.poll(chart('Memory').value).toBe('not measured');
    await expect.poll(chart('Disk').value).toMatch(/^[\d.]+ (B|KiB|MiB), no limit$/);
    await expect(chart('Disk').picture.locator('line.usage-limit').count()).resolves.toBe(0);
    await screenshot(page, 'usage-files-only');
    expect(c.problems).toEqual([]);
  });
});
