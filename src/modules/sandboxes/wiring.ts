// Wiring environments to sandboxes, and the sandbox agent's configuration (docs/sandboxes.md).
//
// planWiring runs inside the environment-creation transaction: it checks the request's shares,
// files and sync rules against the template, locks the sandbox row and picks loopback ports that
// no live environment of the sandbox holds. sandboxConfig builds what the agent runs from the live
// environments wired to it; notifySandboxConfig bumps the config version and wakes subscribers.

import type { Actor, Deps } from '../../app/context';
import { Prisma as P } from '../../generated/prisma/client';
import { requireSandboxOwner } from '../../kernel/access';
import { LIVE_STATES } from '../../kernel/environment-states';
import { ConflictError, NotFoundError, ValidationError } from '../../kernel/errors';
import { type Export, exportsOf, type SyncSpec, sharesOf, syncOf, type WiredShare } from '../../kernel/json-columns';
import { isId } from '../../kernel/names';
import { currentKey } from '../../kernel/project-keys';
import { DEFAULT_IGNORES, validateInclude, validateRelativePath } from '../../kernel/sync-rules';
import type { Tx } from '../../platform/db';
import { topics } from '../../platform/events';
import { AGENT_FOLDER, inAgentFolder } from '../../protocol/agent-folder';
import {
  ConfigEnvironment,
  type KeyringEntry,
  MAX_EXTRA_FILES,
  PORT_MAX,
  PORT_MIN,
  type SandboxConfig,
} from '../../protocol/sandbox-config';
import type { TemplateSpec } from '../templates';

export interface WiringInput {
  sandbox?: string | null;
  shares?: unknown;
  files?: unknown;
  include?: unknown;
  noIgnore?: unknown;
}

export interface Wiring {
  sandboxId: string | null;
  exports: Export[];
  shares: WiredShare[];
  sync: SyncSpec;
}

type Db = Pick<Tx, '$queryRaw'>;

/** The sandbox row a reference (an `sb_…` id, or the name of a sandbox not removed) points at. */
export async function findSandboxRow(
  db: Db,
  orgId: string,
  ref: string,
  opts: { lock?: boolean } = {},
): Promise<{ id: string; name: string; owner: string; removed: Date | null } | undefined> {
  const match = isId(ref, 'sb') ? P.sql`id = ${ref}` : P.sql`name = ${ref} AND removed IS NULL`;
  const rows = await db.$queryRaw<{ id: string; name: string; owner: string; removed: Date | null }[]>`
    SELECT id, name, owner, removed FROM "Sandbox" WHERE "orgId" = ${orgId} AND ${match} ${opts.lock ? P.sql`FOR UPDATE` : P.empty}`;
  return rows[0];
}

/**
 * Checks the wiring part of an environment request and plans it (see the top of this file).
 * Errors: ValidationError (422) naming the field; NotFoundError (404 not_found) for a sandbox
 * that is unknown, removed or another organization's; ForbiddenError (403) for a colleague's.
 */
export async function planWiring(tx: Tx, actor: Actor, template: TemplateSpec, input: WiringInput): Promise<Wiring> {
  const { orgId } = actor;
  const include = validateInclude(input.include);
  if (input.noIgnore !== undefined && input.noIgnore !== null && typeof input.noIgnore !== 'boolean') {
    throw new ValidationError('noIgnore: must be true or false', 'noIgnore');
  }
  const noIgnore = input.noIgnore === true;
  if (input.sandbox !== undefined && input.sandbox !== null && typeof input.sandbox !== 'string') {
    throw new ValidationError('sandbox: must be a sandbox id or name', 'sandbox');
  }
  const sharesIn = stringMap(input.shares, 'shares');
  const filesIn = stringMap(input.files, 'files');
  if (!input.sandbox) {
    for (const [field, given] of [
      ['shares', sharesIn],
      ['files', filesIn],
    ] as const) {
      if (Object.keys(given).length) {
        throw new ValidationError(`${field}: only an environment wired to a sandbox has ${field}; give "sandbox" too`, field);
      }
    }
    return { sandboxId: null, exports: [], shares: [], sync: { include, noIgnore, files: {} } };
  }

  const shares = mapShares(template, sharesIn);
  const files = mapFiles(template, shares, filesIn);

  // The row lock makes concurrent creates on one sandbox (and its removal) take turns, so two
  // live environments never get the same port.
  const row = await findSandboxRow(tx, orgId, input.sandbox, { lock: true });
  if (!row || row.removed) throw new NotFoundError(`sandbox ${input.sandbox}`);
  requireSandboxOwner(actor, row, row.name);
  const live = await tx.environment.findMany({
    where: { orgId, state: { in: [...LIVE_STATES] }, sandboxId: row.id },
    select: { exports: true },
  });
  const taken = new Set<number>();
  for (const env of live) {
    for (const e of exportsOf(env)) {
      const port = portOf(e.listen);
      if (port !== undefined) taken.add(port);
    }
  }
  const exports = template.services.map((s) => {
    const port = pickPort(portOf(s.target) ?? 0, taken, input.sandbox!);
    taken.add(port);
    return { service: s.service, listen: `127.0.0.1:${port}`, target: s.target };
  });
  return { sandboxId: row.id, exports, shares, sync: { include, noIgnore, files } };
}

