// `berth node --server URL --token SECRET --dir DIR [--slots N]` (docs/agents.md).
import { resolve } from 'node:path';
import { type Command, InvalidArgumentError } from 'commander';
import { NodeAgent } from '../agent/node-agent';
import { installExec } from '../agent/node-agent-exec';
import { MAX_SLOTS } from '../dataplane/protocol';

function slots(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > MAX_SLOTS) throw new InvalidArgumentError(`must be an integer from 1 to ${MAX_SLOTS}`);
  return n;
}

export function registerNodeCommands(program: Command): void {
  program
    .command('node')
    .description('Serve a pool as a build machine: hold slots, prepare and release environments under --dir')
    .requiredOption('--server <url>', 'the Berth server, e.g. http://berth.example.com:8080')
    .requiredOption('--token <secret>', 'the node credential (bnd_…) from POST /v1/nodes')
    .requiredOption('--dir <dir>', 'where environment roots live (DIR/<environment id>/)')
    .option('--slots <n>', 'how many environments at once', slots, 1)
    .action(async (opts: { server: string; token: string; dir: string; slots: number }) => {
      const agent = new NodeAgent({ server: opts.server, token: opts.token, dir: resolve(opts.dir), slots: opts.slots });
      installExec(agent);
      const stop = () => agent.stop();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      await agent.run();
    });
}
