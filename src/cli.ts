// Operator commands: `npm run berth -- org create <name> --admin <email>`.
// Works against the configured database whether or not a server is running on it.
import { parseArgs } from 'node:util';
import { loadConfig } from './config';
import { openDatabase } from './db';
import { callOperatorSocket, type OrgCreated } from './operator';
import { DomainError } from './services/errors';
import { createOrganization } from './services/organizations';

const USAGE = 'usage: npm run berth -- org create <name> --admin <email>';

class CommandError extends Error {}

async function createOrg(name: string, admin: string): Promise<OrgCreated> {
  const config = loadConfig();
  if (!config.databaseUrl) {
    const reply = await callOperatorSocket(config.dataDir, '/orgs', { name, admin });
    if (reply && reply.status !== 201) throw new CommandError((reply.body as { error: string }).error);
    if (reply) return reply.body as OrgCreated;
  }
  const db = await openDatabase({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, schema: config.databaseSchema });
  try {
    return await createOrganization(db.prisma, name, admin);
  } catch (error) {
    if (error instanceof DomainError) throw new CommandError(error.message);
    throw error;
  } finally {
    await db.close();
  }
}

async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({ args: argv, allowPositionals: true, options: { admin: { type: 'string' } } });
  const [group, verb, name] = positionals;
  if (group !== 'org' || verb !== 'create' || !name || !values.admin || positionals.length !== 3) {
    console.error(USAGE);
    return 2;
  }
  try {
    const { org, person, secret } = await createOrg(name, values.admin);
    console.log(`created organization ${org.name} (${org.id}) with admin ${person.email}`);
    console.log(`admin token (shown once): ${secret}`);
    return 0;
  } catch (error) {
    if (!(error instanceof CommandError)) throw error;
    console.error(`berth: ${error.message}`);
    return 1;
  }
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  console.error(`berth: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 2;
}
