import { resolve } from 'node:path';
import { DAY_MS, parseDuration } from '../kernel/durations';
import { parseSize } from '../kernel/sizes';
import { packagePath } from '../platform/paths';
import { parseCapacity } from '../protocol/capacity';

/** Everything Berth reads from its environment, parsed once. See README.md, "Configuration". */
export interface Config {
  host: string;
  port: number;
  dataDir: string;
  databaseUrl?: string;
  /** PostgreSQL schema to use (tests give each run its own). */
  databaseSchema?: string;
  azureConnectionString?: string;
  azureContainer: string;
  masterKey?: string;
  linkSecret?: string;
  bootstrapToken?: string;
  templatesFile: string;
  authFailureLimit: number;
  /** How many proxies in front of Berth append to X-Forwarded-For (0: use the TCP peer). */
  trustProxy: number;
  /** Origins other than Berth's own that browsers may call it from (CORS). */
  corsOrigins: string[];
  /** Public base URL used in signed links; defaults to http://HOST:PORT. */
  publicUrl?: string;
  /**
   * PREVIEW_DOMAIN: the domain whose hosts `<port>-<environment name>.<domain>` are preview URLs
   * (docs/environments.md, "Preview URLs"); lower case, no leading dot. Unset: previews are off.
   */
  previewDomain?: string;
  /** This instance's own address once it listens (http://HOST:PORT): where its built-in node connects. */
  localUrl?: string;
  /** Artifact tuning knobs (docs/artifacts.md); the spec's limit is 2 GiB, tests lower it. */
  artifactMaxBytes: number;
  /** Sealed bytes (artifacts and snapshots) an organization may keep (ORG_STORAGE_LIMIT, default 100 GiB). */
  orgStorageLimit: number;
  /** The fraction of a shared pool's hot nodes and queue one organization may hold (POOL_ORG_SHARE, default 1). */
  poolOrgShare: number;
  artifactChunkSize: number;
  artifactSegmentSize: number;
  /** A remote node not heard from for this long is lost (NODE_LOST_MS, default 30 s; docs/agents.md). */
  nodeLostMs: number;
  /** How often node agents send heartbeats (NODE_HEARTBEAT_MS, default 5 s; at most a third of nodeLostMs). */
  nodeHeartbeatMs: number;
  /** How often every node samples each environment's usage (USAGE_SAMPLE_MS, default 5 s; `berth node` hears it in its welcome). */
  usageSampleMs: number;
  /** The built-in node's container engine (DOCKER_HOST: unix:///… or tcp://…; `none`: files only). */
  dockerHost?: string;
  /** What the built-in node offers (BUILTIN_CAPACITY, `cpus=N,memory=SIZE`, its `berth node --capacity`); default: the machine's less a reserve. */
  builtinCapacity?: string;
  /** A request body that stops arriving for this long is answered 408 (BODY_IDLE_MS, default 30 s; uploads allow longer). */
  bodyIdleMs: number;
  /** How long audit events are kept (AUDIT_RETENTION, default 365d; docs/operations.md#audit-log). */
  auditRetentionMs: number;
  /** Webhook URLs may resolve to loopback, private or link-local addresses (WEBHOOK_ALLOW_PRIVATE=1; tests, private networks). */
  webhookAllowPrivate: boolean;
  /** How long one webhook delivery attempt may take (WEBHOOK_TIMEOUT_MS, default 10 s, 100 ms-60 s). */
  webhookTimeoutMs: number;
  /** The bearer token GET /metrics asks for; unset, /metrics is off (404). */
  metricsToken?: string;
  /** LOG_FORMAT: JSON lines, or readable lines (the default on a terminal). */
  logFormat: LogFormat;
  /** LOG_LEVEL (default info). */
  logLevel: LogLevel;
  /** How long a session whose connections all dropped runs on (SESSION_GRACE, default 5m; 0: killed at once; docs/agents.md#sessions). */
  sessionGraceMs: number;
}

export type LogFormat = 'json' | 'pretty';
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** A storage limit: a size such as `100GiB` or a number of bytes. */
export function storageLimitFrom(text: string, name: string): number {
  const bytes = /^\d+$/.test(text) ? Number(text) : parseSize(text, name);
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new Error(`${name} must be a size such as 100GiB, got "${text}"`);
  return bytes;
}

