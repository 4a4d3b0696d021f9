// The templates catalog: pools of hot nodes and the templates environments are leased from.
// Loaded at start from TEMPLATES_FILE (default `templates.json` at the repo root); a template can
// also be upserted by admins (validateTemplateSpec).
//
// Format (every field is checked; unknown fields are refused so that typos do not pass silently):
// {
//   "$schema": "...",                          optional, ignored
//   "pools": [                                 at least one
//     { "name": "default",                     a name (see labels.ts NAME_PATTERN), unique
//       "hotNodes": 4,                         integer 0..10000: nodes kept ready in the pool
//       "maxQueued": 100 }                     integer 0..1000000: queue length before 503
//   ],
//   "templates": [
//     { "name": "default",                     a name, unique
//       "description": "...",                  optional, at most 500 characters
//       "pool": "default",                     one of the pools
//       "startMs": 200,                        optional (default 0), integer 0..86400000
//       "idle": "30m", "hard": "6h",           durations (see durations.ts), 0 < idle <= hard <= 24h
//       "shares": [                            optional (default []), names unique
//         { "name": "src", "direction": "in" | "out",
//           "envPath": "/workspace/src" }      absolute, not "/", no "..", stored normalised;
//       ],                                     no two shares at the same or nested envPaths
//       "services": [                          optional (default []), service names unique
//         { "service": "postgres", "target": "127.0.0.1:5432" }   host:port inside the environment;
//       ] } ] }                                host = DNS name, IPv4 or [IPv6], port 1..65535
//
// Every error names the field path, prefixed by the file for the catalog:
//   templates.json: templates[1].hard: "25h" exceeds the 24h maximum
//   templates.json: pools[0].hotNodes: must be an integer >= 0
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import path from 'node:path';
import { checkMax, formatCompactDuration, HOUR_MS, parseDuration } from './durations';
import { ValidationError } from './errors';
import { validateName } from './labels';

export const MAX_HARD_MS = 24 * HOUR_MS;
export const MAX_START_MS = 24 * HOUR_MS;
export const MAX_HOT_NODES = 10_000;
export const MAX_QUEUED = 1_000_000;
const MAX_DESCRIPTION = 500;

export interface PoolSpec {
  name: string;
  hotNodes: number;
  maxQueued: number;
}

export interface ShareSpec {
  name: string;
  direction: 'in' | 'out';
  /** Absolute, normalised path inside the environment. */
  envPath: string;
}

export interface ServiceSpec {
  service: string;
  /** host:port inside the environment. */
  target: string;
}

export interface TemplateSpec {
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
}

export interface Catalog {
  pools: PoolSpec[];
  templates: TemplateSpec[];
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
  try {
    return parseCatalogInner(json);
  } catch (err) {
    if (err instanceof ValidationError) throw new ValidationError(`${source}: ${err.message}`, err.field);
    throw err;
  }
}

function parseCatalogInner(json: unknown): Catalog {
  const top = object(json, '', ['$schema', 'pools', 'templates'], 'the catalog');
  const poolsIn = array(required(top, 'pools', ''), 'pools');
  if (poolsIn.length === 0) throw new ValidationError('pools: at least one pool is needed', 'pools');
  const pools: PoolSpec[] = [];
  poolsIn.forEach((p, i) => {
    const pool = parsePool(p, `pools[${i}]`);
    const dup = pools.findIndex((q) => q.name === pool.name);
    if (dup >= 0) fail(`pools[${i}].name`, `duplicate pool name ${show(pool.name)} (also pools[${dup}])`);
    pools.push(pool);
  });
  const poolNames = pools.map((p) => p.name);
  const templatesIn = array(required(top, 'templates', ''), 'templates');
  const templates: TemplateSpec[] = [];
  templatesIn.forEach((t, i) => {
    const template = parseTemplate(t, `templates[${i}].`, poolNames, undefined);
    const dup = templates.findIndex((q) => q.name === template.name);
    if (dup >= 0) {
      fail(`templates[${i}].name`, `duplicate template name ${show(template.name)} (also templates[${dup}])`);
    }
    templates.push(template);
  });
  return { pools, templates };
}

/**
 * Checks one template for an admin upsert (`PUT /v1/templates/{name}`): the body has the catalog's
 * template fields; `name` may be left out and otherwise must equal the name in the path; `pools`
 * are the pool names that exist. Error fields are relative to the body (`hard`, `shares[0].envPath`).
 */
