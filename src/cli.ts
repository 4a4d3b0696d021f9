// Operator commands:
//   npm run berth -- org create <name> --admin <email>
//   npm run berth -- token create --org <name> --admin [--email <admin's email>]
// They work against the configured database whether or not a server is running on it.
import { parseArgs } from 'node:util';
import { loadConfig } from './config';
import { openDatabase, type Prisma } from './db';
import { callOperatorSocket, type IssuedToken } from './operator';
import { DomainError } from './services/errors';
import { createOrganization, issueAdminToken } from './services/organizations';

const USAGE = [
  'usage: npm run berth -- org create <name> --admin <email>',
  '       npm run berth -- token create --org <name> --admin [--email <email>]',
].join('\n');

class CommandError extends Error {}

/** Runs a command through the server on DATA_DIR when one runs there (PGlite has one owner), else on the database itself. */
async function run(path: string, body: Record<string, unknown>, local: (prisma: Prisma) => Promise<IssuedToken>): Promise<IssuedToken> {
  const config = loadConfig();
  if (!config.databaseUrl) {
    const reply = await callOperatorSocket(config.dataDir, path, body);
    if (reply && reply.status !== 201) throw new CommandError((reply.body as { error: string }).error);
    if (reply) return reply.body as IssuedToken;
  }
  const db = await openDatabase({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, schema: config.databaseSchema });
  try {
    return await local(db.prisma);
  } catch (error) {
    if (error instanceof DomainError) throw new CommandError(error.message);
    throw error;
  } finally {
    await db.close();
  }
}

async function orgCreate(argv: string[]): Promise<boolean> {
  const { positionals, values } = parseArgs({ args: argv, allowPositionals: true, options: { admin: { type: 'string' } } });
  const [, , name] = positionals;
  const admin = values.admin;
  if (!name || !admin || positionals.length !== 3) return false;
  const { org, person, secret } = await run('/orgs', { name, admin }, (p) => createOrganization(p, name, admin));
  console.log(`created organization ${org.name} (${org.id}) with admin ${person.email}`);
  console.log(`admin token (shown once): ${secret}`);
  return true;
}

async function tokenCreate(argv: string[]): Promise<boolean> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { org: { type: 'string' }, admin: { type: 'boolean' }, email: { type: 'string' } },
  });
  const { org, admin, email } = values;
  if (!org || !admin || positionals.length !== 2) return false;
  const issued = await run('/tokens', { org, email }, (p) => issueAdminToken(p, org, email));
  console.log(`issued a CLI token for ${issued.person.email}, admin of ${issued.org.name}`);
  console.log(`token (shown once): ${issued.secret}`);
  return true;
}

async function main(argv: string[]): Promise<number> {
  const [group, verb] = argv;
  const command = group === 'org' && verb === 'create' ? orgCreate : group === 'token' && verb === 'create' ? tokenCreate : undefined;
  try {
    if (command && (await command(argv))) return 0;
  } catch (error) {
    if (!(error instanceof CommandError)) throw error;
    console.error(`berth: ${error.message}`);
    return 1;
  }
  console.error(USAGE);
  return 2;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  console.error(`berth: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 2;
}
