// The one table from error codes to HTTP statuses. Only the REST edge applies it: services throw
// codes (src/services/errors.ts), GraphQL carries them in `extensions.code`.

export const STATUS_BY_CODE: Record<string, number> = {
  bad_request: 400,
  bad_content_type: 400,
  invalid_json: 400,
  unauthorized: 401,
  forbidden: 403,
  invalid_link: 403,
  not_found: 404,
  no_template: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  conflict: 409,
  invalid_transition: 409,
  key_used: 409,
  name_taken: 409,
  no_snapshot: 409,
  shredded: 409,
  no_free_port: 409,
  no_runtime: 409,
  too_many_webhooks: 409,
  gone: 410,
  link_expired: 410,
  key_expired: 410,
  sandbox_removed: 410,
  link_revoked: 410,
  key_shredded: 410,
  too_large: 413,
  storage_quota: 413,
  unsupported_media_type: 415,
  range_not_satisfiable: 416,
  invalid: 422,
  quota: 429,
  pool_share: 429,
  rate_limited: 429,
  too_many_subscriptions: 429,
  too_many_uploads: 429,
  too_many_sessions: 429,
  integrity: 500,
  internal: 500,
  unavailable: 503,
  queue_full: 503,
};

/** The status of a code; a code this table does not know is a bug, answered as one. */
export function statusOf(code: string): number {
  return STATUS_BY_CODE[code] ?? 500;
}