export function validateTemplateSpec(input: unknown, name: string, pools: string[]): TemplateSpec {
  validateName(name, 'name');
  return parseTemplate(input, '', pools, name);
}

function parsePool(input: unknown, at: string): PoolSpec {
  const o = object(input, at, ['name', 'hotNodes', 'maxQueued'], 'a pool');
  return {
    name: validateName(required(o, 'name', at), `${at}.name`),
    hotNodes: integer(required(o, 'hotNodes', at), `${at}.hotNodes`, 0, MAX_HOT_NODES),
    maxQueued: integer(required(o, 'maxQueued', at), `${at}.maxQueued`, 0, MAX_QUEUED),
  };
}

const TEMPLATE_FIELDS = ['name', 'description', 'pool', 'startMs', 'idle', 'hard', 'shares', 'services'];

/** `prefix` is `templates[1].` in the catalog and empty for an upsert body. */
function parseTemplate(input: unknown, prefix: string, pools: readonly string[], pathName: string | undefined): TemplateSpec {
  const at = prefix.replace(/\.$/, '');
  const o = object(input, at, TEMPLATE_FIELDS, 'a template');
  let name: string;
  if (pathName === undefined) {
    name = validateName(required(o, 'name', at), `${prefix}name`);
  } else {
    if (o.name !== undefined && o.name !== pathName) {
      fail(`${prefix}name`, `${show(String(o.name))} does not match the template name ${show(pathName)}`);
    }
    name = pathName;
  }

  let description: string | undefined;
  if (o.description !== undefined) {
    if (typeof o.description !== 'string') fail(`${prefix}description`, 'must be a string');
    if (o.description.length > MAX_DESCRIPTION) {
      fail(`${prefix}description`, `must be at most ${MAX_DESCRIPTION} characters`);
    }
    description = o.description;
  }

  const pool = required(o, 'pool', at);
  if (typeof pool !== 'string') fail(`${prefix}pool`, 'must be a string');
  if (!pools.includes(pool)) {
    fail(`${prefix}pool`, `unknown pool ${show(pool)} (pools: ${pools.join(', ') || 'none'})`);
  }

  const startMs = o.startMs === undefined ? 0 : integer(o.startMs, `${prefix}startMs`, 0, MAX_START_MS);

  const idle = durationString(required(o, 'idle', at), `${prefix}idle`);
  const hard = durationString(required(o, 'hard', at), `${prefix}hard`);
  const idleMs = positiveDuration(idle, `${prefix}idle`);
  const hardMs = positiveDuration(hard, `${prefix}hard`);
  checkMax(hardMs, MAX_HARD_MS, `${prefix}hard`, { text: hard });
  if (idleMs > hardMs) {
    fail(`${prefix}idle`, `${show(idle)} exceeds hard ${show(hard)}; idle must be at most hard`);
  }

  const shares: ShareSpec[] = [];
  if (o.shares !== undefined) {
    array(o.shares, `${prefix}shares`).forEach((s, i) => {
      const sat = `${prefix}shares[${i}]`;
      const share = parseShare(s, sat);
      shares.forEach((other, j) => {
        if (other.name === share.name) fail(`${sat}.name`, `duplicate share name ${show(share.name)} (also shares[${j}])`);
        if (other.envPath === share.envPath) {
          fail(`${sat}.envPath`, `${show(share.envPath)} is also the envPath of shares[${j}]`);
        }
        if (isInside(share.envPath, other.envPath) || isInside(other.envPath, share.envPath)) {
          fail(
            `${sat}.envPath`,
            `${show(share.envPath)} and shares[${j}].envPath ${show(other.envPath)} are nested; share folders must not overlap`,
          );
        }
      });
      shares.push(share);
    });
  }

  const services: ServiceSpec[] = [];
  if (o.services !== undefined) {
    array(o.services, `${prefix}services`).forEach((s, i) => {
      const sat = `${prefix}services[${i}]`;
      const so = object(s, sat, ['service', 'target'], 'a service');
      const service = validateName(required(so, 'service', sat), `${sat}.service`);
      const dup = services.findIndex((x) => x.service === service);
      if (dup >= 0) fail(`${sat}.service`, `duplicate service ${show(service)} (also services[${dup}])`);
      const target = hostPort(required(so, 'target', sat), `${sat}.target`);
      services.push({ service, target });
    });
  }

  const spec: TemplateSpec = { name, pool, startMs, idle, hard, idleMs, hardMs, shares, services };
  if (description !== undefined) spec.description = description;
  return spec;
}

