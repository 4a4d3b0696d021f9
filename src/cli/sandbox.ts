// `berth sandbox create|ls|rm` (docs/cli.md#sandboxes): the organization's machines, registered
// and removed as the console's Sandboxes page does.
import type { Command } from 'commander';
import { BerthClient, type JsonOptions, withConnection } from './client';
import { json, since, table } from './format';

interface Sandbox {
  id: string;
  name: string;
  createdBy: string;
  lastSeen?: string | null;
  removed?: string | null;
}

interface SandboxEntry {
  sandbox: Sandbox;
  environments: number;
}

const path = (ref: string) => `/v1/sandboxes/${encodeURIComponent(ref)}`;

export function registerSandboxCommands(program: Command): void {
  const sandbox = program.command('sandbox').description("sandboxes: the organization's machines");

  withConnection(
    sandbox
      .command('create <name>')
      .description('register a machine as a sandbox; prints the join key its agent spends on its first start')
      .option('--json', 'print {sandbox, config, key} as JSON'),
  ).action(async (name: string, options: JsonOptions) => {
    const client = new BerthClient(options);
    const answer = await client.post<{ sandbox: Sandbox; config: unknown; key: string }>('/v1/sandboxes', { name });
    if (options.json) return json(answer);
    const { sandbox: s, key } = answer;
    console.log(`registered sandbox ${s.name} (${s.id})`);
    console.log(`join key (single use, valid one hour): ${key}`);
    console.log('on the sandbox machine, in the folder its shares are relative to, run:');
    console.log(`  berth agent --server ${client.base} --join ${key} --dir .`);
  });

  withConnection(
    sandbox
      .command('ls')
      .description('list the sandboxes with their live environment counts')
      .option('--removed', 'include removed sandboxes')
      .option('--json', 'print {sandboxes} as JSON'),
  ).action(async (options: JsonOptions & { removed?: boolean }) => {
    const query = options.removed ? { removed: 'true' } : {};
    const answer = await new BerthClient(options).get<{ sandboxes: SandboxEntry[] }>('/v1/sandboxes', query);
    if (options.json) return json(answer);
    const rows = answer.sandboxes.map(({ sandbox: s, environments }) => [
      s.id,
      s.name,
      String(environments),
      since(s.lastSeen),
      s.removed ? `removed ${since(s.removed)} ago` : 'active',
      s.createdBy,
    ]);
    if (rows.length === 0) console.error('no sandboxes');
    else console.log(table(['ID', 'NAME', 'ENVIRONMENTS', 'LAST SEEN', 'STATE', 'REGISTERED BY'], rows));
  });

  withConnection(
    sandbox
      .command('rm <sandbox>')
      .description('remove a sandbox (by id or name): its agent is cut off, its environments run to their end unwired')
      .option('--json', 'print {sandbox} as JSON'),
  ).action(async (ref: string, options: JsonOptions) => {
    const answer = await new BerthClient(options).delete<{ sandbox: Sandbox }>(path(ref));
    if (options.json) return json(answer);
    console.log(`${answer.sandbox.id} ${answer.sandbox.name} removed`);
  });
}
