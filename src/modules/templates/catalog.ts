// The templates catalog: pools of hot nodes and the templates environments are leased from.
// Loaded at start from TEMPLATES_FILE (default `templates.json` at the repo root); a template can
// also be upserted by admins (validateTemplateSpec). The format is the zod schema below
// (docs/environments.md, "Templates"); unknown fields are refused so that typos do not pass.
//
// Every error names the field path, prefixed by the file for the catalog:
//   templates.json: templates[1].hard: "25h" exceeds the 24h maximum
//   templates.json: pools[0].hotNodes: must be an integer >= 0
//   templates.json: templates[0].resources.memory: "12XB" is not a size such as "512MiB" or "8GiB"
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import path from 'node:path';
import { z } from 'zod';
import { checkMax, formatCompactDuration, HOUR_MS, parseDuration } from '../../kernel/durations';
import { ValidationError } from '../../kernel/errors';
import { normalizeImage } from '../../kernel/image-ref';
import { validateName } from '../../kernel/labels';
import { show } from '../../kernel/show';
import { formatSize, MIB, parseSize, TIB } from '../../kernel/sizes';

export const MAX_HARD_MS = 24 * HOUR_MS;
export const MAX_START_MS = 24 * HOUR_MS;
export const MAX_HOT_NODES = 10_000;
export const MAX_QUEUED = 1_000_000;
/** The most started, unclaimed containers a template may keep on its pool's nodes (`warm`). */
export const MAX_WARM = 32;
const MAX_DESCRIPTION = 500;
export const MIN_CPUS = 0.1;
export const MAX_CPUS = 64;
export const MIN_MEMORY = 6 * MIB;
export const MAX_MEMORY = TIB;
export const MIN_DISK = MIB;
export const MAX_DISK = 64 * TIB;
export const MIN_PIDS = 16;
export const MAX_PIDS = 1_000_000;
/**
 * The most a template's `env` may hold: names + values + 2 bytes each (UTF-8). A remote node
 * receives its environment's description in one PostgreSQL NOTIFY (8000 bytes at most).
 */
export const MAX_ENV_BYTES = 4 * 1024;
export const NETWORKS = ['none', 'egress'] as const;
export type Network = (typeof NETWORKS)[number];

export type PoolSpec = z.infer<typeof Pool>;
/** A share; `envPath` is absolute and normalised. */
export type ShareSpec = z.infer<typeof Share>;
/** A service; `target` is host:port inside the environment. */
export type ServiceSpec = z.infer<typeof Service>;
/** What an environment may use; sizes as written (`512MiB`, parseSize of src/kernel/sizes.ts reads them). */
export type ResourcesSpec = { cpus?: number; memory?: string; pids?: number; disk?: string };

export type TemplateSpec = {
  name: string;
  description?: string;
  pool: string;
  startMs: number;
  /** As written in the file, e.g. `30m`. */
  idle: string;
  /** As written in the file, e.g. `6h`. */
  hard: string;
  idleMs: number;
  hardMs: number;
  shares: ShareSpec[];
  services: ServiceSpec[];
  /** The OCI image, normalised (`docker.io/library/node:20`); absent: environments hold files only. */
  image?: string;
  /** Only the limits the template sets. */
  resources: ResourcesSpec;
  /** `none` (loopback only, the default) or `egress` (outbound, never the node's or link-local addresses). */
  network: Network;
  /** Absolute and normalised; `/` by default. */
  workdir: string;
  /** What an interactive session runs when it names no command (`berth shell`); `/bin/sh` by default. */
  shell: string;
  /** Environment variables of the environment's processes. */
  env: Record<string, string>;
  /** Started, unclaimed containers its pool's nodes keep for its leases (0: none). */
  warm: number;
  /** Who commands and sessions run as (`name`, `uid`, `name:group`); absent: the image's user. */
  user?: string;
  /** The user of the container's own command; absent: the image's user. */
  containerUser?: string;
  /**
   * Commands run inside as `user` in `workdir` (docs/environments.md, "Lifecycle commands"): the
   * create phases when its container is made, `postStartCommand` when it starts or is claimed.
   */
  lifecycle: LifecycleCommand[];
};

/** The devcontainer.json lifecycle properties Berth runs, in the order it runs them. */
export const LIFECYCLE_PHASES = ['onCreateCommand', 'updateContentCommand', 'postCreateCommand', 'postStartCommand'] as const;
export type LifecyclePhase = (typeof LIFECYCLE_PHASES)[number];
/**
 * One command of a phase: the string form runs under `/bin/sh -c`, the array form as is; the object
 * form gives a phase several commands, each named by its key, run side by side.
 */