function stringMap(value: unknown, field: string): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new ValidationError(`${field}: must be an object of string to string`, field);
  }
  return value as Record<string, unknown>;
}

/** Every template share, at the folder the request maps it to or else at its own name. */
function mapShares(template: TemplateSpec, given: Record<string, unknown>): WiredShare[] {
  const names = template.shares.map((s) => s.name);
  for (const name of Object.keys(given)) {
    if (!names.includes(name)) {
      const known = names.length ? `its shares: ${names.join(', ')}` : 'it has none';
      throw new ValidationError(
        `shares.${name}: template ${template.name} has no share ${JSON.stringify(name)} (${known})`,
        `shares.${name}`,
      );
    }
  }
  const shares = template.shares.map((s) => {
    const mapped = given[s.name];
    const field = `shares.${s.name}`;
    const localPath = mapped === undefined ? s.name : validateRelativePath(mapped as string, field, { allowRoot: true });
    if (inAgentFolder(localPath)) {
      throw new ValidationError(`${field}: ${AGENT_FOLDER}/ holds the sandbox agent's credential; no share may use it`, field);
    }
    if (s.direction === 'out' && localPath === '.') {
      throw new ValidationError(
        `${field}: an "out" share writes into its folder; map it to a folder inside the sandbox folder, not the sandbox folder itself`,
        field,
      );
    }
    return { name: s.name, direction: s.direction, envPath: s.envPath, localPath, files: [] as string[] };
  });
  shares.forEach((share, i) => {
    const other = shares.findIndex((o, j) => j < i && o.localPath === share.localPath);
    if (other >= 0) {
      const field = share.name in given ? share.name : shares[other]!.name;
      throw new ValidationError(
        `shares.${field}: shares ${shares[other]!.name} and ${share.name} would both use the folder ${JSON.stringify(share.localPath)} on the sandbox (an unmapped share uses its name)`,
        `shares.${field}`,
      );
    }
  });
  return shares;
}

/** `files` keys are `<share>/<path in the share>` of an `in` share; values are sandbox paths. */
function mapFiles(template: TemplateSpec, shares: WiredShare[], given: Record<string, unknown>): Record<string, string> {
  const entries = Object.entries(given);
  if (entries.length > MAX_EXTRA_FILES) {
    throw new ValidationError(`files: at most ${MAX_EXTRA_FILES} extra files (got ${entries.length})`, 'files');
  }
  const files: Record<string, string> = {};
  for (const [destination, source] of entries) {
    const field = `files.${destination}`;
    const slash = destination.indexOf('/');
    const share = shares.find((s) => s.name === (slash < 0 ? destination : destination.slice(0, slash)));
    if (!share || slash < 0) {
      throw new ValidationError(
        `${field}: a destination is "<share>/<path>" inside a share of template ${template.name} (shares: ${shares.map((s) => s.name).join(', ') || 'none'})`,
        field,
      );
    }
    if (share.direction !== 'in') {
      throw new ValidationError(`${field}: share ${share.name} goes out of the environment; extra files go into "in" shares`, field);
    }
    const inShare = validateRelativePath(destination.slice(slash + 1), field);
    const key = `${share.name}/${inShare}`;
    if (key in files) throw new ValidationError(`${field}: names the same destination as another entry (${key})`, field);
    const from = validateRelativePath(source as string, field);
    if (inAgentFolder(from))
      throw new ValidationError(`${field}: ${AGENT_FOLDER}/ holds the sandbox agent's credential; no file is read from it`, field);
    files[key] = from;
    share.files.push(inShare);
  }
  for (const share of shares) share.files.sort();
  return files;
}

function portOf(address: string): number | undefined {
  const m = /:(\d{1,5})$/.exec(address);
  return m ? Number(m[1]) : undefined;
}

/**
 * A free loopback port for a service listening on `target`: 10000 + the target port's last four
 * digits (5432 -> 15432, 8080 -> 18080), else 20000 + them, else the lowest free port from 10000.
 */
