// `berth node ls|create|rm` (docs/cli.md#nodes): the organization's build machines, from a shell.
// They sit under `berth node`, the command that serves a pool (src/cli/node.ts, registered first).
import type { Command } from 'commander';
import { BerthClient, idOf, type JsonOptions, withConnection } from './client';
import { json, since, table } from './format';

export interface RemoteNode {
  id: string;
  name: string;
  pool: string;
  builtin: boolean;
  state: string;
  slots: number;
  environments: string[];
  warm: { template: string; state: string }[];
  lastSeen?: string | null;
}

export function registerNodeListCommands(program: Command): void {
  const node = program.commands.find((c) => c.name() === 'node')!;

  withConnection(
    node
      .command('ls')
      .description("list the built-in node and the organization's nodes: state, slots in use, last seen, live environments")
      .option('--json', 'print {nodes} as JSON'),
  ).action(async (options: JsonOptions) => {
    const answer = await new BerthClient(options).get<{ nodes: RemoteNode[] }>('/v1/nodes');
    if (options.json) return json(answer);
    const rows = answer.nodes.map((n) => [
      n.id,
      n.builtin ? `${n.name} (built-in)` : n.name,
      // The built-in node serves every pool with hot nodes; its slots show the organization's environments.
      n.builtin ? 'hot pools' : n.pool,
      n.state,
      `${n.environments.length}/${n.slots}`,
      since(n.lastSeen),
      n.environments.join(',') || '-',
    ]);
    if (rows.length === 0) console.error('no nodes');
    else console.log(table(['ID', 'NAME', 'POOL', 'STATE', 'SLOTS', 'LAST SEEN', 'ENVIRONMENTS'], rows));
  });

  withConnection(
    node
      .command('create <name>')
      .description('create a node credential for a build machine serving one pool (admins); prints it once')
      .option('--pool <pool>', 'the pool of the templates catalog it serves', 'default')
      .option('--json', 'print {node, secret} as JSON'),
  ).action(async (name: string, options: JsonOptions & { pool: string }) => {
    const client = new BerthClient(options);
    const answer = await client.post<{ node: RemoteNode; secret: string }>('/v1/nodes', { name, pool: options.pool });
    if (options.json) return json(answer);
    const { node: n, secret } = answer;
    console.log(`created node ${n.name} (${n.id}) for pool ${n.pool}`);
    console.log(`token (shown once; it won't be shown again): ${secret}`);
    console.log('on the build machine, run (--dir: where its environments live):');
    console.log(`  BERTH_NODE_TOKEN=${secret} berth node --server ${client.base} --dir /var/lib/berth-node`);
  });

  withConnection(
    node
      .command('rm <node>')
      .description('drain a node (by id or name) and revoke it once its live environments have ended (admins)')
      .option('--json', 'print {node} as JSON'),
  ).action(async (ref: string, options: JsonOptions) => {
    const client = new BerthClient(options);
    // The API takes ids: a name is looked up among the nodes the list shows (revoked ones are gone).
    const { nodes } = await client.get<{ nodes: RemoteNode[] }>('/v1/nodes');
    const answer = await client.delete<{ node: RemoteNode }>(`/v1/nodes/${encodeURIComponent(idOf(nodes, ref))}`);
    if (options.json) return json(answer);
    console.log(`${answer.node.id} ${answer.node.name} ${answer.node.state}: revoked once its live environments have ended`);
  });
}
