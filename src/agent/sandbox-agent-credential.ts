// The sandbox agent's stored credential: DIR/.berth/sandbox.json (folder 0700, file 0600).
import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { AGENT_FOLDER } from '../protocol/agent-folder';

export interface StoredSandbox {
  /** The Berth server the credential belongs to. */
  server: string;
  sandbox: { id: string; name: string; org: string };
  /** The sandbox credential (bsc_…). */
  credential: string;
}

export function credentialFile(dir: string): string {
  return path.join(dir, AGENT_FOLDER, 'sandbox.json');
}

/** The stored credential, or undefined when there is none. */
export async function loadCredential(dir: string): Promise<StoredSandbox | undefined> {
  let text: string;
  try {
    text = await readFile(credentialFile(dir), 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  const stored = JSON.parse(text) as StoredSandbox;
  if (typeof stored.credential !== 'string' || typeof stored.sandbox?.id !== 'string' || typeof stored.server !== 'string') {
    throw new Error(`${credentialFile(dir)} is not a stored sandbox credential; remove it and join again`);
  }
  return stored;
}

/** Writes the credential so only the owner can read it (written whole, then renamed). */
export async function saveCredential(dir: string, stored: StoredSandbox): Promise<void> {
  const file = credentialFile(dir);
  const folder = path.dirname(file);
  await mkdir(folder, { recursive: true, mode: 0o700 });
  await chmod(folder, 0o700);
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(stored, null, 2)}\n`, { mode: 0o600 });
  await chmod(tmp, 0o600);
  await rename(tmp, file);
}
