// The Webhooks section of the console's Settings: an admin adds an endpoint and sees its secret
// once, sees it failing with its recent deliveries, and removes it; the URL field's hint says
// what the server does with internal addresses (WEBHOOK_ALLOW_PRIVATE), and a member sees none of it.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { graphql } from './gql';
import { type ConsolePage, launchBrowser, navigate, openConsole, screenshot, signIn } from './helpers/browser';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

const ALLOWED = 'http(s); internal addresses are allowed on this server (WEBHOOK_ALLOW_PRIVATE=1)';
const REFUSED = 'http(s); internal addresses (loopback, private, link-local) are refused';

const WebhookSettings = graphql(`
  query TestWebhookSettings {
    webhookSettings { allowPrivate }
  }
`);

/**
 * Opens Settings and checks the Webhooks form: `hint` under its URL field (its description), and
 * the field right under the section's heading and intro, above the Events (a form laid out inline
 * once aligned the field with the bottom of the tall Events list, leaving a blank gap above it).
 */
async function checkWebhookForm(page: Page, hint: string): Promise<void> {
  await navigate(page, 'Settings');
  const url = page.getByRole('textbox', { name: 'Webhook URL' });
  await page.getByText(hint, { exact: true }).waitFor();
  expect(await page.locator(`id=${await url.getAttribute('aria-describedby')}`).textContent()).toBe(hint);
  const box = async (locator: ReturnType<Page['locator']>) => (await locator.boundingBox())!;
  const heading = await box(page.getByRole('heading', { level: 2, name: 'Webhooks' }));
  const intro = await box(page.getByText("Endpoints that receive the organization's events", { exact: false }));
  const label = await box(page.getByText('Webhook URL', { exact: true }));
  const events = await box(page.getByRole('group', { name: 'Events' }));
  expect(intro.y).toBeGreaterThan(heading.y + heading.height);
  expect(intro.y - (heading.y + heading.height)).toBeLessThan(label.height);
  expect(label.y).toBeGreaterThan(intro.y + intro.height);
  expect(label.y - (intro.y + intro.height)).toBeLessThan(label.height);
  expect(events.y).toBeGreaterThan((await box(url)).y);
}

describeBackends('web console: webhooks in Settings', (backend) => {
  let s: TestServer;
  let browser: Browser;
  let c: ConsolePage;
  let page: Page;
  let receiver: http.Server;
  let hookUrl = '';
  let received = 0;
  let onRequest = () => {};
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    // An endpoint that always fails, so the console shows retries and the failing mark.
    receiver = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        received++;
        onRequest();
        res.writeHead(500).end('down for maintenance');
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', () => resolve()));
    hookUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    s = await startServer(backend, { WEBHOOK_ALLOW_PRIVATE: '1' });
    browser = await launchBrowser();
    c = await openConsole(browser, s.url);
    page = c.page;
    page.setDefaultTimeout(15_000);
    await signIn(page, BOOTSTRAP);
    await page.getByRole('heading', { level: 1, name: 'Environments' }).waitFor();
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-webhooks-${backend}-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
    receiver?.closeAllConnections();
    await new Promise((resolve) => receiver?.close(resolve));
  });

  /** Resolves once the receiver has had `count` requests (an event: each request checks). */
  const receivedAtLeast = (count: number) =>
    new Promise<void>((resolve) => {
      onRequest = () => {
        if (received >= count) resolve();
      };
      onRequest();
    });

  it('says internal addresses are allowed, under a URL field right under the heading', async () => {
    await checkWebhookForm(page, ALLOWED);
    expect((await admin.gql(WebhookSettings)).body).toEqual({ data: { webhookSettings: { allowPrivate: true } } });
    await screenshot(page, 'settings-webhook-form');
  });

  it('adds an endpoint, shows the secret once, its failing state and deliveries, and removes it', async () => {
    await navigate(page, 'Settings');
    await page.getByRole('heading', { name: 'Webhooks' }).waitFor();
    await page.getByText('No webhooks.').waitFor();
    await page.getByRole('textbox', { name: 'Webhook URL' }).fill(hookUrl);
    await page.getByRole('checkbox', { name: 'artifact.created' }).check();
    await page.getByRole('button', { name: 'Add webhook' }).click();
    const secret = await page.getByRole('textbox', { name: 'Signing secret' }).inputValue();
    expect(secret).toMatch(/^whsec_/);
    const table = page.getByRole('region', { name: 'Webhooks', exact: true }).getByRole('table');
    await table.getByRole('rowheader', { name: hookUrl }).waitFor();
    await screenshot(page, 'settings-webhook-added');

    // An artifact, then five failed attempts (the test clock moves the retries along).
    const res = await fetch(`${s.url}/v1/artifacts`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/octet-stream' },
      body: 'bytes',
    });
    expect(res.status).toBe(201);
    await receivedAtLeast(1);
    // The clock moves only once the attempt is on record, or its retry would be due later still.
    const hookId = (await admin.get('/v1/webhooks')).body.webhooks[0].id;
    await vi.waitFor(async () => expect((await admin.get(`/v1/webhooks/${hookId}/deliveries`)).body.deliveries[0]?.attempts).toBe(1), {
      timeout: 20_000,
      interval: 100,
    });
    for (const [i, wait] of [5_000, 30_000, 120_000, 600_000].entries()) {
      s.clock.advance(wait);
      await s.app.deps.background.tick();
      await receivedAtLeast(i + 2);
    }

    // Back to Settings: the secret is not shown again, the endpoint shows as failing.
    await navigate(page, 'Environments');
    await navigate(page, 'Settings');
    const row = table.getByRole('row').filter({ has: page.getByRole('rowheader', { name: hookUrl }) });
    await row.getByText(/Failing since/).waitFor();
    expect(await page.getByRole('textbox', { name: 'Signing secret' }).count()).toBe(0);
    await page.getByRole('button', { name: `Deliveries of ${hookUrl}` }).click();
    const deliveries = page.getByRole('region', { name: `Deliveries to ${hookUrl}` });
    const delivery = deliveries.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'artifact.created' }) });
    // Each failed attempt, numbered, with its time and error.
    const failed = delivery.getByRole('listitem');
    await failed.nth(4).waitFor();
    const attempts = await failed.allTextContents();
    expect(attempts).toHaveLength(5);
    for (const text of attempts) expect(text).toMatch(/: HTTP 500: down for maintenance$/);
    expect(await delivery.getByRole('cell').allTextContents()).toContain('5');
    await screenshot(page, 'settings-webhook-failing');

    await page.getByRole('button', { name: `Remove webhook ${hookUrl}` }).click();
    await page.getByText('No webhooks.').waitFor();
  });
});

