// Typed domain errors. Services throw them; each edge maps them to its own shape:
// GraphQL puts `code` in extensions, REST turns it into the HTTP status and `{error, code}`.

export class DomainError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export class ValidationError extends DomainError {
  constructor(
    message: string,
    readonly field?: string,
  ) {
    super(message, 'invalid', 422);
  }
}

export class BadRequestError extends DomainError {
  constructor(message: string, code = 'bad_request') {
    super(message, code, 400);
  }
}

export class UnauthorizedError extends DomainError {
  constructor(message = 'missing or invalid credentials') {
    super(message, 'unauthorized', 401);
  }
}

export class ForbiddenError extends DomainError {
  constructor(message = 'this operation needs an admin') {
    super(message, 'forbidden', 403);
  }
}

export class NotFoundError extends DomainError {
  constructor(what: string, code = 'not_found') {
    super(`${what} not found`, code, 404);
  }
}

export class ConflictError extends DomainError {
  constructor(message: string, code = 'conflict') {
    super(message, code, 409);
  }
}

export class GoneError extends DomainError {
  constructor(message: string, code = 'gone') {
    super(message, code, 410);
  }
}

export class PayloadTooLargeError extends DomainError {
  constructor(message: string) {
    super(message, 'too_large', 413);
  }
}

export class RateLimitedError extends DomainError {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
    code = 'rate_limited',
  ) {
    super(message, code, 429);
  }
}

/** Over the organization's quota (429, no Retry-After: it frees up when leases end). */
export class QuotaExceededError extends DomainError {
  constructor(message: string) {
    super(message, 'quota', 429);
  }
}

export class UnavailableError extends DomainError {
  constructor(message: string, code = 'unavailable') {
    super(message, code, 503);
  }
}

/** HTTP status for a machine-readable code; the one table REST uses to map GraphQL errors. */
export const STATUS_BY_CODE: Record<string, number> = {
  bad_request: 400,
  invalid_json: 400,
  unsupported_media_type: 415,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  no_template: 404,
  method_not_allowed: 405,
  conflict: 409,
  invalid_transition: 409,
  key_used: 409,
  name_taken: 409,
  no_free_port: 409,
  gone: 410,
  link_expired: 410,
  key_expired: 410,
  sandbox_removed: 410,
  link_revoked: 410,
  key_shredded: 410,
  invalid_link: 403,
  integrity: 500,
  too_large: 413,
  range_not_satisfiable: 416,
  invalid: 422,
  quota: 429,
  rate_limited: 429,
  unavailable: 503,
  queue_full: 503,
  internal: 500,
};
