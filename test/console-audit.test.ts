import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, navigate, openConsole, screenshot, signIn } from './helpers/browser';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';

// The Audit page: an admin reads the organization's events and filters them; a member has no
// such page.
describe('web console: audit log', () => {
  let s: TestServer;
  let browser: Browser;
  let page: Page;
  let memberToken: string;
  let keyId: string;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer('pglite');
    memberToken = (await admin.post('/v1/tokens', { email: 'dev@example.com', name: 'laptop' })).body.secret;
    keyId = (await admin.post('/v1/keys', { name: 'deploy-bot' })).body.key.id;
    const member = client(() => s.url, memberToken);
    expect((await member.post('/v1/environments', { template: 'default' })).status).toBe(202);
    expect((await member.del(`/v1/keys/${keyId}`)).status).toBe(403);
    browser = await launchBrowser();
    page = (await openConsole(browser, s.url)).page;
    page.setDefaultTimeout(15_000);
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-audit-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  const events = () => page.getByRole('region', { name: 'Audit events' }).getByRole('row');

  it('shows an admin the events, newest first, and filters them', async () => {
    await signIn(page, BOOTSTRAP);
    await navigate(page, 'Audit');
    const table = page.getByRole('region', { name: 'Audit events' });
    await table.getByRole('rowheader', { name: 'key.revoke' }).waitFor();
    // Header, then key.revoke (denied), environment.create, key.create, token.create.
    expect(await events().count()).toBe(5);
    const denied = events().filter({ has: page.getByRole('rowheader', { name: 'key.revoke' }) });
    await expect.poll(() => denied.textContent()).toContain('denied');
    expect(await denied.textContent()).toContain('dev@example.com');
    expect(await denied.textContent()).toContain(keyId);
    await screenshot(page, 'audit');

    await page.getByLabel('Action').selectOption('environment.create');
    await page.getByRole('button', { name: 'Filter', exact: true }).click();
    await expect.poll(() => events().count()).toBe(2);
    expect(await table.getByRole('rowheader').allTextContents()).toEqual(['environment.create']);

    await page.getByLabel('Action').selectOption('');
    await page.getByLabel('Actor').fill('dev@example.com');
    await page.getByRole('button', { name: 'Filter', exact: true }).click();
    await expect.poll(() => table.getByRole('rowheader').allTextContents()).toEqual(['key.revoke', 'environment.create']);

    await page.getByLabel('Actor').fill('');
    await page.getByLabel('Target').fill(keyId);
    await page.getByRole('button', { name: 'Filter', exact: true }).click();
    await expect.poll(() => table.getByRole('rowheader').allTextContents()).toEqual(['key.revoke', 'key.create']);

    // A time window before anything happened.
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await page.getByLabel('Until').fill('2001-01-01T00:00:00');
    await page.getByRole('button', { name: 'Filter', exact: true }).click();
    await page.getByText('No events match these filters.').waitFor();
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await expect.poll(() => events().count()).toBe(5);
  });

  it('gives a member no Audit page', async () => {
    const member = await openConsole(browser, s.url);
    try {
      await signIn(member.page, memberToken);
      const nav = member.page.getByRole('navigation', { name: 'Main' });
      await nav.getByRole('link', { name: 'Environments', exact: true }).waitFor();
      expect(await nav.getByRole('link', { name: 'Audit' }).count()).toBe(0);
      // A reload keeps this tab's session (session storage).
      await member.page.goto('/audit');
      await member.page.getByRole('heading', { level: 1, name: 'Admins only' }).waitFor();
      await member.page.getByText('Only admins of the organization read the audit log.').waitFor();
      expect(await member.page.getByRole('region', { name: 'Audit events' }).count()).toBe(0);
    } finally {
      await member.context.close();
    }
  });
});