export type LifecycleCommand = {
  phase: LifecyclePhase;
  /** The object form's key. */
  name?: string;
  argv: string[];
};
/** The most a template's lifecycle commands may hold, as JSON (they reach nodes in one NOTIFY with `env`). */
export const MAX_LIFECYCLE_BYTES = 2 * 1024;

export interface Catalog {
  pools: PoolSpec[];
  templates: TemplateSpec[];
}

// ---- building blocks: each message reads after `<field path>: `

/** "is required" when the field is absent (or null), `wrong` when it has another type. */
const required = (wrong: string) => ({ error: (issue: { input?: unknown }) => (issue.input == null ? 'is required' : wrong) });

const integer = (min: number, max: number) => {
  const wrong = `must be an integer >= ${min}`;
  return z.number(required(wrong)).int(wrong).min(min, wrong).max(max, `must be at most ${max}`);
};

const FIELD = 'field';
/** One of the shared checkers (names, durations), which throw a ValidationError naming a field, as a zod step. */
const checked =
  <T>(check: (value: string, field: string) => T) =>
  (value: string, ctx: z.core.$RefinementCtx<string>): T => {
    try {
      return check(value, FIELD);
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      ctx.issues.push({ code: 'custom', input: value, message: err.message.slice(FIELD.length + 2) });
      return z.NEVER;
    }
  };

const name = z.string(required('must be a string')).transform(checked(validateName));

const duration = z.string(required('must be a duration string such as "30m" or "6h"')).transform((text, ctx) => {
  const ms = checked(parseDuration)(text, ctx);
  // (z.NEVER, not a number, when the text was no duration at all)
  if (typeof ms === 'number' && ms <= 0)
    ctx.issues.push({ code: 'custom', input: text, message: `${show(text)} must be longer than ${formatCompactDuration(0)}` });
  return { text, ms };
});

/** A strict object: an unknown field is refused, naming the fields there are. */
const object = <S extends z.core.$ZodLooseShape>(shape: S, what: string) => {
  const expected = Object.keys(shape)
    .filter((k) => k !== '$schema')
    .join(', ');
  return z.strictObject(shape, {
    error: (issue) => (issue.code === 'unrecognized_keys' ? `unknown field (expected ${expected})` : `must be an object (${what})`),
  });
};

const list = <T extends z.ZodType>(item: T) => z.array(item, required('must be an array'));

/** Refuses the second of two items with the same key: `<what> "x" (also <list>[j])`. */
function unique<T>(items: T[], ctx: z.core.$RefinementCtx<T[]>, key: (item: T) => string, field: string, what: string, listName: string) {
  items.forEach((item, i) => {
    const j = items.findIndex((other) => key(other) === key(item));
    if (j < i)
      ctx.issues.push({ code: 'custom', input: item, path: [i, field], message: `${what} ${show(key(item))} (also ${listName}[${j}])` });
  });
}

/** An absolute path inside the environment, normalised; the root `/` only when `root` allows it. */
const absolutePath = (root: boolean) =>
  z.string(required('must be a string')).transform((value, ctx) => {
    const problem = (message: string) => {
      ctx.issues.push({ code: 'custom', input: value, message });
      return z.NEVER;
    };
    if (/[\p{Cc}\\]/u.test(value)) return problem(`${show(value)} must not contain control characters or "\\"`);
    if (!value.startsWith('/')) return problem(`${show(value)} must be an absolute path`);
    if (value.split('/').includes('..')) return problem(`${show(value)} must not contain ".."`);
    let normal = path.posix.normalize(value);
    if (normal.length > 1 && normal.endsWith('/')) normal = normal.slice(0, -1);
    if (normal === '/' && !root) return problem('must not be the root folder "/"');
    if (normal.length > 4096) return problem('is longer than 4096 characters');
    return normal;
  });

const envPath = absolutePath(false);

const image = z.string(required('must be a string')).transform(checked(normalizeImage));

/** A size with a binary unit, kept as written once it is within min..max. */
const size = (min: number, max: number) =>
  z.string(required('must be a size string such as "512MiB" or "8GiB"')).transform((text, ctx) => {
    const bytes = checked(parseSize)(text, ctx);
    if (typeof bytes !== 'number') return z.NEVER;
    if (bytes < min) ctx.issues.push({ code: 'custom', input: text, message: `${show(text)} is less than the ${formatSize(min)} minimum` });
    else if (bytes > max) ctx.issues.push({ code: 'custom', input: text, message: `${show(text)} exceeds the ${formatSize(max)} maximum` });
    return text;
  });

