// `berth login [URL] [--token T]` and `berth logout` (docs/cli.md): the server and credential the
// other commands use when neither flags nor BERTH_URL/BERTH_TOKEN say, kept in config-file.ts.
import { createInterface } from 'node:readline/promises';
import { Writable } from 'node:stream';
import type { Command } from 'commander';
import { BerthClient, baseUrl } from './client';
import { configPath, readLogin, removeLogin, writeLogin } from './config-file';
import { DEFAULT_URL } from './default-url';
import { CommandError } from './errors';

interface Viewer {
  kind: string;
  name: string;
  admin: boolean;
  organization: { name: string };
}

/** Reads a line from the terminal without showing it. */
async function askHidden(question: string): Promise<string> {
  const silent = new Writable({ write: (_chunk, _encoding, done) => done() });
  const rl = createInterface({ input: process.stdin, output: silent, terminal: true });
  process.stderr.write(question);
  try {
    return (await rl.question('')).trim();
  } finally {
    rl.close();
    process.stderr.write('\n');
  }
}

export function registerLoginCommands(program: Command): void {
  program
    .command('login')
    .description('Check a credential against Berth and keep it, with its URL, for the other commands')
    .argument('[url]', `Berth's URL (default: the one logged in to, $BERTH_URL, else ${DEFAULT_URL})`)
    .option('--token <secret>', 'a CLI token or API key (default: asked on the terminal, or $BERTH_TOKEN)')
    .action(async (url: string | undefined, options: { token?: string }) => {
      const server = baseUrl(url ?? (process.env.BERTH_URL || undefined) ?? readLogin()?.url ?? DEFAULT_URL, url ? 'URL' : 'BERTH_URL');
      let token = options.token ?? (process.env.BERTH_TOKEN || undefined);
      if (!token) {
        if (!process.stdin.isTTY) throw new CommandError('no token: pass --token (or set BERTH_TOKEN), or run berth login on a terminal');
        token = await askHidden(`Token for ${server} (the console makes one under Settings, or an admin runs \`berth token create\`): `);
        if (!token) throw new CommandError('no token given');
      }
      const viewer = await new BerthClient({ server, token }).json<Viewer>('GET', '/v1/me');
      const path = writeLogin({ url: server, token });
      console.log(
        `Logged in to ${server} as ${viewer.name} (${viewer.admin ? 'admin' : 'member'} of ${viewer.organization.name}); kept in ${path}`,
      );
    });
  program
    .command('logout')
    .description('Forget the credential berth login kept')
    .action(() => {
      // A file that is not a login is removed too.
      const stored = (() => {
        try {
          return readLogin();
        } catch {
          return undefined;
        }
      })();
      removeLogin();
      console.log(stored ? `Logged out of ${stored.url} (removed ${configPath()})` : 'Not logged in.');
    });
}
