/**
 * Summarizes V8 CPU profiles (.cpuprofile, from `node --cpu-prof` or BENCH_PROFILE of
 * bench/environments.ts): where the busy time goes, by package (self and inclusive) and by
 * function (self and inclusive). Percentages are of the busy time (idle excluded).
 *
 *   npx tsx bench/cpuprofile-summary.ts <file.cpuprofile>… [--top 25] [--match <regex>]
 *
 * --match lists the inclusive time of every function whose name (with its file) matches, e.g.
 * --match '^(authenticate|execute|stringify) '.
 */
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

const REPO = fileURLToPath(new URL('..', import.meta.url));

/** Where a frame's code lives: a package, a part of Berth, node itself, or V8's own buckets. */
function packageOf(frame: ProfileNode['callFrame']): string {
  const { url, functionName } = frame;
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/')[url.startsWith('node:internal/') ? 1 : 0]}`;
  const path = url.replace(/^file:\/\//, '');
  const nm = path.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const parts = path.slice(nm + 14).split('/');
    return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
  }
  if (path.startsWith(REPO)) {
    const rel = path.slice(REPO.length).split('/');
    return rel[0] === 'src' && rel.length > 2 ? `berth src/${rel[1]}` : `berth ${rel[0]}`;
  }
  return path;
}

function shortUrl(url: string): string {
  const path = url.replace(/^file:\/\//, '');
  const nm = path.lastIndexOf('/node_modules/');
  if (nm >= 0) return path.slice(nm + 14);
  return path.startsWith(REPO) ? path.slice(REPO.length) : path;
}

function functionOf(frame: ProfileNode['callFrame']): string {
  const name = frame.functionName || '(anonymous)';
  if (!frame.url) return name;
  // tsx's transpiled TypeScript has its own line numbers: the file says enough.
  return frame.url.endsWith('.ts') ? `${name} ${shortUrl(frame.url)}` : `${name} ${shortUrl(frame.url)}:${frame.lineNumber + 1}`;
}

const IDLE = new Set(['(idle)', '(root)']);

function summarize(profile: Profile, top: number, match?: RegExp): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

  const selfFn = new Map<string, number>();
  const selfPkg = new Map<string, number>();
  const inclFn = new Map<string, number>();
  const inclPkg = new Map<string, number>();
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  let busy = 0;
  let idle = 0;
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0;
    const node = byId.get(id)!;
    if (IDLE.has(node.callFrame.functionName)) {
      idle += us;
      return;
    }
    busy += us;
    add(selfFn, functionOf(node.callFrame), us);
    add(selfPkg, packageOf(node.callFrame), us);
    const fns = new Set<string>();
    const pkgs = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)!.callFrame;
      if (frame.functionName === '(root)') break;
      fns.add(functionOf(frame));
      pkgs.add(packageOf(frame));
    }
    for (const f of fns) add(inclFn, f, us);
    for (const p of pkgs) add(inclPkg, p, us);
  });

  const rows = (m: Map<string, number>, n: number) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, us]) => `  ${(us / 1000).toFixed(0).padStart(7)} ms ${((100 * us) / busy).toFixed(1).padStart(5)} %  ${k}`)
      .join('\n');
  const wall = (profile.endTime - profile.startTime) / 1e6;
  return [
    `busy ${(busy / 1e6).toFixed(2)} s of ${wall.toFixed(2)} s profiled (idle ${(idle / 1e6).toFixed(2)} s); percentages are of the busy time`,
    '',
    'self time by package:',
    rows(selfPkg, 15),
    '',
    'inclusive time by package (a sample counts once for each package on its stack):',
    rows(inclPkg, 15),
    '',
    'self time by function:',
    rows(selfFn, top),
    '',
    'inclusive time by function:',
    rows(inclFn, top),
    ...(match
      ? ['', `inclusive time of the functions matching ${match}:`, rows(new Map([...inclFn].filter(([k]) => match.test(k))), 1000)]
      : []),
  ].join('\n');
}

const args = process.argv.slice(2);
const topAt = args.indexOf('--top');
const top = topAt >= 0 ? Number(args.splice(topAt, 2)[1]) : 25;
const matchAt = args.indexOf('--match');
const match = matchAt >= 0 ? new RegExp(args.splice(matchAt, 2)[1]!) : undefined;
if (args.length === 0) {
  console.error('usage: npx tsx bench/cpuprofile-summary.ts <file.cpuprofile>… [--top 25] [--match <regex>]');
  process.exit(2);
}
for (const file of args) {
  console.log(`== ${basename(file)}\n${summarize(JSON.parse(await readFile(file, 'utf8')) as Profile, top, match)}\n`);
}