const cpusProblem = `must be a number from ${MIN_CPUS} to ${MAX_CPUS}`;

const Resources = object(
  {
    cpus: z.number(required(cpusProblem)).min(MIN_CPUS, cpusProblem).max(MAX_CPUS, cpusProblem).optional(),
    memory: size(MIN_MEMORY, MAX_MEMORY).optional(),
    pids: integer(MIN_PIDS, MAX_PIDS).optional(),
    disk: size(MIN_DISK, MAX_DISK).optional(),
  },
  'the limits cpus, memory, pids, disk',
).transform((r): ResourcesSpec => {
  // Only the keys that are set, in a fixed order.
  const out: ResourcesSpec = {};
  if (r.cpus !== undefined) out.cpus = r.cpus;
  if (r.memory !== undefined) out.memory = r.memory;
  if (r.pids !== undefined) out.pids = r.pids;
  if (r.disk !== undefined) out.disk = r.disk;
  return out;
});

const network = z.enum(NETWORKS, {
  error: (issue) =>
    issue.input == null
      ? 'is required'
      : `must be "none" or "egress"${typeof issue.input === 'string' ? ` (got ${show(issue.input)})` : ''}`,
});

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Variable name to value; names + values + 2 bytes each at most MAX_ENV_BYTES. */
const Env = z.unknown().transform((value, ctx): Record<string, string> => {
  const problem = (message: string, at: string[] = []) => {
    ctx.issues.push({ code: 'custom', input: value, path: at, message });
    return z.NEVER;
  };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return problem('must be an object of variable names to string values');
  }
  const entries = Object.entries(value);
  let bytes = 0;
  for (const [key, val] of entries) {
    if (!ENV_NAME.test(key)) {
      return problem(`${show(key)} is not a variable name (letters, digits and "_", not starting with a digit)`, [key]);
    }
    if (typeof val !== 'string') return problem('must be a string', [key]);
    if (val.includes('\0')) return problem('must not contain NUL characters', [key]);
    bytes += Buffer.byteLength(key) + Buffer.byteLength(val) + 2;
  }
  if (bytes > MAX_ENV_BYTES) {
    return problem(`holds ${bytes} bytes (names + values + 2 each); at most ${MAX_ENV_BYTES} bytes`);
  }
  // (fromEntries defines own properties: a variable named __proto__ stays a variable)
  return Object.fromEntries(entries) as Record<string, string>;
});

/** A user as the engine takes it: a name or uid, and optionally `:group` or `:gid`. */
const USER = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$/;
const user = z
  .string(required('must be a string'))
  .regex(USER, 'must be a user name or uid, optionally with ":group" (e.g. "node", "1000:1000")');

const Lifecycle = list(
  object(
    {
      phase: z.enum(LIFECYCLE_PHASES, { error: `must be one of ${LIFECYCLE_PHASES.join(', ')}` }),
      name: z.string('must be a string').min(1, 'must not be empty').max(100, 'must be at most 100 characters').optional(),
      argv: z
        .array(
          z.string('must be a string').refine((a) => !a.includes('\0'), 'must not contain NUL characters'),
          required('must be an array of strings'),
        )
        .min(1, 'must name a program'),
    },
    'a lifecycle command',
  ),
).superRefine((commands, ctx) => {
  const bytes = Buffer.byteLength(JSON.stringify(commands));
  if (bytes > MAX_LIFECYCLE_BYTES)
    ctx.issues.push({ code: 'custom', input: commands, message: `holds ${bytes} bytes as JSON; at most ${MAX_LIFECYCLE_BYTES}` });
});

const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$/;

/** `host:port`: host a DNS name, IPv4 or `[IPv6]`; port 1..65535. */
const hostPort = z.string(required('must be a string of the form host:port')).check((ctx) => {
  const value = ctx.value;
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):([0-9]{1,5})$/.exec(value);
  const [, v6, host, portText] = m ?? [];
  const hostOk =
    v6 !== undefined ? isIP(v6) === 6 : host !== undefined && (isIP(host) === 4 || (HOSTNAME.test(host) && !/^[0-9.]+$/.test(host)));
  if (!m || !hostOk) {
    ctx.issues.push({
      code: 'custom',
      input: value,
      message: `${show(value)} must have the form host:port (e.g. 127.0.0.1:5432, db:5432 or [::1]:5432)`,
    });
  } else if (Number(portText) < 1 || Number(portText) > 65535 || (portText!.length > 1 && portText!.startsWith('0'))) {
    ctx.issues.push({ code: 'custom', input: value, message: `${show(value)} has port ${portText}; ports are 1-65535` });
  }
});

