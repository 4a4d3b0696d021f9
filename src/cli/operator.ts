// Operator commands: they work against the configured database (DATA_DIR or DATABASE_URL) whether
// or not a server is running on it.
//   berth org create <name> --admin <email>
//   berth token create --org <name> --admin [--email <admin's email>]
//   berth org limits <name> [--storage SIZE|default] [--pool-share FRACTION|default]
// The database and services are imported when a command runs, so that `berth` starts quickly for
// the commands that only talk HTTP.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import type { Config } from '../app/config';
import type { OrgLimitsReply } from '../app/operator';
import type { Prisma } from '../platform/db';
import { CommandError } from './errors';

/** Runs a command through the server on DATA_DIR when one runs there (PGlite has one owner), else on the database itself. */
async function run<T>(path: string, body: Record<string, unknown>, local: (prisma: Prisma, config: Config) => Promise<T>): Promise<T> {
  const [{ loadConfig }, { openDatabase }, { callOperatorSocket }, { DomainError }] = await Promise.all([
    import('../app/config'),
    import('../platform/db'),
    import('../app/operator'),
    import('../kernel/errors'),
  ]);
  const config = loadConfig();
  if (!config.databaseUrl) {
    const reply = await callOperatorSocket(config.dataDir, path, body);
    if (reply && reply.status !== 201) throw new CommandError((reply.body as { error: string }).error);
    if (reply) return reply.body as T;
  }
  // Without DATA_DIR the default ./data is only used when a database is there: a command run from
  // the wrong folder must not make an empty one and act on it.
  if (!config.databaseUrl && process.env.DATA_DIR === undefined && !existsSync(join(config.dataDir, 'pg'))) {
    throw new CommandError(
      `no Berth database in ${config.dataDir}: set DATA_DIR to the server's data folder (or DATABASE_URL), or DATA_DIR=${config.dataDir} to make one there`,
    );
  }
  const db = await openDatabase({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, schema: config.databaseSchema });
  try {
    return await local(db.prisma, config);
  } catch (error) {
    if (error instanceof DomainError) throw new CommandError(error.message);
    throw error;
  } finally {
    await db.close();
  }
}

export function registerOperatorCommands(program: Command): void {
  const org = program.command('org').description('operator: organizations (on the configured database)');
  org
    .command('limits <name>')
    .description("set an organization's limits (`default`: the server's setting); prints what then holds")
    .option('--storage <size>', 'sealed bytes its artifacts and snapshots may take, such as 1TiB (ORG_STORAGE_LIMIT)')
    .option('--pool-share <fraction>', "of a shared pool's hot nodes and queue it may hold, above 0 and at most 1 (POOL_ORG_SHARE)")
    .action(async (name: string, options: { storage?: string; poolShare?: string }) => {
      const { setOrgLimits } = await import('../app/operator');
      const { formatSize } = await import('../kernel/sizes');
      const body = { org: name, storage: options.storage, poolShare: options.poolShare };
      const limits = await run<OrgLimitsReply>('/org-limits', body, (p, config) =>
        setOrgLimits({ config }, p, name, { storage: options.storage, poolShare: options.poolShare }),
      );
      const source = (set: boolean) => (set ? 'set for it' : "the server's default");
      console.log(`organization ${limits.org}:`);
      console.log(`  storage     ${formatSize(limits.storage)} (${source(limits.storageSet)})`);
      console.log(`  pool share  ${limits.poolShare} (${source(limits.poolShareSet)})`);
    });
  org
    .command('create <name>')
    .description('create an organization and its first admin; prints the admin token once')
    .requiredOption('--admin <email>', "the first admin's email")
    .action(async (name: string, options: { admin: string }) => {
      const { createOrganization } = await import('../app/operator');
      const { org, person, secret } = await run('/orgs', { name, admin: options.admin }, (p) => createOrganization(p, name, options.admin));
      console.log(`created organization ${org.name} (${org.id}) with admin ${person.email}`);
      console.log(`admin token (shown once): ${secret}`);
    });

  program
    .command('token')
    .description('operator: CLI tokens (on the configured database)')
    .command('create')
    .description("issue a CLI token for an organization's admin; prints it once")
    .requiredOption('--org <name>', 'the organization')
    .requiredOption('--admin', 'the token acts as an admin')
    .option('--email <email>', "the admin's email (default: the organization's first admin)")
    .action(async (options: { org: string; email?: string }) => {
      const { issueAdminToken } = await import('../app/operator');
      const issued = await run('/tokens', { org: options.org, email: options.email }, (p) =>
        issueAdminToken(p, options.org, options.email),
      );
      console.log(`issued a CLI token for ${issued.person.email}, admin of ${issued.org.name}`);
      console.log(`token (shown once): ${issued.secret}`);
    });
}
