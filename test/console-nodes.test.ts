import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { bytes } from '../console/src/format';
import { memoryReserve } from '../src/node/capacity';
import { graphql } from './gql';
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
import { nodeChannel } from './helpers/node-channel';
import { type Proc, spawnNode } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';

const WarmCounts = graphql(`
  query TestTemplateWarm {
    templates { name warm warmReady }
  }
`);

/** A node is lost when not heard from for this long (the server's clock, which the test moves). */
const NODE_LOST_MS = 3000;
/** What a node on this machine offers by default: its memory less the node's reserve. */
const OFFERED_MEMORY = totalmem() - memoryReserve(totalmem());

/** The console's catalog, plus pools only `berth node` serves and a template that sets every field. */
async function catalog(dir: string): Promise<string> {
  const base = JSON.parse(await readFile(CONSOLE_TEMPLATES, 'utf8'));
  base.pools.push({ name: 'remote', hotNodes: 0, maxQueued: 10 }, { name: 'warm', hotNodes: 0, maxQueued: 10 });
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

// The Nodes and Templates pages: an admin sees each template's warm containers ready (made by a
// stand-in node) and limits, watches a real `berth node` come online, take an environment, get
// lost and come back, without a reload; a member sees the same pages.
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

  it('lists the templates with their warm containers ready and limits, each linked to its page', async () => {
    // A node of the warm pool, played by a stand-in on its control channel that makes warm
    // containers when the test says; its heartbeats keep it online past NODE_LOST_MS.
    const warmer = (await admin.post('/v1/nodes', { pool: 'warm', name: 'warmer' })).body;
    const stand = await nodeChannel(s.url, warmer.secret);
    const heartbeat = setInterval(() => stand.send({ type: 'heartbeat' }), 500);
    try {
      // With an engine: a node without one keeps no warm containers.
      stand.send({ type: 'hello', slots: 2, environments: [], engine: 'unix:///run/warmer.sock' });
      expect(await stand.next()).toMatchObject({ type: 'welcome' });
      const spec = {
        pool: 'warm',
        image: 'docker.io/library/alpine:3.20',
        idle: '30m',
        hard: '2h',
        warm: 2,
        resources: { cpus: 1, memory: '512MiB' },
      };
      expect((await admin.put('/v1/templates/warmbox', spec)).status).toBe(201);
      // The warm job asks the node for both (after the template's image to pull ahead).
      const asked: { slot: string; since: string }[] = [];
      while (asked.length < 2) {
        const frame = (await stand.next()) as { type: string; warm?: { slot: string; since: string } };
        if (frame.type === 'warm') asked.push(frame.warm!);
      }
      /** Ready warm containers of warmbox as GET /v1/nodes lists them (what `berth template ls` counts). */
      const readyListed = async () =>
        (await admin.get('/v1/nodes')).body.nodes
          .flatMap((n: { warm: { template: string; state: string }[] }) => n.warm)
          .filter((w: { template: string; state: string }) => w.template === 'warmbox' && w.state === 'ready').length;
      const makeReady = async (slot: { slot: string; since: string }, count: number) => {
        stand.send({ type: 'warm-ready', ...slot });
        await expect.poll(readyListed).toBe(count);
      };
      await makeReady(asked[0]!, 1);
      // GraphQL counts them by the same rule.
      const counted = (await admin.gql(WarmCounts)).body.data?.templates;
      expect(counted?.find((t) => t.name === 'warmbox')).toEqual({ name: 'warmbox', warm: 2, warmReady: 1 });

      await navigate(page, 'Templates');
      const table = page.getByRole('region', { name: 'Templates' });
      await table.waitFor();
      const names = (await admin.get('/v1/templates')).body.templates.map((t: { name: string }) => t.name);
      expect(names).toEqual(expect.arrayContaining(['builder', 'default', 'warmbox']));
      expect(await table.getByRole('rowheader').allTextContents()).toEqual(names);
      expect(await rowOf(page, 'builder').getByRole('cell').allTextContents()).toEqual([
        'Builds on the remote pool',
        'remote',
        'docker.io/library/debian:bookworm-slim',
        'egress',
        '–',
        '2 CPUs, 4GiB memory, 2048 processes, 16GiB disk',
        '20m0s',
        '4h0m0s',
      ]);
      // Warm: ready of those asked for; limits: those set, or none.
      expect((await rowOf(page, 'warmbox').getByRole('cell').allTextContents()).slice(4, 6)).toEqual([
        '1 of 2 ready',
        '1 CPU, 512MiB memory',
      ]);
      expect((await rowOf(page, 'default').getByRole('cell').allTextContents()).slice(4, 6)).toEqual(['–', '–']);
      await screenshot(page, 'templates');

      // Read when opened: the second one shows on the template's page, and back on the list.
      await makeReady(asked[1]!, 2);
      await rowOf(page, 'warmbox').getByRole('link', { name: 'warmbox', exact: true }).click();
      await page.getByRole('heading', { level: 1, name: 'Template warmbox' }).waitFor();
      await field('Warm containers').getByText('2 of 2 ready', { exact: true }).waitFor();
      await navigate(page, 'Templates');
      await rowOf(page, 'warmbox').getByRole('cell', { name: '2 of 2 ready', exact: true }).waitFor();
    } finally {
      clearInterval(heartbeat);
      stand.ws.close();
    }
    expect((await admin.del(`/v1/nodes/${warmer.node.id}`)).status).toBe(200);
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
    expect(await field('Warm containers').textContent()).toBe('–');
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
    // An admin's last cell: the node's cordon button.
    expect(await cells()).toEqual(['remote', 'lost', '0 of 0', 'not reported yet', '–', 'never', '–', 'Cordon']);

    await startAgent();
    await row.getByText('online', { exact: true }).waitFor();
    // Without an engine its capacity is the host's (this machine's), less the reserve.
    const machine = `${availableParallelism()} CPUs, 0 B of ${bytes(OFFERED_MEMORY)}`;
    await expect
      .poll(cells)
      .toEqual(['remote', 'online', '0 of 2', `0 of ${machine}`, '–', expect.not.stringMatching(/^never$/), '–', 'Cordon']);
    await screenshot(page, 'nodes-online');

    // An environment of its pool takes a slot; its name links to its page.
    const env = (await admin.post('/v1/environments', { template: 'builder' })).body.environment;
    await untilState(s, BOOTSTRAP, env.id, 'ready');
    expect((await admin.get(`/v1/environments/${env.id}`)).body.node).toBe('builder-1');
    await row.getByRole('link', { name: env.name, exact: true }).waitFor();
    expect((await cells())[2]).toBe('1 of 2');
    // The template's limits: 2 CPUs, 4 GiB.
    expect((await cells())[3]).toBe(`2 of ${availableParallelism()} CPUs, 4.0 GiB of ${bytes(OFFERED_MEMORY)}`);
    expect(await row.getByRole('link', { name: env.name }).getAttribute('href')).toBe(`/environments/${env.name}`);
    await screenshot(page, 'nodes');

    // Not heard from for the bound: lost, and its environment failed with it (the slot is free).
    await agent!.kill('SIGKILL');
    s.clock.advance(NODE_LOST_MS + 1000);
    await row.getByText('lost', { exact: true }).waitFor();
    await expect.poll(cells).toEqual(['remote', 'lost', '0 of 2', `0 of ${machine}`, '–', expect.any(String), '–', 'Cordon']);
    expect((await admin.get(`/v1/environments/${env.id}`)).body).toMatchObject({ state: 'failed', error: expect.stringContaining('lost') });
    await screenshot(page, 'nodes-lost');

    await startAgent();
    await row.getByText('online', { exact: true }).waitFor();
    expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
    expect(c.problems).toEqual([]);
  });

  it('lets an admin cordon and uncordon a node from the page; a member sees the cordon live, with no buttons', async () => {
    const row = nodeRow('builder-1');
    await row.getByText('online', { exact: true }).waitFor();
    // The built-in node serves every organization: no button for it.
    expect(await nodeRow('builtin (built-in)').getByRole('button').count()).toBe(0);
    /** builder-1's cordon as GET /v1/nodes lists it (absent while it takes work). */
    const listed = async (): Promise<{ at: string; by: string } | undefined> =>
      (await admin.get('/v1/nodes')).body.nodes.find((n: { name: string }) => n.name === 'builder-1').cordoned;

    const token = (await admin.post('/v1/tokens', { email: 'ops@example.com', name: 'cordons' })).body.secret;
    const member = await openConsole(browser, s.url);
    try {
      await signIn(member.page, token);
      const mark = member.sent.length;
      await navigate(member.page, 'Nodes');
      await subscribed(member, 'NodesChanged', mark);
      const memberRow = member.page
        .getByRole('row')
        .filter({ has: member.page.getByRole('rowheader', { name: 'builder-1', exact: true }) });
      await memberRow.getByText('online', { exact: true }).waitFor();
      const memberTable = member.page.getByRole('region', { name: 'Nodes' });
      expect(await memberTable.getByRole('columnheader', { name: 'Cordon' }).count()).toBe(0);

      await row.getByRole('button', { name: 'Cordon builder-1' }).click();
      const badge = row.getByText(/^cordoned by /);
      await badge.waitFor();
      const cordon = await listed();
      expect(cordon).toEqual({ at: expect.any(String), by: expect.any(String) });
      expect(await badge.textContent()).toContain(`cordoned by ${cordon!.by} since `);
      await row.getByRole('button', { name: 'Uncordon builder-1' }).waitFor();
      // Its state stays what it was: a cordoned node is still online.
      expect((await row.getByRole('cell').allTextContents())[1]).toMatch(/^online/);
      await screenshot(page, 'nodes-cordoned');
      // The member's page hears it through nodesChanged, and offers no button.
      await memberRow.getByText(`cordoned by ${cordon!.by} since `).waitFor();
      expect(await memberTable.getByRole('button').count()).toBe(0);
      await screenshot(member.page, 'nodes-cordoned-member');

      await row.getByRole('button', { name: 'Uncordon builder-1' }).click();
      await badge.waitFor({ state: 'detached' });
      await row.getByRole('button', { name: 'Cordon builder-1' }).waitFor();
      expect(await listed()).toBeUndefined();
      await memberRow.getByText(/^cordoned by /).waitFor({ state: 'detached' });
      expect(await page.getByRole('alert').count()).toBe(0);
      expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
      expect(c.problems).toEqual([]);
      expect(member.problems).toEqual([]);
    } finally {
      await member.context.close();
    }
  });

  it("shows a degraded node's engine trouble as the node says it, and online again, without a reload", async () => {
    const created = await admin.post('/v1/nodes', { pool: 'remote', name: 'shaky' });
    const stand = await nodeChannel(s.url, created.body.secret);
    const heartbeat = setInterval(() => stand.send({ type: 'heartbeat' }), 500);
    try {
      stand.send({ type: 'hello', slots: 1, environments: [], engine: 'unix:///run/shaky.sock' });
      expect(await stand.next()).toMatchObject({ type: 'welcome' });
      const row = nodeRow('shaky');
      await row.getByText('online', { exact: true }).waitFor();
      const trouble = 'the container engine unix:///run/shaky.sock does not answer: connect ENOENT /run/shaky.sock';
      stand.send({ type: 'engine', error: trouble });
      await row.getByText('degraded', { exact: true }).waitFor();
      expect(await row.locator('.state-reason').textContent()).toMatch(
        /^the container engine unix:\/\/\/run\/shaky\.sock does not answer: connect ENOENT \/run\/shaky\.sock \(since /,
      );
      await screenshot(page, 'nodes-degraded');
      stand.send({ type: 'engine', error: null });
      await row.getByText('online', { exact: true }).waitFor();
      expect(await row.locator('.state-reason').count()).toBe(0);
      expect(await page.evaluate(() => (window as unknown as { notReloaded?: boolean }).notReloaded)).toBe(true);
      expect(c.problems).toEqual([]);
    } finally {
      clearInterval(heartbeat);
      stand.ws.close();
    }
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
