/**
 * Summarizes V8 CPU profiles (.cpuprofile, from `node --cpu-prof` or BENCH_PROFILE of
 * bench/environments.ts): where the busy time goes, by package (self and inclusive) and by
 * function (self and inclusive). Percentages are of the busy time (idle excluded).
 *
 *   npx tsx bench/cpuprofile-summary.ts <file.cpuprofile>… [--top 25] [--match <regex>] [--per <n>] [--callers <regex>]
 *
 * --per divides every time by n (the requests or messages of the profiled window) to give µs each.
 * --callers shows, for the functions whose name matches, the call chains their self time came from.
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
    return rel[0] === 'src' && rel.length >= 2 ? `berth src/${rel[1]}` : `berth ${rel[0]}`;
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

/** Socket writes: on a 2-core machine shared with PostgreSQL, kernel time plus waiting for a core. */
const SOCKET_WRITES = new Set(['writev', 'writeBuffer', 'writeUtf8String', 'writeLatin1String']);

/** The layers a read or a delivery goes through, by package (first match wins). */
const LAYERS: [RegExp, string][] = [
  [/^\(garbage collector\)$/, 'garbage collection'],
  [/^socket writes$/, 'socket writes (kernel, and waiting for a core after waking the peer)'],
  [/^@prisma\//, 'Prisma (client, query interpreter, driver adapter)'],
  [/^(pg|pg-protocol|pg-pool|pg-types|postgres-\w+)$/, 'node-postgres (protocol, result parsing)'],
  [/^(@electric-sql\/|wasm:)/, 'PGlite (PostgreSQL in WASM, its socket server)'],
  [
    /^(graphql-yoga|@graphql-yoga\/|@whatwg-node\/|node:per_context|node:abort_controller|@envelop\/|@escape\.tech\/)/,
    'yoga, envelop and the Fetch API layer',
  ],
  [/^(graphql|graphql-jit)$|^(@graphql-tools|@pothos)\//, 'GraphQL execution (graphql-js, graphql-tools, Pothos)'],
  [/^@repeaterjs\//, 'async iterators (Repeater: pub/sub and each subscription)'],
  [/^(graphql-ws|ws)$/, 'graphql-ws and ws'],
  [/^berth src\//, "Berth's own code (src/)"],
  [/^node:/, 'node core (http, net, streams, events, timers)'],
];

function layerOf(pkg: string): string {
  return LAYERS.find(([re]) => re.test(pkg))?.[1] ?? `other: ${pkg}`;
}

interface Options {
  top: number;
  match?: RegExp;
  per?: number;
  callers?: RegExp;
}

function summarize(profile: Profile, { top, match, per, callers }: Options): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  /** A native frame (JSON.stringify, a hash, a syscall) counts for the JS code that called it. */
  const layerPackage = (id: number): string => {
    const frame = byId.get(id)!.callFrame;
    if (frame.url || frame.functionName.startsWith('(')) return packageOf(frame);
    if (SOCKET_WRITES.has(frame.functionName)) return 'socket writes';
    for (let at = parent.get(id); at !== undefined; at = parent.get(at)) {
      const caller = byId.get(at)!.callFrame;
      if (caller.url) return packageOf(caller);
    }
    return '(native)';
  };

  const selfFn = new Map<string, number>();
  const selfPkg = new Map<string, number>();
  const inclFn = new Map<string, number>();
  const inclPkg = new Map<string, number>();
  const layers = new Map<string, number>();
  const callerChains = new Map<string, number>();
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
    add(layers, layerOf(layerPackage(id)), us);
    const fns = new Set<string>();
    const pkgs = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)!.callFrame;
      if (frame.functionName === '(root)') break;
      fns.add(functionOf(frame));
      pkgs.add(packageOf(frame));
    }
    for (const f of fns) add(inclFn, f, us);
    if (callers?.test(functionOf(node.callFrame))) {
      const chain: string[] = [];
      for (let at = parent.get(id); at !== undefined && chain.length < 6; at = parent.get(at)) {
        const frame = byId.get(at)!.callFrame;
        if (frame.functionName !== '(root)') chain.push(functionOf(frame));
      }
      add(callerChains, `${functionOf(node.callFrame)}\n      ← ${chain.join('\n      ← ')}`, us);
    }
    for (const p of pkgs) add(inclPkg, p, us);
  });

  const rows = (m: Map<string, number>, n: number) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(
        ([k, us]) =>
          `  ${(us / 1000).toFixed(0).padStart(7)} ms ${((100 * us) / busy).toFixed(1).padStart(5)} %` +
          `${per ? `${(us / per).toFixed(1).padStart(8)} µs each` : ''}  ${k}`,
      )
      .join('\n');
  const wall = (profile.endTime - profile.startTime) / 1e6;
  return [
    `busy ${(busy / 1e6).toFixed(2)} s of ${wall.toFixed(2)} s profiled (idle ${(idle / 1e6).toFixed(2)} s); percentages are of the busy time`,
    ...(per ? [`(µs each: per one of ${per} requests or messages)`] : []),
    '',
    'self time by layer (a native frame counts for its JS caller; socket writes apart):',
    rows(layers, 20),
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
    ...(callers ? ['', `self time of the functions matching ${callers}, by their nearest callers:`, rows(callerChains, 10)] : []),
  ].join('\n');
}

const args = process.argv.slice(2);
const topAt = args.indexOf('--top');
const top = topAt >= 0 ? Number(args.splice(topAt, 2)[1]) : 25;
const matchAt = args.indexOf('--match');
const match = matchAt >= 0 ? new RegExp(args.splice(matchAt, 2)[1]!) : undefined;
const perAt = args.indexOf('--per');
const per = perAt >= 0 ? Number(args.splice(perAt, 2)[1]) : undefined;
const callersAt = args.indexOf('--callers');
const callers = callersAt >= 0 ? new RegExp(args.splice(callersAt, 2)[1]!) : undefined;
if (args.length === 0) {
  console.error(
    'usage: npx tsx bench/cpuprofile-summary.ts <file.cpuprofile>… [--top 25] [--match <regex>] [--per <n>] [--callers <regex>]',
  );
  process.exit(2);
}
for (const file of args) {
  console.log(`== ${basename(file)}\n${summarize(JSON.parse(await readFile(file, 'utf8')) as Profile, { top, match, per, callers })}\n`);
}
