import type { ErrorCode } from './error-codes';

// Typed domain errors. Services throw them with a code of src/kernel/error-codes.ts and no
// transport detail; each edge shapes them its own way from that table: GraphQL puts `code` in
// extensions, REST answers the code's HTTP status and `{error, code}`.

export class DomainError extends Error {
  constructor(
    message: string,
    readonly code: ErrorCode,
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
  constructor(message: string, code: ErrorCode = 'bad_request') {
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
  constructor(what: string, code: ErrorCode = 'not_found') {
    super(`${what} not found`, code);
  }
}

export class ConflictError extends DomainError {
  constructor(message: string, code: ErrorCode = 'conflict') {
    super(message, code);
  }
}

export class GoneError extends DomainError {
  constructor(message: string, code: ErrorCode = 'gone') {
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
    code: ErrorCode = 'rate_limited',
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
  constructor(message: string, code: ErrorCode = 'unavailable') {
    super(message, code);
  }
}
