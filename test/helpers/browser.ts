import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';

/** Debian's Chromium (`apt-get install -y chromium`); playwright-core downloads no browser. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** The templates catalog the console suites start Berth with. */
export const CONSOLE_TEMPLATES = join(import.meta.dirname, '..', 'fixtures', 'templates-console.json');

/** Screenshots of the console's pages, for people to look at (ignored by git). */
export const SCREENSHOTS = join(import.meta.dirname, '..', '..', 'test-results', 'console');

export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: install it (apt-get install -y chromium) or set CHROMIUM_PATH`);
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    // These machines have no outside network: nothing may try to reach it.
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

export interface ConsolePage {
  context: BrowserContext;
  page: Page;
  /** Content-Security-Policy violations and uncaught errors seen so far. */
  problems: string[];
  /** Every WebSocket message the page sent, in order. */
  sent: string[];
  /** Called after each message sent. */
  waiters: Set<() => void>;
}

/** A fresh browser context (its own session storage) on the console at `url`. */
export async function openConsole(browser: Browser, url: string, viewport = { width: 1280, height: 900 }): Promise<ConsolePage> {
  const context = await browser.newContext({ viewport, baseURL: url });
  const page = await context.newPage();
  const problems: string[] = [];
  const sent: string[] = [];
  const waiters = new Set<() => void>();
  page.on('websocket', (ws) =>
    ws.on('framesent', (frame) => {
      sent.push(String(frame.payload));
      for (const waiter of [...waiters]) waiter();
    }),
  );
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && /Content Security Policy|Refused to/.test(msg.text())) problems.push(`CSP: ${msg.text()}`);
  });
  await page.goto('/');
  return { context, page, problems, sent, waiters };
}

/**
 * Waits until the page has sent the subscription `operation` over its WebSocket (after its
 * `since`-th message), so that a change made next reaches it.
 */
export function subscribed(c: ConsolePage, operation: string, since: number): Promise<void> {
  const pattern = new RegExp(`"type":"subscribe".*subscription ${operation}\\b`);
  return new Promise((resolve, reject) => {
    const check = () => c.sent.slice(since).some((m) => pattern.test(m));
    if (check()) return resolve();
    const timer = setTimeout(() => reject(new Error(`the page did not subscribe to ${operation}`)), 15_000);
    c.waiters.add(function waiter() {
      if (!check()) return;
      c.waiters.delete(waiter);
      clearTimeout(timer);
      resolve();
    });
  });
}

export async function signIn(page: Page, token: string): Promise<void> {
  await page.getByLabel('Token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('navigation', { name: 'Main' }).waitFor();
}

export async function screenshot(page: Page, name: string): Promise<void> {
  await mkdir(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/** Goes to a page through the navigation (a client-side route change, no reload). */
export async function navigate(page: Page, link: string): Promise<void> {
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: link, exact: true }).click();
  await page.getByRole('heading', { level: 1, name: link }).waitFor();
}

/** The row of a table whose name (its link) is exactly `name`. */
export const rowOf = (page: Page, name: string) => page.getByRole('row').filter({ has: page.getByRole('link', { name, exact: true }) });
