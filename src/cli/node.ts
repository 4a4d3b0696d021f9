// `berth node --server URL --token SECRET --dir DIR [--slots N]` (docs/agents.md): serves a pool.
// `berth node ls` (src/cli/lists.ts) lists the organization's nodes; so --server and --dir, which
// only serving needs, are checked here rather than required by commander (which would ask them
// of `ls` too).
import { constants } from 'node:os';
import { resolve } from 'node:path';
import { type Command, InvalidArgumentError, Option } from 'commander';
import type { Engine } from '../node/engine';
import { type Capacity, parseCapacity } from '../protocol/capacity';
import { MAX_SLOTS } from '../protocol/dataplane';
import { CommandError } from './errors';

function port(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n > 65535) throw new InvalidArgumentError('must be a port from 0 (any free one) to 65535');
  return n;
}

/** --capacity: what the node offers, over the machine's if the operator says so. */
function capacity(value: string): Partial<Capacity> {
  try {
    return parseCapacity(value);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/;

function slots(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > MAX_SLOTS) throw new InvalidArgumentError(`must be an integer from 1 to ${MAX_SLOTS}`);
  return n;
}

export function registerNodeCommands(program: Command): void {
  program
    .command('node')
    .description('Serve a pool as a build machine: hold slots, prepare and release environments under --dir')
    .option('--server <url>', 'the Berth server, e.g. http://berth.example.com:8080 (required)')
    .option('--token <secret>', 'the node credential (bnd_…) from POST /v1/nodes; better BERTH_NODE_TOKEN, which ps does not show')
    .option('--dir <dir>', 'where environment roots live (DIR/<environment id>/) (required)')
    .option('--slots <n>', 'how many environments at once', slots, 1)
    .option(
      '--capacity <cpus=N,memory=SIZE>',
      "what it offers its environments, e.g. cpus=8,memory=16GiB (either part alone too); default: the machine's, memory less a reserve",
      capacity,
    )
    .option('--engine <url>', 'the container engine (unix:///…, tcp://…, or none); default DOCKER_HOST, then the Docker or Podman socket')
    .option('--metrics-port <port>', 'serve Prometheus metrics at /metrics on this port (0: any free one); off without it', port)
    .option('--metrics-host <address>', 'the address --metrics-port listens on; another than loopback needs METRICS_TOKEN', '127.0.0.1')
    .addOption(
      new Option('--builtin', "run as the server's built-in node (the server starts it: src/app/builtin-supervisor.ts)").hideHelp(),
    )
    .action(async (opts: NodeOptions, command: Command) => {
      const missing = opts.server === undefined ? '--server <url>' : opts.dir === undefined ? '--dir <dir>' : undefined;
      if (missing) command.error(`error: required option '${missing}' not specified`, { code: 'commander.missingMandatoryOptionValue' });
      const token = opts.token ?? process.env.BERTH_NODE_TOKEN;
      if (!token) throw new CommandError('the node credential is missing: set BERTH_NODE_TOKEN (or pass --token)');
      const metricsToken = process.env.METRICS_TOKEN || undefined;
      if (metricsToken !== undefined && metricsToken.length < 32) throw new CommandError('METRICS_TOKEN must be at least 32 characters');
      if (opts.metricsPort !== undefined && !metricsToken && !LOOPBACK.test(opts.metricsHost)) {
        throw new CommandError(
          `--metrics-host ${opts.metricsHost} is reachable from other machines: set METRICS_TOKEN, which scrapes must send`,
        );
      }
      // Loaded when the command runs: `berth --version` and the user's commands do without them.
      const { NodeAgent } = await import('../agent/node-agent');
      const engine = await engineFor(opts.engine ?? process.env.DOCKER_HOST);
      const owner = opts.builtin ? process.env.BERTH_NODE_OWNER : undefined;
      const agent = new NodeAgent({
        server: opts.server!,
        token,
        dir: resolve(opts.dir!),
        slots: opts.slots,
        engine,
        owner,
        capacity: opts.capacity,
      });
      console.log(`berth node: ${engine ? `containers through ${engine.url}` : 'no container engine: environments hold files only'}`);
      if (opts.metricsPort !== undefined) {
        const url = await serveNodeMetrics(agent, engine, opts, metricsToken);
        console.log(`berth node: metrics at ${url}${metricsToken ? ' (Authorization: Bearer <METRICS_TOKEN>)' : ''}`);
      }
      // The first SIGTERM or SIGINT drains (the node's environments end cleanly, then exit 0); a
      // second one stops at once, leaving them to the server's liveness bound.
      // The built-in node ends nothing when its server stops (the next start holds its environments
      // again), and goes when its server does: the server holds the other end of its stdin.
      let signals = 0;
      const onSignal = (signal: NodeJS.Signals) => {
        if (++signals === 1) {
          console.log(`berth node: ${signal} received`);
          if (opts.builtin) agent.stopKeeping();
          else agent.drain();
          return;
        }
        console.log(`berth node: ${signal} again: stopping at once`);
        process.exit(128 + (constants.signals[signal] ?? 15));
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      if (opts.builtin) {
        process.stdin.on('end', () => agent.stop()).resume();
        process.stdin.on('error', () => agent.stop());
      }
      try {
        await agent.run();
      } finally {
        // The engine's open watches (one per container, which outlive this process) keep no one
        // waiting: the process ends once the error, if any, is reported (index.ts sets exitCode).
        setImmediate(() => process.exit());
      }
    });
}

interface NodeOptions {
  server?: string;
  token?: string;
  dir?: string;
  slots: number;
  capacity?: Partial<Capacity>;
  engine?: string;
  metricsPort?: number;
  metricsHost: string;
  builtin?: boolean;
}

/** Serves the node's metrics: its engine's calls and durations, and its slots. */
async function serveNodeMetrics(
  agent: { held: Set<string> },
  engine: Engine | null,
  opts: NodeOptions,
  token: string | undefined,
): Promise<string> {
  const { createNodeMetrics } = await import('../observability/metrics');
  const { serveMetrics } = await import('../observability/endpoint');
  const metrics = createNodeMetrics(() => agent.held.size);
  metrics.slots.set(opts.slots);
  if (engine) {
    engine.observe = (operation, seconds, outcome) => {
      metrics.containerOperations.inc({ operation, outcome });
      metrics.containerDuration.observe({ operation }, seconds);
    };
  }
  try {
    return (await serveMetrics(metrics.registry, opts.metricsHost, opts.metricsPort!, token)).url;
  } catch (error) {
    throw new CommandError(`--metrics-port: cannot listen on ${opts.metricsHost}:${opts.metricsPort}: ${(error as Error).message}`);
  }
}

/** The node's engine: one named must answer; without one named, a socket found may be used. */
async function engineFor(choice: string | undefined): Promise<Engine | null> {
  const { Engine, engineAddress, engineMessage } = await import('../node/engine');
  const address = engineAddress(choice);
  if (!address) return null;
  try {
    return await Engine.open(address);
  } catch (error) {
    if (choice) throw new CommandError(`--engine: ${engineMessage(error)} (--engine none runs files-only environments)`);
    console.log(`berth node: ${engineMessage(error)}; environments hold files only`);
    return null;
  }
}
