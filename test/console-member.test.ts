import type { Browser, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type ConsolePage, launchBrowser, navigate, openConsole, screenshot } from './helpers/browser';
import { BOOTSTRAP, client, startServer, type TestServer } from './helpers/server';

const PHONE = { width: 390, height: 844 };
const PAGES = ['Environments', 'Templates', 'Sandboxes', 'Nodes', 'Artifacts', 'Snapshots', 'Settings'];

/** Whether the page scrolls sideways (tables may, inside their own frame; the page must not). */
const overflows = (page: Page) => page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);

// A member (not an admin) on a phone-sized screen, using the keyboard.
describe('web console: a member on a 390 px wide screen', () => {
  let s: TestServer;
  let browser: Browser;
  let c: ConsolePage;
  let page: Page;
  let token: string;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer('pglite');
    const created = await admin.post('/v1/tokens', { email: 'dev@example.com', name: 'phone' });
    token = created.body.secret;
    await admin.post('/v1/sandboxes', { name: 'dev-laptop' });
    await admin.post('/v1/environments', {
      template: 'default',
      sandbox: 'dev-laptop',
      shares: { src: '.' },
      labels: { team: 'mobile', purpose: 'a-rather-long-label-value' },
    });
    browser = await launchBrowser();
    c = await openConsole(browser, s.url, PHONE);
    page = c.page;
    page.setDefaultTimeout(15_000);
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') await screenshot(page, `failed-member-${ctx.task.name.slice(0, 40)}`);
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  it('signs in with the keyboard alone; a wrong token is refused', async () => {
    await screenshot(page, 'sign-in-390');
    // The Token field has the focus; Enter submits.
    await page.keyboard.type('bct_wrong-token');
    await page.keyboard.press('Enter');
    await page.getByRole('alert').getByText('refused').waitFor();
    expect(await overflows(page)).toBe(false);
    await page.keyboard.press('ControlOrMeta+a');
    await page.keyboard.type(token);
    await page.keyboard.press('Enter');
    await page.getByRole('navigation', { name: 'Main' }).waitFor();
    await page.getByText('dev@example.com', { exact: false }).first().waitFor();
  });

  it('shows no Quotas to a member, and says so at its address', async () => {
    const nav = page.getByRole('navigation', { name: 'Main' });
    for (const link of PAGES) expect(await nav.getByRole('link', { name: link, exact: true }).isVisible(), link).toBe(true);
    expect(await nav.getByRole('link', { name: 'Quotas' }).count()).toBe(0);
    await navigate(page, 'Settings');
    await page.getByRole('heading', { level: 2, name: 'CLI tokens' }).waitFor();
    expect(await page.getByRole('heading', { name: 'API keys' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Shred project' }).count()).toBe(0);
    // A reload keeps this tab's session (session storage).
    await page.goto('/quotas');
    await page.getByRole('heading', { level: 1, name: 'Admins only' }).waitFor();
  });

  it('fits every page in 390 px: tables scroll in their frame, never the page', async () => {
    for (const name of PAGES) {
      await navigate(page, name);
      await page.getByRole('status').or(page.getByRole('table')).or(page.locator('.empty')).first().waitFor();
      if (name === 'Environments') await page.getByRole('row').nth(1).waitFor();
      expect(await overflows(page), name).toBe(false);
      for (const link of await page.getByRole('navigation', { name: 'Main' }).getByRole('link').all()) {
        const box = (await link.boundingBox())!;
        expect(box.x + box.width, name).toBeLessThanOrEqual(PHONE.width);
      }
      await screenshot(page, `${name.toLowerCase()}-390`);
    }
    await navigate(page, 'Environments');
    await page.getByRole('link', { name: 'New environment' }).click();
    await page.getByRole('button', { name: 'Create', exact: true }).waitFor();
    expect(await overflows(page)).toBe(false);
    await screenshot(page, 'new-environment-390');
  });

  it('moves through the navigation with the keyboard', async () => {
    await page.goto('/environments');
    await page.getByRole('heading', { level: 1, name: 'Environments' }).waitFor();
    // The page's heading has the focus: the page's own controls come next, the navigation before.
    expect(await page.evaluate(() => document.activeElement?.tagName)).toBe('H1');
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('New environment');
    for (let i = 0; i < 10; i++) {
      await page.keyboard.press('Shift+Tab');
      if ((await page.evaluate(() => document.activeElement?.textContent)) === 'Sandboxes') break;
    }
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { level: 1, name: 'Sandboxes' }).waitFor();
    // The new page's heading takes the focus, so a screen reader announces where it is.
    expect(await page.evaluate(() => document.activeElement?.tagName)).toBe('H1');
  });

  it('shows an error state, with a way to try again, for what does not exist', async () => {
    await page.goto('/environments/no-such-env-0000');
    const alert = page.getByRole('alert');
    await alert.waitFor();
    expect(await alert.textContent()).toContain('not found');
    // The GraphQL error's code (extensions.code) is shown beside its message.
    expect(await alert.locator('code').allTextContents()).toEqual(['not_found']);
    expect(await alert.getByRole('button', { name: 'Try again' }).isVisible()).toBe(true);
    await screenshot(page, 'not-found-390');
  });

  it('ends the session when the token is revoked, and says so', async () => {
    const tokens = (await admin.get('/v1/tokens')).body.tokens as { id: string; name: string }[];
    await admin.del(`/v1/tokens/${tokens.find((t) => t.name === 'phone')!.id}`);
    // At once, without a click: the server closes the revoked token's WebSocket with 4401.
    await page.getByLabel('Token').waitFor();
    expect(await page.getByRole('status').textContent()).toContain('signed out');
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
    expect(c.problems).toEqual([]);
  });

  it('ends the session when a download is refused with a 401, and says so', async () => {
    const second = (await admin.post('/v1/tokens', { email: 'dev@example.com', name: 'phone-2' })).body;
    expect((await admin.post('/v1/artifacts?name=notes.txt', 'hello', { 'content-type': 'application/octet-stream' })).status).toBe(201);
    await page.getByLabel('Token').fill(second.secret);
    await page.keyboard.press('Enter');
    await navigate(page, 'Artifacts');
    const download = page.getByRole('button', { name: 'Download notes.txt' });
    await download.waitFor();
    // The server refuses the download as it refuses a revoked token (revoking it for real would
    // close the console's WebSocket first, which the test above covers).
    await page.route('**/v1/artifacts/*/content', (route) =>
      route.fulfill({
        status: 401,
        contentType: 'application/json',
        body: JSON.stringify({ error: 'this credential was revoked', code: 'unauthorized' }),
      }),
    );
    await download.click();
    await page.getByLabel('Token').waitFor();
    expect(await page.getByRole('status').textContent()).toContain('signed out');
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
    expect(c.problems).toEqual([]);
  });
});
