import { defineConfig } from 'prisma/config';

// No datasource URL here: Berth connects through driver adapters it builds itself (src/platform/db/),
// and applies migrations with its own runner, so `prisma generate` needs no database.
export default defineConfig({
  schema: 'prisma/schema.prisma',
  migrations: { path: 'prisma/migrations' },
});
