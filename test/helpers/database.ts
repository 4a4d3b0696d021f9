import { access, cp, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { inject } from 'vitest';

/**
 * Gives DATA_DIR `dataDir` a migrated embedded database copied from the run's template
 * (test/helpers/database-setup.ts), unless it has one already: the server then only checks the
 * migrations instead of applying them all. Outside vitest, or without the template, it does nothing
 * and the server makes its own.
 */
export async function seedDatabase(dataDir: string): Promise<void> {
  let template: string | undefined;
  try {
    template = inject('pgliteTemplate');
  } catch {
    return;
  }
  if (!template) return;
  const target = join(dataDir, 'pg');
  if (
    await access(target).then(
      () => true,
      () => false,
    )
  )
    return;
  // As the server makes it: private to this user.
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await cp(template, target, { recursive: true });
}
