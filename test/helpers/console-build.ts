// vitest global setup: the browser suites drive the built console (console/dist, built by
// `npm install`). When its sources changed since, it is built again first, so that no suite
// tests a stale build.
import { execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..');
const sources = ['console/src', 'console/public', 'console/index.html', 'console/vite.config.ts', 'schema.graphql'];

function newest(path: string): number {
  const stats = statSync(path, { throwIfNoEntry: false });
  if (!stats) return 0;
  if (!stats.isDirectory()) return stats.mtimeMs;
  return Math.max(
    0,
    ...readdirSync(path)
      .filter((name) => name !== 'generated')
      .map((name) => newest(join(path, name))),
  );
}

export default function setup(): void {
  const built = statSync(join(root, 'console/dist/index.html'), { throwIfNoEntry: false })?.mtimeMs ?? 0;
  if (Math.max(...sources.map((s) => newest(join(root, s)))) <= built) return;
  console.log('console sources changed since the last build: building the console (npm run build:console)');
  // vitest sets NODE_ENV=test, which would build React's development bundle.
  execFileSync('npm', ['run', '--silent', 'build:console'], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, NODE_ENV: 'production' },
  });
}
