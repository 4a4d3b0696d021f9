// The share sync's sender against a receiver that does not speak the protocol
// (src/dataplane/folder-sync.ts): on the built-in pool the sender is the server itself.
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { duplexPair, sendFolder } from '../src/dataplane/folder-sync';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-folder-sync-'));
  await writeFile(join(dir, 'a.txt'), 'a');
});
afterEach(() => rm(dir, { recursive: true, force: true }));

it('ends the stream when the receiver sends more than an acknowledgement without a line end', async () => {
  const [near, far] = duplexPair();
  far.resume();
  const sent = sendFolder(near, { root: dir, rules: { include: [], noIgnore: true }, watch: false, final: true });
  // 4 MiB of one endless "line", a piece at a time as the sender reads them (a piece waits until
  // the one before was taken): the sender must not keep it.
  const piece = Buffer.alloc(64 * 1024, 'x');
  const closed = once(near, 'close');
  let written = 0;
  for (let i = 0; i < 64 && !near.destroyed; i++) {
    written += piece.length;
    await Promise.race([new Promise((resolve) => far.write(piece, resolve)), closed]);
  }
  await sent.catch(() => undefined);
  expect(near.destroyed).toBe(true);
  // Cut off once it looked at what came (past 1 KiB), long before all of it was sent.
  expect(written).toBeLessThan(16 * piece.length);
});
