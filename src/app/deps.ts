// The composition root: builds everything services need (Deps) from the configuration, fully
// typed, and closes it again. Serving Deps over HTTP is src/app/server.ts's job.

import { createBackground } from '../kernel/background';
import { CredentialCache, loadAddressLocks } from '../modules/credentials';
import { environmentEnds } from '../modules/environments';
import { builtinIdentity } from '../modules/nodes';
import { applyCatalog, loadCatalog } from '../modules/templates';
import { createMetrics } from '../observability/metrics';
import { type Clock, systemClock } from '../platform/clock';
import { loadMasterKey } from '../platform/crypto/master-key';
import { openDatabase } from '../platform/db';
import { createEvents } from '../platform/events';
import { createBlobStore } from '../platform/store';
import type { Config } from './config';
import type { Deps, Log } from './context';
import { backgroundJobs } from './jobs';
import { callOperatorSocket } from './operator';

export interface BuildOptions {
  config: Config;
  clock?: Clock;
  log: Log;
}

/**
 * Opens the database (applying migrations), events, blob store and master key, and loads the
 * template catalog. The background jobs are built but not started: the server starts them once
 * it serves. On failure, whatever was opened is closed again.
 */
export async function buildDeps({ config, clock = systemClock, log }: BuildOptions): Promise<Deps> {
  if (!config.databaseUrl && (await callOperatorSocket(config.dataDir, '/ping', {}))) {
    throw new Error(`another Berth is already serving ${config.dataDir}`);
  }
  // A bad catalog fails the start with a message naming the field, before anything else opens.
  const catalog = await loadCatalog(config.templatesFile);
  const masterKey = await loadMasterKey({ masterKeyB64: config.masterKey, dataDir: config.dataDir });
  const db = await openDatabase({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, schema: config.databaseSchema });
  try {
    const events = await createEvents({ databaseUrl: config.databaseUrl, schema: config.databaseSchema, log });
    try {
      const store = await createBlobStore({
        dataDir: config.dataDir,
        azureConnectionString: config.azureConnectionString,
        azureContainer: config.azureContainer,
      });
      await applyCatalog(db.prisma, catalog);
      const background = createBackground(backgroundJobs, log);
      const credentials = new CredentialCache(events, clock);
      await loadAddressLocks(db.prisma, credentials, clock.now());
      const deps = {
        config,
        log,
        db,
        prisma: db.prisma,
        clock,
        events,
        credentials,
        store,
        masterKey,
        catalog,
        background,
        builtin: builtinIdentity(config, masterKey),
        metrics: createMetrics(db.prisma),
        // Set just below: the environments module's ends close over the finished deps.
      } satisfies Omit<Deps, 'ends'> as Deps;
      deps.ends = environmentEnds(deps);
      return deps;
    } catch (err) {
      await events.close();
      throw err;
    }
  } catch (err) {
    await db.close();
    throw err;
  }
}

/** Stops the background jobs, then closes events and the database. */
export async function closeDeps(deps: Deps): Promise<void> {
  await deps.background.stop();
  deps.credentials.close();
  await deps.events.close();
  await deps.db.close();
}
