// The `berth` command (bin/berth.js): operator commands, and — each in its own module — the node
// agent, the sandbox agent and the user's commands. Exit codes: 0 done, 1 the command failed
// (the reason on stderr), 2 bad usage.
import { createRequire } from 'node:module';
import { Command, CommanderError } from 'commander';
import { registerAgentCommands } from './agent';
import { registerArtifactCommands } from './artifact';
import { registerEnvCommands } from './env';
import { registerExecCommands } from './exec';
import { registerNodeCommands } from './node';
import { registerOperatorCommands } from './operator';

const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

const program = new Command('berth')
  .description('Berth: build environments on leased nodes')
  .version(version, '-V, --version', 'print the version of berth')
  .showHelpAfterError()
  .exitOverride()
  .configureOutput({ outputError: (message, write) => write(message) });

registerOperatorCommands(program);
registerAgentCommands(program);
registerNodeCommands(program);
registerExecCommands(program);
registerEnvCommands(program);
registerArtifactCommands(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode === 0 ? 0 : 2;
  } else {
    console.error(`berth: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  }
}
