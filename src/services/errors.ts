// Typed domain errors. Services throw them with a machine-readable code and no transport detail;
// each edge maps them to its own shape: GraphQL puts `code` in extensions, REST turns the code into
// the HTTP status (src/rest/status.ts) and `{error, code}`.

export class DomainError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

export class ValidationError extends DomainError {
  constructor(
    message: string,
    readonly field?: string,
  ) {
    super(message, 'invalid');
  }
}

export class BadRequestError extends DomainError {
  constructor(message: string, code = 'bad_request') {
    super(message, code);
  }
}

export class UnauthorizedError extends DomainError {
  constructor(message = 'missing or invalid credentials') {
    super(message, 'unauthorized');
  }
}

export class ForbiddenError extends DomainError {
  constructor(message = 'this operation needs an admin') {
    super(message, 'forbidden');
  }
}

export class NotFoundError extends DomainError {
  constructor(what: string, code = 'not_found') {
    super(`${what} not found`, code);
  }
}

export class ConflictError extends DomainError {
  constructor(message: string, code = 'conflict') {
    super(message, code);
  }
}

export class GoneError extends DomainError {
  constructor(message: string, code = 'gone') {
    super(message, code);
  }
}

export class PayloadTooLargeError extends DomainError {
  constructor(message: string) {
    super(message, 'too_large');
  }
}

export class RateLimitedError extends DomainError {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
    code = 'rate_limited',
  ) {
    super(message, code);
  }
}

/** Over the organization's quota (429, no Retry-After: it frees up when leases end). */
export class QuotaExceededError extends DomainError {
  constructor(message: string) {
    super(message, 'quota');
  }
}

export class UnavailableError extends DomainError {
  constructor(message: string, code = 'unavailable') {
    super(message, code);
  }
}