function parseShare(input: unknown, at: string): ShareSpec {
  const o = object(input, at, ['name', 'direction', 'envPath'], 'a share');
  const name = validateName(required(o, 'name', at), `${at}.name`);
  const direction = required(o, 'direction', at);
  if (direction !== 'in' && direction !== 'out') {
    fail(`${at}.direction`, `must be "in" or "out"${typeof direction === 'string' ? ` (got ${show(direction)})` : ''}`);
  }
  const envPath = absolutePath(required(o, 'envPath', at), `${at}.envPath`);
  return { name, direction, envPath };
}

function absolutePath(value: unknown, field: string): string {
  if (typeof value !== 'string') fail(field, 'must be a string');
  if (/[\p{Cc}\\]/u.test(value)) fail(field, `${show(value)} must not contain control characters or "\\"`);
  if (!value.startsWith('/')) fail(field, `${show(value)} must be an absolute path`);
  if (value.split('/').includes('..')) fail(field, `${show(value)} must not contain ".."`);
  let normal = path.posix.normalize(value);
  if (normal.length > 1 && normal.endsWith('/')) normal = normal.slice(0, -1);
  if (normal === '/') fail(field, 'must not be the root folder "/"');
  if (normal.length > 4096) fail(field, 'is longer than 4096 characters');
  return normal;
}

function isInside(child: string, parent: string): boolean {
  return child.startsWith(`${parent}/`);
}

const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$/;

/** Checks `host:port` (host a DNS name, IPv4 or `[IPv6]`; port 1..65535) and returns it. */
export function validateHostPort(value: unknown, field: string): string {
  return hostPort(value, field);
}

function hostPort(value: unknown, field: string): string {
  if (typeof value !== 'string') fail(field, 'must be a string of the form host:port');
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):([0-9]{1,5})$/.exec(value);
  const bad = () => fail(field, `${show(value)} must have the form host:port (e.g. 127.0.0.1:5432, db:5432 or [::1]:5432)`);
  if (!m) bad();
  const [, v6, host, portText] = m!;
  if (v6 !== undefined) {
    if (isIP(v6) !== 6) bad();
  } else if (!(isIP(host!) === 4 || (HOSTNAME.test(host!) && !/^[0-9.]+$/.test(host!)))) {
    bad();
  }
  const port = Number(portText);
  if (port < 1 || port > 65535 || (portText!.length > 1 && portText!.startsWith('0'))) {
    fail(field, `${show(value)} has port ${portText}; ports are 1-65535`);
  }
  return value;
}

// ---- small checkers; each throws a ValidationError whose message starts with the field path

function fail(field: string, problem: string): never {
  throw new ValidationError(field ? `${field}: ${problem}` : problem, field || undefined);
}

function object(value: unknown, at: string, allowed: readonly string[], what: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail(at, `must be an object (${what})`);
  }
  const o = value as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!allowed.includes(key)) {
      fail(at ? `${at}.${key}` : key, `unknown field (expected ${allowed.filter((k) => k !== '$schema').join(', ')})`);
    }
  }
  return o;
}

function required(o: Record<string, unknown>, key: string, at: string): unknown {
  const v = o[key];
  if (v === undefined || v === null) fail(at ? `${at}.${key}` : key, 'is required');
  return v;
}

function array(value: unknown, field: string): unknown[] {
  if (!Array.isArray(value)) fail(field, 'must be an array');
  return value;
}

function integer(value: unknown, field: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
    fail(field, `must be an integer >= ${min}`);
  }
  if (value > max) fail(field, `must be at most ${max}`);
  return value;
}

function durationString(value: unknown, field: string): string {
  if (typeof value !== 'string') fail(field, 'must be a duration string such as "30m" or "6h"');
  return value;
}

function positiveDuration(text: string, field: string): number {
  const ms = parseDuration(text, field);
  if (ms <= 0) fail(field, `${show(text)} must be longer than ${formatCompactDuration(0)}`);
  return ms;
}

function show(text: string): string {
  return JSON.stringify(text.length > 100 ? `${text.slice(0, 100)}…` : text);
}
