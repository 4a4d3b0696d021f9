import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { bytes } from '../console/src/format';
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
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';

/** A node is lost when not heard from for this long (the server's clock, which the test moves). */
const NODE_LOST_MS = 3000;

/** The console's catalog, plus a pool only `berth node` serves and a template that sets every field. */
async function catalog(dir: string): Promise<string> {
  const base = JSON.parse(await readFile(CONSOLE_TEMPLATES, 'utf8'));
  base.pools.push({ name: 'remote', hotNodes: 0, maxQueued: 10 });
  base.templates.push({
    name: 'builder',
    description: 'Builds on the remote pool',
    pool: 'remote',
    startMs: 50,
    idle: '20m',
    hard: '4h',
    image: 'docker.io/library/debian:bookworm-slim',
    resources: { cpus: 2, memory: '4GiB', disk: '16GiB', pids: 2048 },
    network: 'egress',
    workdir: '/workspace/src',
    env: { CI: 'true', NODE_ENV: 'test' },
    shares: [
      { name: 'src', direction: 'in', envPath: '/workspace/src' },
      { name: 'dist', direction: 'out', envPath: '/workspace/dist' },
    ],
    services: [{ service: 'web', target: '127.0.0.1:3000' }],
  });
  const file = join(dir, 'templates.json');
  await writeFile(file, JSON.stringify(base));
  return file;
}