/** A pool share: a fraction above 0 and at most 1. */
export function poolShareFrom(text: string, name: string): number {
  const share = Number(text);
  if (!(share > 0 && share <= 1)) throw new Error(`${name} must be a fraction above 0 and at most 1 (such as 0.25), got "${text}"`);
  return share;
}

function intFrom(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got "${raw}"`);
  return n;
}

function positive(n: number, name: string): number {
  if (n < 1) throw new Error(`${name} must be at least 1`);
  return n;
}

/** CORS_ORIGINS: comma-separated origins such as https://console.example.com (scheme, host and port only). */
function origins(value: string | undefined): string[] {
  if (value === undefined) return [];
  return value
    .split(',')
    .map((o) => o.trim())
    .filter(Boolean)
    .map((o) => {
      let origin: string | undefined;
      try {
        origin = new URL(o).origin;
      } catch {
        origin = undefined;
      }
      if (!origin || origin === 'null' || origin !== o.replace(/\/$/, '')) {
        throw new Error(`CORS_ORIGINS: "${o}" is not an origin such as https://console.example.com (scheme, host and port only)`);
      }
      return origin;
    });
}

/** PUBLIC_URL: where clients reach Berth, an http(s) URL (signed links and /install.sh are made from it). */
function publicUrl(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const url = URL.canParse(value) ? new URL(value) : undefined;
  if (url?.protocol !== 'http:' && url?.protocol !== 'https:') {
    throw new Error(`PUBLIC_URL must be an http:// or https:// URL such as https://berth.example.com, got "${value}"`);
  }
  return value;
}

/** HMAC key of signed links: shorter than 32 bytes would be weaker than the HS256 it feeds. */
function builtinCapacity(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  try {
    parseCapacity(value);
  } catch (error) {
    throw new Error(`BUILTIN_CAPACITY: ${(error as Error).message}, got "${value}"`);
  }
  return value;
}

function linkSecret(value: string | undefined): string | undefined {
  if (value !== undefined && Buffer.byteLength(value) < 32) throw new Error('LINK_SECRET must be at least 32 bytes');
  return value;
}

/** A duration setting such as `365d`, by the API's duration rule. */
function durationFrom(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const ms = parseDuration(raw, name);
  if (ms <= 0) throw new Error(`${name} must be a positive duration such as 365d, got "${raw}"`);
  return ms;
}

/** SESSION_GRACE: a duration up to 24h, or 0. */
function sessionGrace(raw: string | undefined): number {
  if (raw === undefined) return 5 * 60_000;
  if (/^0+(?:ms|s|m|h|d)?$/.test(raw)) return 0;
  const ms = parseDuration(raw, 'SESSION_GRACE');
  if (ms > DAY_MS) throw new Error(`SESSION_GRACE must be at most 24h, got "${raw}"`);
  return ms;
}

/** BOOTSTRAP_TOKEN is an admin credential: as long as the tokens Berth makes itself, at least. */
function bootstrapToken(value: string | undefined): string | undefined {
  if (value !== undefined && value.length < 32) throw new Error('BOOTSTRAP_TOKEN must be at least 32 characters');
  return value;
}

/** METRICS_TOKEN guards what the metrics tell about the fleet: as long as a token Berth makes, at least. */
function metricsToken(value: string | undefined): string | undefined {
  if (value !== undefined && value.length < 32) throw new Error('METRICS_TOKEN must be at least 32 characters');
  return value;
}

/** PREVIEW_DOMAIN: a DNS name (`preview.localhost`, `preview.example.com`), lower-cased. */
function previewDomain(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const domain = value
    .toLowerCase()
    .replace(/^\*?\./, '')
    .replace(/\.$/, '');
  const label = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
  if (domain.length > 200 || !domain.split('.').every((l) => label.test(l))) {
    throw new Error(`PREVIEW_DOMAIN must be a DNS name such as preview.localhost or preview.example.com, got "${value}"`);
  }
  return domain;
}

function logFormat(value: string | undefined): LogFormat {
  if (value === undefined) return process.stdout.isTTY ? 'pretty' : 'json';
  if (value !== 'json' && value !== 'pretty') throw new Error(`LOG_FORMAT must be json or pretty, got "${value}"`);
  return value;
}

