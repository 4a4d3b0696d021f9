// Every error code Berth answers, and what each means on every transport: REST's HTTP status, the
// GraphQL `extensions.code` (the code itself), a WebSocket's close code. The one table: errors take
// an `ErrorCode`, so a code not listed here does not compile, and docs/api.md's table is generated
// from it (`npm run docs:errors`).

interface ErrorCodeInfo {
  /** The HTTP status of an answer with this code. */
  status: number;
  /**
   * The code of its status when only the status is known (one yoga or its plugins chose). None for
   * 400: GraphQL calls a bad request `invalid`, the HTTP layer `bad_request`.
   */
  generic?: true;
  /**
   * About the caller, not the request's text: a GraphQL request error keeps this status, where any
   * other request error is 400 (GraphQL over HTTP).
   */
  caller?: true;
  /** What docs/api.md says beside the code (Markdown). */
  note?: string;
  /** A WebSocket close code other than 4000 + status (one the WebSocket protocol itself defines). */
  close?: number;
}

export const ERROR_CODES = {
  bad_request: { status: 400 },
  invalid_json: { status: 400 },
  bad_content_type: { status: 400 },
  unauthorized: { status: 401, generic: true, caller: true },
  forbidden: { status: 403, generic: true, caller: true },
  invalid_link: { status: 403 },
  not_found: { status: 404, generic: true },
  no_template: { status: 404 },
  method_not_allowed: { status: 405, generic: true },
  not_acceptable: { status: 406, generic: true },
  request_timeout: { status: 408, generic: true },
  conflict: { status: 409, generic: true },
  invalid_transition: { status: 409 },
  key_used: { status: 409 },
  name_taken: { status: 409 },
  no_snapshot: { status: 409 },
  shredded: { status: 409 },
  no_free_port: { status: 409 },
  no_runtime: { status: 409 },
  too_many_webhooks: { status: 409 },
  gone: { status: 410, generic: true },
  link_expired: { status: 410 },
  link_revoked: { status: 410 },
  key_expired: { status: 410 },
  key_shredded: { status: 410 },
  sandbox_removed: { status: 410 },
  too_large: { status: 413, generic: true },
  storage_quota: { status: 413, note: "the organization's storage limit, [limits](operations.md#limits)" },
  unsupported_media_type: { status: 415, generic: true },
  range_not_satisfiable: { status: 416, generic: true },
  invalid: { status: 422, generic: true },
  quota: { status: 429 },
  pool_share: { status: 429, note: "the organization's share of a shared pool, [limits](operations.md#limits)" },
  rate_limited: { status: 429, generic: true, caller: true, note: 'with `Retry-After`' },
  too_many_subscriptions: { status: 429, note: 'graphql-ws: at most 100 a connection' },
  too_many_uploads: { status: 429, note: 'at most 8 uploads in flight per member or API key' },
  too_slow: {
    status: 429,
    close: 1008,
    note: 'a subscriber more than 1 MiB of messages behind: graphql-ws closes with 1008, SSE ends with this error',
  },
  too_many_sessions: {
    status: 429,
    note: 'at most 16 interactive sessions open per member or API key on one instance, [sessions](agents.md#sessions)',
  },
  headers_too_large: { status: 431, generic: true },
  internal: { status: 500, generic: true },
  integrity: { status: 500 },
  bad_gateway: { status: 502, generic: true, note: 'a preview whose port answers nothing, [preview URLs](environments.md#preview-urls)' },
  unavailable: { status: 503, generic: true },
  queue_full: { status: 503 },
  engine_unavailable: { status: 503, note: "the environment's node's container engine does not answer, [health](agents.md#health)" },
  not_ready: { status: 503 },
} as const satisfies Record<string, ErrorCodeInfo>;

export type ErrorCode = keyof typeof ERROR_CODES;

const TABLE: Record<ErrorCode, ErrorCodeInfo> = ERROR_CODES;

export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(TABLE, code);
}

/** The HTTP status of a code. */
export function statusOf(code: ErrorCode): number {
  return TABLE[code].status;
}

/** Whether a GraphQL request error with this code keeps the code's status (else it is 400). */
export function isCallerError(code: ErrorCode): boolean {
  return TABLE[code].caller === true;
}

/**
 * A WebSocket's close code for an error after the upgrade: 4000 + the code's HTTP status
 * (4000-4999 are the application's), so 4401 for `unauthorized`, 4429 for `rate_limited`;
 * `too_slow` is the protocol's own 1008 (policy violation).
 */
export function closeCodeOf(code: ErrorCode): number {
  return TABLE[code].close ?? 4000 + statusOf(code);
}

const GENERIC = new Map<number, ErrorCode>();
for (const code of Object.keys(TABLE) as ErrorCode[]) {
  if (TABLE[code].generic) GENERIC.set(TABLE[code].status, code);
}

/** The generic code of an HTTP status something else chose (yoga, its plugins), if it has one. */
export function codeForStatus(status: number): ErrorCode | undefined {
  return GENERIC.get(status);
}

/** The Markdown table of docs/api.md: one row per status, its codes in table order. */
export function errorTableMarkdown(): string {
  const byStatus = new Map<number, string[]>();
  for (const code of Object.keys(TABLE) as ErrorCode[]) {
    const { status, note } = TABLE[code];
    const cell = note ? `\`${code}\` (${note})` : `\`${code}\``;
    byStatus.set(status, [...(byStatus.get(status) ?? []), cell]);
  }
  const rows = [...byStatus].sort(([a], [b]) => a - b).map(([status, codes]) => `| ${status} | ${codes.join(', ')} |`);
  return ['| status | codes |', '| ------ | ----- |', ...rows].join('\n');
}