function pickPort(target: number, taken: Set<number>, sandbox: string): number {
  const tail = target % 10_000;
  for (const port of [PORT_MIN + tail, 2 * PORT_MIN + tail]) if (!taken.has(port)) return port;
  for (let port = PORT_MIN; port <= PORT_MAX; port++) if (!taken.has(port)) return port;
  throw new ConflictError(`sandbox ${sandbox} has no free loopback port left in ${PORT_MIN}-${PORT_MAX}`, 'no_free_port');
}

// ---- the agent's configuration (its schema: src/protocol/sandbox-config.ts)

/**
 * The sandbox's configuration (format: docs/sandboxes.md, "Sandbox configuration"). `keyring`:
 * whether the reader is the sandbox's own agent, the only one that gets the project keys.
 */
export async function sandboxConfig(deps: Deps, orgId: string, sandboxId: string, opts: { keyring: boolean }): Promise<SandboxConfig> {
  const [sandbox] = await deps.prisma.$queryRaw<{ id: string; name: string; org: string; version: number; removed: Date | null }[]>`
    SELECT s.id, s.name, o.name AS org, s.version, s.removed
      FROM "Sandbox" s JOIN "Organization" o ON o.id = s."orgId"
     WHERE s.id = ${sandboxId} AND s."orgId" = ${orgId}`;
  if (!sandbox) throw new NotFoundError(`sandbox ${sandboxId}`);
  const head = { id: sandbox.id, name: sandbox.name, org: sandbox.org };
  if (sandbox.removed) {
    // A removed sandbox gets nothing, not even the entries of environments still running.
    return {
      sandbox: { ...head, removed: sandbox.removed.toISOString() },
      version: sandbox.version,
      environments: [],
      ...(opts.keyring ? { keyring: [] } : {}),
    };
  }
  const rows = await deps.prisma.environment.findMany({
    where: { orgId, sandboxId, state: { in: [...LIVE_STATES] } },
    select: { id: true, name: true, state: true, template: true, project: true, node: true, exports: true, shares: true, sync: true },
    orderBy: [{ created: 'asc' }, { id: 'asc' }],
  });
  const environments = rows.map((env): ConfigEnvironment => {
    const { include, noIgnore, files: extra } = syncOf(env);
    const files = Object.entries(extra);
    const shares = sharesOf(env).map((share) => ({
      ...share,
      sync: {
        include,
        noIgnore,
        defaultIgnores: [...DEFAULT_IGNORES],
        files: Object.fromEntries(
          files.filter(([dest]) => dest.startsWith(`${share.name}/`)).map(([dest, source]) => [dest.slice(share.name.length + 1), source]),
        ),
      },
    }));
    return {
      id: env.id,
      name: env.name,
      // The query asked for live states only; the schema's enum says so to the type checker.
      state: ConfigEnvironment.shape.state.parse(env.state),
      template: env.template,
      project: env.project,
      ...(env.node ? { node: env.node } : {}),
      imports: exportsOf(env),
      shares,
    };
  });
  const config: SandboxConfig = { sandbox: head, version: sandbox.version, environments };
  if (opts.keyring)
    config.keyring = await keyring(
      deps,
      orgId,
      environments.map((e) => e.project),
    );
  return config;
}

/**
 * The current data key of each project, so the agent can seal what it syncs. This is the one
 * place a data key leaves the server: only to the sandbox's own credential, and only for projects
 * of environments wired to the sandbox.
 */
async function keyring(deps: Deps, orgId: string, projects: string[]): Promise<KeyringEntry[]> {
  const entries: KeyringEntry[] = [];
  for (const project of [...new Set(projects)].sort()) {
    const { version, key } = await currentKey(deps, orgId, project);
    entries.push({ project, version, key: key.toString('base64') });
  }
  return entries;
}

/**
 * Call after every committed change to what a sandbox's config shows (an environment wired to
 * it was created or changed state; the sandbox was removed): bumps the config version and wakes
 * subscribers on every instance. A null sandbox is a no-op.
 */
export async function notifySandboxConfig(deps: Deps, orgId: string, sandboxId: string | null | undefined): Promise<void> {
  if (!sandboxId) return;
  const rows = await deps.prisma.$queryRaw<{ version: number }[]>`
    UPDATE "Sandbox" SET version = version + 1 WHERE id = ${sandboxId} AND "orgId" = ${orgId} RETURNING version`;
  if (rows[0]) await deps.events.publish(topics.sandboxConfig(sandboxId), { version: rows[0].version });
}