// The Nodes and Templates pages: an admin watches a real `berth node` come online, take an
// environment, get lost and come back, without a reload; a member sees the same pages.
describe('web console: nodes and templates', () => {
  let s: TestServer;
  let dir: string;
  let browser: Browser;
  let c: ConsolePage;
  let page: Page;
  let agent: Proc | undefined;
  let nodeToken: string;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-console-nodes-'));
    s = await startServer('pglite', {
      TEMPLATES_FILE: await catalog(dir),
      NODE_LOST_MS: String(NODE_LOST_MS),
      NODE_HEARTBEAT_MS: '500',
    });
    browser = await launchBrowser();
    c = await openConsole(browser, s.url);
    page = c.page;
    page.setDefaultTimeout(15_000);
    await signIn(page, BOOTSTRAP);
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-nodes-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await agent?.kill('SIGKILL');
    await browser?.close();
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** `berth node` serving the node of `nodeToken` with two slots, files only (no container engine). */
  const startAgent = async () => {
    agent = spawnNode(['bin/berth.js', 'node', '--server', s.url, '--dir', join(dir, 'node'), '--slots', '2', '--engine', 'none'], {
      BERTH_NODE_TOKEN: nodeToken,
    });
    await agent.waitFor(/online as builder-1/);
  };
  /** The row of the Nodes table whose name is `name`. */
  const nodeRow = (name: string) => page.getByRole('row').filter({ has: page.getByRole('rowheader', { name, exact: true }) });
  /** The value of a field (`<dt>name</dt><dd>value</dd>`) of the page. */
  const field = (name: string) =>
    page
      .locator('dl.fields > div')
      .filter({ has: page.getByRole('term').getByText(name, { exact: true }) })
      .getByRole('definition');
  /** A table's rows as the text of their cells. */
  const rows = (label: string) =>
    page
      .getByRole('region', { name: label })
      .locator('tbody tr')
      .evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('th, td')].map((cell) => cell.textContent)));

  it('lists the templates, each linked to its page', async () => {
    await navigate(page, 'Templates');
    const table = page.getByRole('region', { name: 'Templates' });
    await table.waitFor();
    const names = (await admin.get('/v1/templates')).body.templates.map((t: { name: string }) => t.name);
    expect(names).toContain('builder');
    expect(await table.getByRole('rowheader').allTextContents()).toEqual(names);
    const builder = rowOf(page, 'builder');
    expect(await builder.getByRole('cell').allTextContents()).toEqual([
      'Builds on the remote pool',
      'remote',
      'docker.io/library/debian:bookworm-slim',
      'egress',
      '20m0s',
      '4h0m0s',
    ]);
    await screenshot(page, 'templates');
  });

  it("shows a template's image, resources, shares, services and variables on its page", async () => {
    await rowOf(page, 'builder').getByRole('link', { name: 'builder', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Template builder' }).waitFor();
    expect(page.url()).toBe(`${s.url}/templates/builder`);
    expect(await field('Image').textContent()).toBe('docker.io/library/debian:bookworm-slim');
    expect(await field('Pool').textContent()).toBe('remote');
    expect(await field('Network').textContent()).toBe('egress');
    expect(await field('Working directory').textContent()).toBe('/workspace/src');
    expect(await field('Shell').textContent()).toBe('/bin/sh');
    expect(await field('CPUs').textContent()).toBe('2');
    expect(await field('Memory').textContent()).toBe('4GiB');
    expect(await field('Disk').textContent()).toBe('16GiB');
    expect(await field('Processes').textContent()).toBe('2048');
    expect(await field('Idle time-out').textContent()).toBe('20m0s');
    expect(await field('Hard time-out').textContent()).toBe('4h0m0s');
    expect(await rows('Shares')).toEqual([
      ['src', 'in', '/workspace/src'],
      ['dist', 'out', '/workspace/dist'],
    ]);
    expect(await rows('Services')).toEqual([['web', '127.0.0.1:3000']]);
    expect(await rows('Variables')).toEqual([
      ['CI', 'true'],
      ['NODE_ENV', 'test'],
    ]);
    await screenshot(page, 'template');

    // One without an image, limits or variables says so; an unknown one is an error, not a blank page.
    await page.goto('/templates/staged');
    await page.getByRole('heading', { level: 1, name: 'Template staged' }).waitFor();
    expect(await field('Image').textContent()).toBe('none: environments hold files only');
    expect(await field('Memory').textContent()).toBe('–');
    await page.getByText('No services.').waitFor();
    await page.getByText('No variables.').waitFor();
    await page.goto('/templates/no-such-template');
    expect(await page.getByRole('alert').textContent()).toContain('no template named no-such-template');
    expect(c.problems).toEqual([]);
  });

  it('shows a node registered, coming online with its slots, taking an environment, lost and back, without a reload', async () => {
    const mark = c.sent.length;
    await navigate(page, 'Nodes');
    // The built-in node is listed first, with what it serves.
    const builtin = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'builtin (built-in)' }) });
    await builtin.waitFor();
    expect((await builtin.getByRole('cell').allTextContents()).slice(0, 2)).toEqual(['hot pools', 'online']);
    await subscribed(c, 'NodesChanged', mark);
    await subscribed(c, 'EnvironmentChanges', mark);
    await page.evaluate(() => Object.assign(window, { notReloaded: true }));

    const created = await admin.post('/v1/nodes', { pool: 'remote', name: 'builder-1' });
    expect(created.status).toBe(201);
    nodeToken = created.body.secret;
    const row = nodeRow('builder-1');
    // Registered, never heard from: lost, no slots yet.
    await row.waitFor();
    const cells = () => row.getByRole('cell').allTextContents();
    expect(await cells()).toEqual(['remote', 'lost', '0 of 0', 'not reported yet', '–', 'never', '–']);

    await startAgent();
    await row.getByText('online', { exact: true }).waitFor();
    // Without an engine its capacity is the host's (this machine's).
    const machine = `${availableParallelism()} CPUs, 0 B of ${bytes(totalmem())}`;
    await expect.poll(cells).toEqual(['remote', 'online', '0 of 2', `0 of ${machine}`, '–', expect.not.stringMatching(/^never$/), '–']);
    await screenshot(page, 'nodes-online');

    // An environment of its pool takes a slot; its name links to its page.
    const env = (await admin.post('/v1/environments', { template: 'builder' })).body.environment;
    await untilState(s, BOOTSTRAP, env.id, 'ready');
    expect((await admin.get(`/v1/environments/${env.id}`)).body.node).toBe('builder-1');
    await row.getByRole('link', { name: env.name, exact: true }).waitFor();
    expect((await cells())[2]).toBe('1 of 2');
    // The template's limits: 2 CPUs, 4 GiB.
    expect((await cells())[3]).toBe(`2 of ${availableParallelism()} CPUs, 4.0 GiB of ${bytes(totalmem())}`);
    expect(await row.getByRole('link', { name: env.name }).getAttribute('href')).toBe(`/environments/${env.name}`);
    await screenshot(page, 'nodes');

    // Not heard from for the bound: lost, and its environment failed with it (the slot is free).
    await agent!.kill('SIGKILL');
    s.clock.advance(NODE_LOST_MS + 1000);
    await row.getByText('lost', { exact: true }).waitFor();
    await expect.poll(cells).toEqual(['remote', 'lost', '0 of 2', `0 of ${machine}`, '–', expect.any(String), '–']);
    expect((await admin.get(`/v1/environments/${env.id}`)).body).toMatchObject({ state: 'failed', error: expect.stringContaining('lost') });
    await screenshot(page, 'nodes-lost');

    await startAgent();
    await row.getByText('online', { exact: true }).waitFor();
    expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    expect(c.problems).toEqual([]);
  });

  it('shows a member the same nodes and templates (the API lets members read both)', async () => {
    const token = (await admin.post('/v1/tokens', { email: 'dev@example.com', name: 'nodes' })).body.secret;
    const member = await openConsole(browser, s.url);
    try {
      await signIn(member.page, token);
      const nav = member.page.getByRole('navigation', { name: 'Main' });
      expect(await nav.getByRole('link', { name: 'Quotas' }).count()).toBe(0);
      await navigate(member.page, 'Nodes');
      const row = member.page.getByRole('row').filter({ has: member.page.getByRole('rowheader', { name: 'builder-1', exact: true }) });
      await row.getByText('online', { exact: true }).waitFor();
      expect((await row.getByRole('cell').allTextContents()).slice(0, 3)).toEqual(['remote', 'online', '0 of 2']);
      await navigate(member.page, 'Templates');
      await member.page.getByRole('link', { name: 'builder', exact: true }).click();
      await member.page.getByRole('heading', { level: 1, name: 'Template builder' }).waitFor();
      expect(member.problems).toEqual([]);
    } finally {
      await member.context.close();
    }
  });
});
