// The console's Terminal (docs/console.md, "Terminal"): the environment's shell in the page, over
// the session API, with the keyboard, its text readable by assistive technology, in Chromium.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { type ConsolePage, launchBrowser, openConsole, screenshot, signIn } from './helpers/browser';
import { describeContainers, engine, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';
import { recorded } from './helpers/states';
import { startTcpGate } from './helpers/tcp-gate';

describeContainers('web console: a terminal in the environment page', () => {
  let s: TestServer;
  let dir: string;
  let browser: Browser;
  let c: ConsolePage;
  let page: Page;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-terminal-'));
    const templates = await writeCatalog(dir, [{ name: 'box', image: TEST_IMAGE, workdir: '/tmp' }]);
    s = await startServer('pglite', { TEMPLATES_FILE: templates, DOCKER_HOST: engine() });
    browser = await launchBrowser();
    c = await openConsole(browser, s.url);
    page = c.page;
    page.setDefaultTimeout(15_000);
    await signIn(page, BOOTSTRAP);
  }, 60_000);
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-terminal-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  // Retried once: in 2 of 3 clean-clone runs on 2026-11-29 (also before that day's changes) a shell
  // opened right after the environment was ready showed nothing for a minute, its session connected
  // (screenshot in test-results/console). Not reproduced alone or beside the container suites; the
  // suspect is the environment's first berth-envd line racing the node's own (src/node/runtime.ts).
  it('opens the shell, takes the keyboard, shows its text to assistive technology, and records its exit', { retry: 1 }, async () => {
    const made = await admin.post('/v1/environments', { template: 'box' });
    expect(made.status).toBe(202);
    const id = made.body.environment.id as string;
    await untilState(s, BOOTSTRAP, id, 'ready');
    await page.goto(`/environments/${id}`);
    await page.getByRole('button', { name: 'Open a terminal' }).click();
    const terminal = page.getByRole('region', { name: 'Terminal' });
    // The first wait includes the session's start (a shell in the container): the longest under load.
    await expect.poll(() => terminal.textContent(), { timeout: 20_000 }).toMatch(/# /);
    await page.getByRole('status').filter({ hasText: 'Connected' }).waitFor();
    // Typed as a person would: the keyboard's focus is in the terminal.
    await page.keyboard.type('echo hello-$((6*7)) && stty size');
    await page.keyboard.press('Enter');
    await expect.poll(() => terminal.textContent()).toMatch(/hello-42/);
    // What a screen reader reads: xterm's accessible copy of the rows, not the drawn ones.
    const readable = page.locator('.xterm-accessibility-tree');
    await expect.poll(() => readable.textContent()).toMatch(/hello-42/);
    await page.keyboard.type('exit 5');
    await page.keyboard.press('Enter');
    await page.getByRole('status').filter({ hasText: 'The shell ended with exit code 5.' }).waitFor();
    const row = page.getByRole('row').filter({ hasText: '/bin/sh' });
    await expect.poll(() => row.getByRole('cell').allTextContents()).toEqual(expect.arrayContaining(['/bin/sh', '5']));
    const execs = (await admin.get(`/v1/environments/${id}/execs`)).body.execs;
    expect(execs[0]).toMatchObject({ command: '/bin/sh', exitCode: 5 });
    // xterm's layout is applied without loosening the page's Content-Security-Policy.
    expect(c.problems).toEqual([]);
  });

  it('keeps the shell through a dropped connection with the same screen, and attaches to a shell left running', async () => {
    const made = await admin.post('/v1/environments', { template: 'box' });
    const id = made.body.environment.id as string;
    await untilState(s, BOOTSTRAP, id, 'ready');
    // This page reaches Berth through a proxy that can cut every connection at once.
    const gate = await startTcpGate(s.url);
    const through = await openConsole(browser, gate.url);
    try {
      const p = through.page;
      p.setDefaultTimeout(15_000);
      await signIn(p, BOOTSTRAP);
      await p.goto(`/environments/${id}`);
      await p.getByRole('button', { name: 'Open a terminal' }).click();
      const terminal = p.getByRole('region', { name: 'Terminal' });
      await expect.poll(() => terminal.textContent(), { timeout: 20_000 }).toMatch(/# /);
      await p.getByRole('status').filter({ hasText: 'Connected' }).waitFor();
      await p.keyboard.type('echo marker-$((6*7))');
      await p.keyboard.press('Enter');
      await expect.poll(() => terminal.textContent()).toMatch(/marker-42/);
      gate.drop();
      await p.getByRole('status').filter({ hasText: 'The connection dropped' }).waitFor();
      await p.getByRole('status').filter({ hasText: 'Connected' }).waitFor();
      await p.keyboard.type('echo after-$((1+1))');
      await p.keyboard.press('Enter');
      await expect.poll(() => terminal.textContent()).toMatch(/after-2/);
      // The same screen, nothing shown twice (counted in the drawn rows: the region also holds
      // xterm's accessible copy of them, updated a moment later).
      expect((await p.locator('.xterm-rows').textContent())!.match(/marker-42/g)).toHaveLength(1);
      await p.getByRole('button', { name: 'Leave it running' }).click();
      const attach = p.getByRole('button', { name: /^Attach to ses_/ });
      await attach.waitFor();
      await attach.click();
      // Attached anew: its scrollback draws the screen again.
      await expect.poll(() => p.getByRole('region', { name: 'Terminal' }).textContent()).toMatch(/marker-42[\s\S]*after-2/);
      await p.getByRole('status').filter({ hasText: 'Connected' }).waitFor();
      await p.keyboard.type('exit 3');
      await p.keyboard.press('Enter');
      await p.getByRole('status').filter({ hasText: 'The shell ended with exit code 3.' }).waitFor();
      expect(through.problems).toEqual([]);
    } finally {
      await through.page.context().close();
      await gate.close();
    }
  });

  it('ends the shell when the terminal is closed', async () => {
    const made = await admin.post('/v1/environments', { template: 'box' });
    const id = made.body.environment.id as string;
    await untilState(s, BOOTSTRAP, id, 'ready');
    await page.goto(`/environments/${id}`);
    await page.getByRole('button', { name: 'Open a terminal' }).click();
    await page.getByRole('status').filter({ hasText: 'Connected' }).waitFor();
    await page.getByRole('button', { name: 'End the shell' }).click();
    await page.getByRole('button', { name: 'Open a terminal' }).waitFor();
    const shell = await recorded(s.url, BOOTSTRAP, id, '/bin/sh');
    expect(shell).toMatchObject({ command: '/bin/sh', exitCode: 137 });
  });
});
