// `berth exec <environment id or name> -- <command> [args…]` (docs/agents.md, "Exec"): runs the
// command in the environment, prints its output as it comes and exits with its exit code. With
// input to pass on (piped, -i) or a terminal (-t), and for `berth shell`, it is a session
// (src/cli/session.ts); otherwise one POST …/exec.
// BERTH_URL (or --server) and BERTH_TOKEN (or --token) say where and who.
import { fstatSync, statSync } from 'node:fs';
import type { Command } from 'commander';
import { BerthClient, type ConnectionOptions, withConnection } from './client';
import { CommandError } from './errors';

interface Line {
  stream?: 'stdout' | 'stderr';
  data?: string;
  exitCode?: number;
  error?: string;
  code?: string;
}

async function* lines(body: AsyncIterable<Buffer>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let rest = '';
  for await (const piece of body) {
    rest += decoder.decode(piece, { stream: true });
    let nl = rest.indexOf('\n');
    while (nl >= 0) {
      yield rest.slice(0, nl);
      rest = rest.slice(nl + 1);
      nl = rest.indexOf('\n');
    }
  }
  if (rest.trim()) yield rest;
}

function write(stream: NodeJS.WriteStream, data: Buffer): Promise<void> {
  return new Promise((resolve) => (stream.write(data) ? resolve() : stream.once('drain', () => resolve())));
}

export async function execCommand(client: BerthClient, environment: string, argv: string[]): Promise<number> {
  const res = await client.fetch(`/v1/environments/${encodeURIComponent(environment)}/exec`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ command: argv }),
  });
  for await (const text of lines(res.body)) {
    const line = JSON.parse(text) as Line;
    if (line.stream && line.data !== undefined) {
      await write(line.stream === 'stderr' ? process.stderr : process.stdout, Buffer.from(line.data, 'base64'));
    } else if (line.exitCode !== undefined) {
      return line.exitCode;
    } else if (line.error) {
      throw new CommandError(line.error);
    }
  }
  throw new CommandError('the server ended the stream before the command ended');
}

/** Sessions (and `ws`, ~40 ms to load) only when one starts: every other command does without them. */
const session = () => import('./session');

/**
 * Standard input is /dev/null (or closed): there is nothing to pass on, and the plain exec serves.
 * (Podman now and then loses a quick command's output when input reaches it as the command ends.)
 */
function inputIsEmpty(): boolean {
  try {
    const stats = fstatSync(0);
    return stats.isCharacterDevice() && stats.rdev === statSync('/dev/null').rdev;
  } catch {
    return true;
  }
}

/**
 * The command of `berth exec ENV …`: everything after the environment, less a leading `--`; or, for
 * an option written after the environment (`berth exec ENV -t sh`), what to write instead.
 */
export function commandOf(args: string[]): string[] | string {
  if (args[0] === '--') return args.length > 1 ? args.slice(1) : 'berth exec: the command is missing after --';
  if (args[0]?.startsWith('-'))
    return `berth exec: options go before the environment (berth exec ${args[0]} ENV COMMAND…); a command that begins with - goes after --`;
  return args;
}

interface ExecOptions extends ConnectionOptions {
  tty?: boolean;
  interactive?: boolean;
}

export function registerExecCommands(program: Command): void {
  withConnection(
    program
      .command('exec')
      .description('Run a command in an environment (BERTH_URL, BERTH_TOKEN); exits with its exit code')
      .option('-i, --interactive', "send this terminal's input to the command (piped input always is)")
      .option('-t, --tty', 'give the command a terminal (input from this one, raw; size and resizes passed on)')
      .argument('<environment>', 'environment id or name')
      .argument('<command...>', 'the command and its arguments: everything after the environment (a -- before it is optional)')
      // Options come before the environment; what follows it is the command's, `-la` included.
      .passThroughOptions(),
  ).action(async (environment: string, args: string[], options: ExecOptions, self: Command) => {
    const command = commandOf(args);
    if (typeof command === 'string') self.error(command);
    const client = new BerthClient(options);
    const tty = Boolean(options.tty);
    if (tty && !process.stdin.isTTY) throw new CommandError('-t needs a terminal on standard input; without -t, piped input is passed on');
    const stdin = Boolean(options.interactive) || tty || (!process.stdin.isTTY && !inputIsEmpty());
    process.exitCode = stdin
      ? await (await session()).runSession(client, { environment, command, tty, stdin })
      : await execCommand(client, environment, command);
  });
  withConnection(
    program
      .command('shell')
      .description("Open the environment's shell (the template's shell, /bin/sh by default); exits with its exit code")
      .argument('<environment>', 'environment id or name'),
  ).action(async (environment: string, options: ConnectionOptions) => {
    const tty = Boolean(process.stdin.isTTY);
    process.exitCode = await (await session()).runSession(new BerthClient(options), { environment, tty, stdin: true });
  });
}
