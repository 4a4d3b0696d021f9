// `berth node ls|create|rm|cordon|uncordon` (docs/cli.md#nodes): the organization's build machines, from a shell.
// They sit under `berth node`, the command that serves a pool (src/cli/node.ts, registered first).
import type { Command } from 'commander';
import { BerthClient, idOf, type JsonOptions, withConnection } from './client';
import { bytes, json, since, table } from './format';

export interface RemoteNode {
  id: string;
  name: string;
  pool: string;
  builtin: boolean;
  state: string;
  /** Why it is in its state (the engine's trouble when degraded); absent while online. */
  reason?: string;
  slots: number;
  environments: string[];
  warm: { template: string; state: string }[];
  capacity?: { cpus: number; memory: number };
  allocated: { cpus: number; memory: number };
  cordoned?: { at: string; by: string };
  lastSeen?: string | null;
}

/** `1.5/4 CPU, 3.0 GiB/8.0 GiB`: allocated of capacity, or what is allocated when it never said. */
function room(n: RemoteNode): string {
  const cpus = n.capacity ? `${n.allocated.cpus}/${n.capacity.cpus}` : `${n.allocated.cpus}/?`;
  const memory = n.capacity ? `${bytes(n.allocated.memory)}/${bytes(n.capacity.memory)}` : `${bytes(n.allocated.memory)}/?`;
  return `${cpus} CPU, ${memory}`;
}

export function registerNodeListCommands(program: Command): void {
  const node = program.commands.find((c) => c.name() === 'node')!;

  withConnection(
    node
      .command('ls')
      .description(
        "list the built-in node and the organization's nodes: state, slots in use, CPU and memory allocated of capacity, last seen, live environments",
      )
      .option('--json', 'print {nodes} as JSON'),
  ).action(async (options: JsonOptions) => {
    const answer = await new BerthClient(options).get<{ nodes: RemoteNode[] }>('/v1/nodes');
    if (options.json) return json(answer);
    const rows = answer.nodes.map((n) => [
      n.id,
      n.builtin ? `${n.name} (built-in)` : n.name,
      // The built-in node serves every pool with hot nodes; its slots show the organization's environments.
      n.builtin ? 'hot pools' : n.pool,
      n.cordoned ? `${n.state}, cordoned` : n.state,
      `${n.environments.length}/${n.slots}`,
      room(n),
      since(n.lastSeen),
      n.environments.join(',') || '-',
    ]);
    if (rows.length === 0) console.error('no nodes');
    else console.log(table(['ID', 'NAME', 'POOL', 'STATE', 'SLOTS', 'ALLOCATED', 'LAST SEEN', 'ENVIRONMENTS'], rows));
    // What a table cell cannot hold: why a degraded node is degraded.
    for (const n of answer.nodes) if (n.state === 'degraded' && n.reason) console.log(`${n.name}: ${n.reason}`);
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

  for (const [verb, description, after] of [
    ['cordon', 'keep new leases off a node (by id or name); its running environments go on (admins)', 'takes no new leases'],
    ['uncordon', 'let a cordoned node (by id or name) take new leases again (admins)', 'takes new leases again'],
  ] as const) {
    withConnection(node.command(`${verb} <node>`).description(description).option('--json', 'print {node} as JSON')).action(
      async (ref: string, options: JsonOptions) => {
        const client = new BerthClient(options);
        const { nodes } = await client.get<{ nodes: RemoteNode[] }>('/v1/nodes');
        const answer = await client.post<{ node: RemoteNode }>(`/v1/nodes/${encodeURIComponent(idOf(nodes, ref))}/${verb}`, {});
        if (options.json) return json(answer);
        console.log(`${answer.node.id} ${answer.node.name}: ${after}`);
      },
    );
  }
}
