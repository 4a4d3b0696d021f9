// What `berth login` stores: the server's URL and a credential for it, in
// $XDG_CONFIG_HOME/berth/config.json (~/.config/berth/config.json), readable by the user only.
// BERTH_URL, BERTH_TOKEN, --server and --token still win over it.
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { CommandError } from './errors';

export interface StoredLogin {
  url: string;
  token: string;
}

/** Where the login is kept. */
export function configPath(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(base, 'berth', 'config.json');
}

/** The stored login, or undefined when there is none; a file that is not one is an error naming it. */
export function readLogin(env: NodeJS.ProcessEnv = process.env): StoredLogin | undefined {
  const path = configPath(env);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new CommandError(`cannot read ${path}: ${(error as Error).message}`);
  }
  try {
    const parsed = JSON.parse(text) as Partial<StoredLogin>;
    if (typeof parsed.url === 'string' && typeof parsed.token === 'string') return { url: parsed.url, token: parsed.token };
  } catch {
    // said below
  }
  throw new CommandError(`${path} is not a berth login (run \`berth login\` again, or remove it)`);
}

/** Stores the login (mode 0600 in a 0700 folder), replacing the file whole. */
export function writeLogin(login: StoredLogin, env: NodeJS.ProcessEnv = process.env): string {
  const path = configPath(env);
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const partial = `${path}.${process.pid}.tmp`;
  writeFileSync(partial, `${JSON.stringify(login, null, 2)}\n`, { mode: 0o600 });
  renameSync(partial, path);
  return path;
}

/** Removes the stored login; whether there was one. */
export function removeLogin(env: NodeJS.ProcessEnv = process.env): boolean {
  const path = configPath(env);
  try {
    rmSync(path);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw new CommandError(`cannot remove ${path}: ${(error as Error).message}`);
  }
}
