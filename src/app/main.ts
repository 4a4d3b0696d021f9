import { DEFAULT_URL } from '../cli/default-url';
import { builtinEngine } from '../modules/nodes';
import { loadConfig } from './config';
import { type App, startApp } from './server';

/** A start that cannot go on says why in one line, no stack trace, and exits non-zero. */
function fail(error: unknown): never {
  const message = error instanceof Error ? error.message : String(error);
  console.error(`berth: cannot start: ${message.replace(/\s*\n\s*/g, ' ')}`);
  process.exit(1);
}

let app: App;
try {
  const config = loadConfig();
  app = await startApp({ config });
} catch (error) {
  fail(error);
}
const { config } = app.deps;
// With JSON logs on stdout, the banner (for the person starting it) goes to stderr, so every line
// of stdout stays a log line.
const say = config.logFormat === 'json' ? console.error : console.log;
const where = config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `embedded PGlite in ${config.dataDir}`;
say(`Berth listening on ${app.url}  (database: ${where})`);
say(`  Console: ${app.url}/   GraphQL: ${app.url}/graphql   REST: ${app.url}/v1   OpenAPI: ${app.url}/v1/openapi.json`);
const { engine } = await builtinEngine(app.deps);
const nodePid = app.builtin.pid();
say(
  `  Built-in node (${nodePid ? `pid ${nodePid}` : 'run by another instance'}): ${
    engine !== 'none'
      ? `containers through ${engine}`
      : 'no container engine, environments hold files only (install podman or Docker, or set DOCKER_HOST)'
  }`,
);
if (app.bootstrapRevoked) {
  say('  BOOTSTRAP_TOKEN names a token that was revoked: it stays revoked (unset it, or set a new value).');
}
if (app.generatedToken) {
  say(`  First start: an admin token for the default organization was created; it is shown only now:`);
  say(`    export BERTH_TOKEN=${app.generatedToken}`);
} else {
  say('  Authenticate with "Authorization: Bearer <token>" (BOOTSTRAP_TOKEN, or `npm run berth -- token create --org default --admin`).');
}
// The berth command reaches DEFAULT_URL unless told otherwise.
if (app.url !== DEFAULT_URL) say(`  For the berth command: export BERTH_URL=${app.url}`);
say(`  Try: curl -H "Authorization: Bearer $BERTH_TOKEN" ${app.url}/v1/me`);

let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) process.exit(1);
    stopping = true;
    app.stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  });
}
