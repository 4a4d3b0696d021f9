// `berth template ls`, `berth snapshot ls`: what the console lists, from a shell (`sandbox ls` and
// `node ls` are beside their siblings, src/cli/sandbox.ts and nodes.ts).
import type { Command } from 'commander';
import { BerthClient, type JsonOptions, withConnection } from './client';
import { bytes, json, since, table } from './format';
import type { RemoteNode } from './nodes';

interface Template {
  name: string;
  pool: string;
  image?: string | null;
  idle: string;
  hard: string;
  shares: { name: string; direction: string }[];
  services: { service: string }[];
  warm: number;
  resources: { cpus?: number; memory?: string; pids?: number; disk?: string };
}

interface Snapshot {
  key: string;
  share: string;
  files: number;
  bytes: number;
  lease: string;
  created: string;
}

/** A template's limits in a table cell: `2cpu,4GiB,256pids,8GiB disk`, or `-`. */
function limits(r: Template['resources']): string {
  const parts = [
    r.cpus !== undefined && r.cpus !== null && `${r.cpus}cpu`,
    r.memory && r.memory,
    r.pids !== undefined && r.pids !== null && `${r.pids}pids`,
    r.disk && `${r.disk} disk`,
  ].filter((p): p is string => Boolean(p));
  return parts.join(',') || '-';
}

export function registerListCommands(program: Command): void {
  withConnection(
    program
      .command('template')
      .description('templates: what can be leased')
      .command('ls')
      .description('list the templates the organization can lease')
      .option('--json', 'print {templates} as JSON'),
  ).action(async (options: JsonOptions) => {
    const client = new BerthClient(options);
    const [answer, nodes] = await Promise.all([
      client.json<{ templates: Template[] }>('GET', '/v1/templates'),
      client.json<{ nodes: RemoteNode[] }>('GET', '/v1/nodes'),
    ]);
    if (options.json) return json(answer);
    // Warm containers ready for a lease (on every node of the organization's view) of those wanted.
    const ready = new Map<string, number>();
    for (const w of nodes.nodes.flatMap((n) => n.warm)) if (w.state === 'ready') ready.set(w.template, (ready.get(w.template) ?? 0) + 1);
    const rows = answer.templates.map((t) => [
      t.name,
      t.pool,
      t.image ?? '(files only)',
      t.warm ? `${ready.get(t.name) ?? 0}/${t.warm}` : '-',
      limits(t.resources),
      t.idle,
      t.hard,
      t.shares.map((s) => `${s.name}:${s.direction}`).join(',') || '-',
      t.services.map((s) => s.service).join(',') || '-',
    ]);
    if (rows.length === 0) console.error('no templates');
    else console.log(table(['NAME', 'POOL', 'IMAGE', 'WARM', 'LIMITS', 'IDLE', 'HARD', 'SHARES', 'SERVICES'], rows));
  });

  withConnection(
    program
      .command('snapshot')
      .description("snapshots: environments' saved shares")
      .command('ls')
      .description("list a project's snapshots, newest first")
      .option('--project <name>', 'the project (default: default)')
      .option('--prefix <key>', 'only keys starting with this')
      .option('--limit <n>', 'at most this many (default 50, at most 500)')
      .option('--cursor <next>', 'the page after the one that printed this cursor')
      .option('--json', 'print {project, snapshots, next} as JSON'),
  ).action(async (options: JsonOptions & { project?: string; prefix?: string; limit?: string; cursor?: string }) => {
    const { project, prefix, limit, cursor } = options;
    const answer = await new BerthClient(options).json<{ project: string; snapshots: Snapshot[]; next?: string }>(
      'GET',
      '/v1/snapshots',
      undefined,
      { project, prefix, limit, cursor },
    );
    if (options.json) return json(answer);
    const rows = answer.snapshots.map((s) => [s.key, s.share, String(s.files), bytes(s.bytes), s.lease, since(s.created)]);
    if (rows.length === 0) console.error(`no snapshots in project ${answer.project}`);
    else console.log(table(['KEY', 'SHARE', 'FILES', 'SIZE', 'LEASE', 'AGE'], rows));
    if (answer.next) console.error(`more: berth snapshot ls --project ${answer.project} --cursor ${answer.next}`);
  });
}
