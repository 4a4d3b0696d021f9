// `berth agent`: the sandbox agent on a developer machine (docs/agents.md).
//   berth agent --server URL --join KEY --dir DIR   first start: spends the join key
//   berth agent [--server URL] --dir DIR            later starts: the stored credential
import type { Command } from 'commander';
import { CommandError } from './errors';

export function registerAgentCommands(program: Command): void {
  program
    .command('agent')
    .description("the sandbox agent: runs this machine's sandbox configuration (imports, share sync)")
    .option('--server <url>', 'the Berth server (default: BERTH_URL, else the one the stored credential came from)')
    .option('--join <key>', 'a network join key (bjk_…) to spend on the first start')
    .requiredOption('--dir <dir>', "the agent's folder: shares are relative to it; the credential is kept in DIR/.berth")
    .action(async (options: { server?: string; join?: string; dir: string }) => {
      // Loaded when the command runs: `berth --version` and the other commands do without it.
      const { runSandboxAgent } = await import('../agent/sandbox-agent');
      const controller = new AbortController();
      const stop = () => controller.abort();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      try {
        await runSandboxAgent({
          server: options.server ?? process.env.BERTH_URL,
          join: options.join,
          dir: options.dir,
          signal: controller.signal,
        });
      } catch (error) {
        throw new CommandError((error as Error).message);
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
      }
      // Sockets and watchers are closed; nothing else should keep the process.
      process.exit(process.exitCode ?? 0);
    });
}