function logLevel(value: string | undefined): LogLevel {
  if (value === undefined) return 'info';
  const level = LOG_LEVELS.find((l) => l === value.toLowerCase());
  if (!level) throw new Error(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${value}"`);
  return level;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const opt = (name: string) => (env[name] === undefined || env[name] === '' ? undefined : env[name]);
  const webhookTimeoutMs = intFrom(env, 'WEBHOOK_TIMEOUT_MS', 10_000);
  if (webhookTimeoutMs < 100 || webhookTimeoutMs > 60_000) {
    throw new Error(`WEBHOOK_TIMEOUT_MS must be between 100 and 60000, got "${webhookTimeoutMs}"`);
  }
  const nodeLostMs = intFrom(env, 'NODE_LOST_MS', 30_000);
  if (nodeLostMs < 300 || nodeLostMs > 60_000) throw new Error(`NODE_LOST_MS must be between 300 and 60000, got "${nodeLostMs}"`);
  return {
    host: opt('HOST') ?? '127.0.0.1',
    port: intFrom(env, 'PORT', 8080),
    dataDir: resolve(opt('DATA_DIR') ?? './data'),
    databaseUrl: opt('DATABASE_URL'),
    databaseSchema: opt('DATABASE_SCHEMA'),
    azureConnectionString: opt('AZURE_STORAGE_CONNECTION_STRING'),
    azureContainer: opt('AZURE_STORAGE_CONTAINER') ?? 'berth',
    masterKey: opt('MASTER_KEY'),
    dockerHost: opt('DOCKER_HOST'),
    builtinCapacity: builtinCapacity(opt('BUILTIN_CAPACITY')),
    linkSecret: linkSecret(opt('LINK_SECRET')),
    bootstrapToken: bootstrapToken(opt('BOOTSTRAP_TOKEN')),
    templatesFile: resolve(opt('TEMPLATES_FILE') ?? packagePath('templates.json')),
    authFailureLimit: intFrom(env, 'AUTH_FAILURE_LIMIT', 10),
    trustProxy: intFrom(env, 'TRUST_PROXY', 0),
    corsOrigins: origins(opt('CORS_ORIGINS')),
    publicUrl: publicUrl(opt('PUBLIC_URL')),
    previewDomain: previewDomain(opt('PREVIEW_DOMAIN')),
    artifactMaxBytes: intFrom(env, 'ARTIFACT_MAX_BYTES', 2 * 1024 ** 3),
    orgStorageLimit: env.ORG_STORAGE_LIMIT ? storageLimitFrom(env.ORG_STORAGE_LIMIT, 'ORG_STORAGE_LIMIT') : 100 * 1024 ** 3,
    poolOrgShare: env.POOL_ORG_SHARE ? poolShareFrom(env.POOL_ORG_SHARE, 'POOL_ORG_SHARE') : 1,
    artifactChunkSize: positive(intFrom(env, 'ARTIFACT_CHUNK_SIZE', 4 * 1024 ** 2), 'ARTIFACT_CHUNK_SIZE'),
    artifactSegmentSize: positive(intFrom(env, 'ARTIFACT_SEGMENT_SIZE', 64 * 1024 ** 2), 'ARTIFACT_SEGMENT_SIZE'),
    nodeLostMs,
    nodeHeartbeatMs: Math.min(positive(intFrom(env, 'NODE_HEARTBEAT_MS', 5_000), 'NODE_HEARTBEAT_MS'), Math.floor(nodeLostMs / 3)),
    usageSampleMs: positive(intFrom(env, 'USAGE_SAMPLE_MS', 5_000), 'USAGE_SAMPLE_MS'),
    bodyIdleMs: positive(intFrom(env, 'BODY_IDLE_MS', 30_000), 'BODY_IDLE_MS'),
    metricsToken: metricsToken(opt('METRICS_TOKEN')),
    logFormat: logFormat(opt('LOG_FORMAT')),
    logLevel: logLevel(opt('LOG_LEVEL')),
    auditRetentionMs: durationFrom(env, 'AUDIT_RETENTION', 365 * DAY_MS),
    webhookAllowPrivate: opt('WEBHOOK_ALLOW_PRIVATE') === '1',
    webhookTimeoutMs,
    sessionGraceMs: sessionGrace(opt('SESSION_GRACE')),
  };
}
