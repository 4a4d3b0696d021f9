// `berth exec <environment id or name> -- <command> [args…]` (docs/agents.md, "Exec"): runs the
// command on the environment's node, prints its output as it comes and exits with its exit code.
// BERTH_URL (default http://127.0.0.1:8080) and BERTH_TOKEN say where and who.
import type { Command } from 'commander';
import { CommandError } from './errors';

interface Line {
  stream?: 'stdout' | 'stderr';
  data?: string;
  exitCode?: number;
  error?: string;
  code?: string;
}

async function* lines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let rest = '';
  for await (const piece of body as unknown as AsyncIterable<Uint8Array>) {
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

export async function execCommand(environment: string, argv: string[]): Promise<number> {
  const base = (process.env.BERTH_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
  const token = process.env.BERTH_TOKEN;
  if (!token) throw new CommandError('set BERTH_TOKEN to a CLI token or API key');
  let res: Response;
  try {
    res = await fetch(`${base}/v1/environments/${encodeURIComponent(environment)}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command: argv }),
    });
  } catch (err) {
    throw new CommandError(
      `cannot reach ${base}: ${(err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message}`,
    );
  }
  if (!res.ok || !res.body) {
    const text = await res.text();
    let message = text || res.statusText;
    try {
      message = (JSON.parse(text) as { error: string }).error;
    } catch {
      // not JSON
    }
    throw new CommandError(message);
  }
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

export function registerExecCommands(program: Command): void {
  program
    .command('exec')
    .description("Run a command on an environment's node (BERTH_URL, BERTH_TOKEN); exits with its exit code")
    .argument('<environment>', 'environment id or name')
    .argument('<command...>', 'the command and its arguments (after --)')
    .action(async (environment: string, command: string[]) => {
      process.exitCode = await execCommand(environment, command);
    });
}
