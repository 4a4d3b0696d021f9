import { mkdtemp, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { duplexPair, receiveFolder, sendFolder } from '../src/dataplane/folder-sync.ts';

const a = await mkdtemp(join(tmpdir(), 'pa-'));
const b = await mkdtemp(join(tmpdir(), 'pb-'));
await writeFile(join(a, 'x.txt'), 'hello');
const [l, r] = duplexPair();
const ctl = new AbortController();
const s = sendFolder(l, {
  root: a,
  rules: { include: [], noIgnore: false },
  watch: true,
  signal: ctl.signal,
  onSynced: (st) => console.log('synced', st),
});
const rv = receiveFolder(r, { root: b, onBatch: (st) => console.log('batch', st) });
await new Promise((res) => setTimeout(res, 1000));
await writeFile(join(a, 'y.txt'), 'again');
await new Promise((res) => setTimeout(res, 1000));
console.log(await readdir(b));
ctl.abort();
l.end();
console.log(await s, await rv.catch((e) => e.message));