// ---- the format

const Pool = object({ name, hotNodes: integer(0, MAX_HOT_NODES), maxQueued: integer(0, MAX_QUEUED) }, 'a pool');

const Share = object(
  {
    name,
    direction: z.enum(['in', 'out'], {
      error: (issue) =>
        issue.input == null
          ? 'is required'
          : `must be "in" or "out"${typeof issue.input === 'string' ? ` (got ${show(issue.input)})` : ''}`,
    }),
    envPath,
  },
  'a share',
);

const Shares = list(Share).superRefine((shares, ctx) => {
  unique(shares, ctx, (s) => s.name, 'name', 'duplicate share name', 'shares');
  shares.forEach((share, i) => {
    const j = shares.findIndex((other) => other.envPath === share.envPath);
    if (j < i) {
      ctx.issues.push({
        code: 'custom',
        input: share,
        path: [i, 'envPath'],
        message: `${show(share.envPath)} is also the envPath of shares[${j}]`,
      });
      return;
    }
    const k = shares.findIndex(
      (other, n) => n < i && (share.envPath.startsWith(`${other.envPath}/`) || other.envPath.startsWith(`${share.envPath}/`)),
    );
    if (k >= 0) {
      ctx.issues.push({
        code: 'custom',
        input: share,
        path: [i, 'envPath'],
        message: `${show(share.envPath)} and shares[${k}].envPath ${show(shares[k]!.envPath)} are nested; share folders must not overlap`,
      });
    }
  });
});

const Service = object({ service: name, target: hostPort }, 'a service');

const Services = list(Service).superRefine((services, ctx) =>
  unique(services, ctx, (s) => s.service, 'service', 'duplicate service', 'services'),
);

const TEMPLATE_FIELDS = {
  name: name.optional(),
  description: z.string('must be a string').max(MAX_DESCRIPTION, `must be at most ${MAX_DESCRIPTION} characters`).optional(),
  pool: z.string(required('must be a string')),
  startMs: integer(0, MAX_START_MS).optional(),
  idle: duration,
  hard: duration,
  shares: Shares.optional(),
  services: Services.optional(),
  image: image.optional(),
  resources: Resources.optional(),
  network: network.optional(),
  workdir: absolutePath(true).optional(),
  shell: absolutePath(true).optional(),
  env: Env.optional(),
  warm: integer(0, MAX_WARM).optional(),
  user: user.optional(),
  containerUser: user.optional(),
  lifecycle: Lifecycle.optional(),
};

/** A template; `name` is required in the catalog, and taken from the path (or equal to it) for an upsert. */
const Template = (pathName?: string) =>
  object(TEMPLATE_FIELDS, 'a template').transform((t, ctx): TemplateSpec => {
    const issue = (field: string, message: string) => ctx.issues.push({ code: 'custom', input: t, path: [field], message });
    if (pathName === undefined && t.name === undefined) issue('name', 'is required');
    if (pathName !== undefined && t.name !== undefined && t.name !== pathName) {
      issue('name', `${show(t.name)} does not match the template name ${show(pathName)}`);
    }
    if (t.hard.ms > MAX_HARD_MS) {
      try {
        checkMax(t.hard.ms, MAX_HARD_MS, FIELD, { text: t.hard.text });
      } catch (err) {
        issue('hard', (err as Error).message.slice(FIELD.length + 2));
      }
    } else if (t.idle.ms > t.hard.ms) {
      issue('idle', `${show(t.idle.text)} exceeds hard ${show(t.hard.text)}; idle must be at most hard`);
    }
    const spec: TemplateSpec = {
      name: pathName ?? t.name ?? '',
      pool: t.pool,
      startMs: t.startMs ?? 0,
      idle: t.idle.text,
      hard: t.hard.text,
      idleMs: t.idle.ms,
      hardMs: t.hard.ms,
      shares: t.shares ?? [],
      services: t.services ?? [],
      resources: t.resources ?? {},
      network: t.network ?? 'none',
      workdir: t.workdir ?? '/',
      shell: t.shell ?? '/bin/sh',
      env: t.env ?? {},
      warm: t.warm ?? 0,
      lifecycle: (t.lifecycle ?? []).map((c) => ({ ...c })),
    };
    if (t.user !== undefined) spec.user = t.user;
    if (t.containerUser !== undefined) spec.containerUser = t.containerUser;
    if (t.description !== undefined) spec.description = t.description;
    if (t.image !== undefined) spec.image = t.image;
    return spec;
  });

