// `npm run migrate:new -- <name>`: writes prisma/migrations/<UTC timestamp>_<name>/migration.sql with
// the SQL that brings the migrations up to schema.prisma (what `prisma migrate dev --create-only`
// would write, without the native engine or a database server).
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { MIGRATIONS_DIR } from '../src/platform/db/migrate.js';
import { diffMigrationsToSchema, MIGRATION_LOCK } from './schema-engine.js';

function utcStamp(d = new Date()): string {
  return d.toISOString().replace(/[-:T]/g, '').slice(0, 14);
}

async function main(): Promise<number> {
  const raw = process.argv.slice(2).join(' ');
  // A directory-safe name: lower-case words joined by '_'.
  const name = raw
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
    .slice(0, 200);
  if (!name) {
    console.error('usage: npm run migrate:new -- <name>');
    return 2;
  }
  const sql = await diffMigrationsToSchema();
  if (!sql) {
    console.log('no changes: prisma/migrations already matches prisma/schema.prisma');
    return 0;
  }
  const dirName = `${utcStamp()}_${name}`;
  const dir = join(MIGRATIONS_DIR, dirName);
  if (existsSync(dir)) throw new Error(`migration directory already exists: ${dir}`);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'migration.sql'), sql);
  await writeFile(join(MIGRATIONS_DIR, 'migration_lock.toml'), MIGRATION_LOCK);
  console.log(`wrote prisma/migrations/${dirName}/migration.sql`);
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
