import { loadConfig } from './config';
import { startApp } from './server';

const config = loadConfig();
const app = await startApp({ config });
const where = config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `embedded PGlite in ${config.dataDir}`;
console.log(`Berth listening on ${app.url}  (database: ${where})`);
console.log(`  Console: ${app.url}/   GraphQL: ${app.url}/graphql   REST: ${app.url}/v1   OpenAPI: ${app.url}/v1/openapi.json`);
if (app.generatedToken) {
  console.log(`  First start: an admin token for the default organization was created; it is shown only now:`);
  console.log(`    export BERTH_TOKEN=${app.generatedToken}`);
} else {
  console.log('  Authenticate with "Authorization: Bearer <token>" (BOOTSTRAP_TOKEN, or a token from `npm run berth -- org create`).');
}
console.log(`  Try: curl -H "Authorization: Bearer $BERTH_TOKEN" ${app.url}/v1/me`);

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