const poolProblem = (pool: string, pools: readonly string[]) =>
  pools.includes(pool) ? undefined : `unknown pool ${show(pool)} (pools: ${pools.join(', ') || 'none'})`;

const CatalogSchema = object(
  {
    $schema: z.unknown().optional(),
    pools: list(Pool)
      .min(1, 'at least one pool is needed')
      .superRefine((pools, ctx) => unique(pools, ctx, (p) => p.name, 'name', 'duplicate pool name', 'pools')),
    templates: list(Template()).superRefine((templates, ctx) =>
      unique(templates, ctx, (t) => t.name, 'name', 'duplicate template name', 'templates'),
    ),
  },
  'the catalog',
).superRefine((catalog, ctx) => {
  const pools = catalog.pools.map((p) => p.name);
  catalog.templates.forEach((t, i) => {
    const problem = poolProblem(t.pool, pools);
    if (problem) ctx.issues.push({ code: 'custom', input: t.pool, path: ['templates', i, 'pool'], message: problem });
  });
});

/** The first problem, as `<field path>: <problem>` (the field path also in `field`). */
function firstProblem(error: z.ZodError, prefix?: string): ValidationError {
  const issue = error.issues[0]!;
  const at = issue.code === 'unrecognized_keys' ? [...issue.path, issue.keys[0]!] : issue.path;
  const field = at.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`)).join('');
  const message = field ? `${field}: ${issue.message}` : issue.message;
  return new ValidationError(prefix ? `${prefix}: ${message}` : message, field || undefined);
}

/** Reads and checks a catalog file; errors start with `path`. */
export async function loadCatalog(file: string): Promise<Catalog> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new Error(`${file}: cannot read the templates file: ${(err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ValidationError(`${file}: not valid JSON: ${(err as Error).message}`);
  }
  return parseCatalog(json, file);
}

/** Checks a parsed catalog; errors read `<source>: <field path>: <problem>`. */
export function parseCatalog(json: unknown, source: string): Catalog {
  const result = CatalogSchema.safeParse(json);
  if (!result.success) throw firstProblem(result.error, source);
  return { pools: result.data.pools, templates: result.data.templates };
}

/**
 * Checks one template for an admin upsert (`PUT /v1/templates/{name}`): the body has the catalog's
 * template fields; `name` may be left out and otherwise must equal the name in the path; `pools`
 * are the pool names that exist. Error fields are relative to the body (`hard`, `shares[0].envPath`).
 */
export function validateTemplateSpec(input: unknown, name: string, pools: string[]): TemplateSpec {
  validateName(name, 'name');
  const result = Template(name).safeParse(input);
  if (!result.success) throw firstProblem(result.error);
  const problem = poolProblem(result.data.pool, pools);
  if (problem) throw new ValidationError(`pool: ${problem}`, 'pool');
  return result.data;
}

/** A template as stored in the database (a TemplateSpec as JSON), checked again on the way out. */
export function templateFromJson(json: unknown, name: string): TemplateSpec {
  const { idleMs: _idleMs, hardMs: _hardMs, ...input } = z.looseObject({}).parse(json);
  return Template(name).parse(input);
}

/** Checks `host:port` (host a DNS name, IPv4 or `[IPv6]`; port 1..65535) and returns it. */
export function validateHostPort(value: unknown, field: string): string {
  const result = hostPort.safeParse(value);
  if (!result.success) throw new ValidationError(`${field}: ${result.error.issues[0]!.message}`, field);
  return result.data;
}

/**
 * What a container of the template is made from, hashed: a warm container fits a lease only when
 * the lease's hash (taken from the template when it was made) is the container's. Keys in a fixed
 * order, so equal specs hash equal.
 */
export function warmSpecHash(template: TemplateSpec): string {
  const spec = {
    image: template.image ?? null,
    resources: template.resources,
    network: template.network,
    workdir: template.workdir,
    env: Object.entries(template.env).sort(([a], [b]) => (a < b ? -1 : 1)),
    shares: template.shares.map((s) => [s.name, s.envPath]),
    // A warm container ran the create phases as its user: only a lease of the same may claim it.
    user: template.user ?? null,
    containerUser: template.containerUser ?? null,
    create: template.lifecycle.filter((c) => c.phase !== 'postStartCommand'),
  };
  return createHash('sha256').update(JSON.stringify(spec)).digest('hex').slice(0, 24);
}
