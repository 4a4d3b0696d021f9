// `berth snapshot ls`: what the console lists, from a shell (`template ls`, `sandbox ls` and
// `node ls` are beside their siblings, src/cli/template.ts, sandbox.ts and nodes.ts).
import type { Command } from 'commander';
import { BerthClient, type JsonOptions, withConnection } from './client';
import { bytes, json, since, table } from './format';

interface Snapshot {
  key: string;
  share: string;
  files: number;
  bytes: number;
  lease: string;
  created: string;
}

export function registerListCommands(program: Command): void {
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