describe('web console: webhooks on a server that refuses internal addresses', () => {
  let s: TestServer;
  let browser: Browser;
  let page: Page;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer('pglite');
    browser = await launchBrowser();
    page = (await openConsole(browser, s.url)).page;
    page.setDefaultTimeout(15_000);
    await signIn(page, BOOTSTRAP);
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-webhooks-strict-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  it('says internal addresses are refused, and refuses one under the field', async () => {
    await checkWebhookForm(page, REFUSED);
    expect((await admin.gql(WebhookSettings)).body).toEqual({ data: { webhookSettings: { allowPrivate: false } } });
    await page.getByRole('textbox', { name: 'Webhook URL' }).fill('http://127.0.0.1:9/hook');
    await page.getByRole('checkbox', { name: 'artifact.created' }).check();
    await page.getByRole('button', { name: 'Add webhook' }).click();
    await page.getByText(/an internal address/).waitFor();
    expect(await page.getByRole('textbox', { name: 'Webhook URL' }).getAttribute('aria-invalid')).toBe('true');
    await page.getByText('No webhooks.').waitFor();
    await screenshot(page, 'settings-webhook-refused');
  });

  it("shows a member no webhooks, and the API tells a member nothing of the server's setting", async () => {
    const token = (await admin.post('/v1/tokens', { email: 'dev@example.com', name: 'console' })).body.secret;
    const member = await openConsole(browser, s.url);
    try {
      await signIn(member.page, token);
      await navigate(member.page, 'Settings');
      // The admins' sections are drawn with the first one, or not at all.
      await member.page.getByRole('heading', { level: 2, name: 'CLI tokens' }).waitFor();
      expect(await member.page.getByRole('heading', { name: 'Webhooks' }).count()).toBe(0);
      expect(await member.page.getByRole('textbox', { name: 'Webhook URL' }).count()).toBe(0);
      expect(await member.page.getByText(/internal addresses/).count()).toBe(0);
      expect(member.problems).toEqual([]);
    } finally {
      await member.context.close();
    }
    const answer = (await client(() => s.url, token).gql(WebhookSettings)).body;
    expect(answer.data).toEqual({ webhookSettings: null });
    expect(answer.errors?.[0]?.extensions?.code).toBe('forbidden');
  });
});
