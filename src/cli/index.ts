// The `berth` command (bin/berth.js): operator commands, and — each in its own module — the node
// agent, the sandbox agent and the user's commands. Exit codes: 0 done, 1 the command failed
// (the reason on stderr), 2 bad usage.
import { Command, CommanderError } from 'commander';
// Inlined by the bundles (only `version`), so the single-file CLI needs no package.json beside it.
import { version } from '../../package.json';
import { registerAgentCommands } from './agent';
import { registerArtifactCommands } from './artifact';
import { registerCompletionCommands } from './completion';
import { registerEnvCommands } from './env';
import { registerExecCommands } from './exec';
import { registerKeyCommands } from './key';
import { registerListCommands } from './lists';
import { registerLoginCommands } from './login';
import { registerNodeCommands } from './node';
import { registerNodeListCommands } from './nodes';
import { registerOperatorCommands } from './operator';
import { registerPreviewCommands } from './preview';
import { registerQuotaCommands } from './quota';
import { registerSandboxCommands } from './sandbox';
import { registerSessionCommands } from './sessions';
import { registerTemplateCommands } from './template';
import { registerWebhookCommands } from './webhook';

// A reader that goes away (`berth env ls | head`) ends the command quietly, not with a stack trace.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
  process.exit(0);
});

const program = new Command('berth')
  .description('Berth: build environments on leased nodes')
  .version(version, '-V, --version', 'print the version of berth')
  .exitOverride()
  // Options belong to the command they follow: `berth node ls --server URL` is the list's --server,
  // not that of `berth node`, the command that serves a pool.
  .enablePositionalOptions()
  .configureOutput({ outputError: (message, write) => write(message) });

registerOperatorCommands(program);
registerAgentCommands(program);
registerNodeCommands(program);
registerNodeListCommands(program);
registerLoginCommands(program);
registerExecCommands(program);
registerSessionCommands(program);
registerPreviewCommands(program);
registerEnvCommands(program);
registerArtifactCommands(program);
registerListCommands(program);
registerSandboxCommands(program);
registerWebhookCommands(program);
registerKeyCommands(program);
registerQuotaCommands(program);
registerTemplateCommands(program);
registerCompletionCommands(program);

/** A usage error says what was wrong and the one help command to run, not the whole help. */
function hintHelp(command: Command, path: string[]): void {
  command.showHelpAfterError(`Run "${['berth', ...path, '--help'].join(' ')}" for its usage.`);
  for (const sub of command.commands) hintHelp(sub, [...path, sub.name()]);
}
hintHelp(program, []);

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
