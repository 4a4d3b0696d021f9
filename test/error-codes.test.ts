// The one table of error codes (src/kernel/error-codes.ts) and what is made from it.
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { API_DOC, withErrorTable } from '../scripts/error-table';
import { closeCodeOf, codeForStatus, ERROR_CODES, type ErrorCode, isErrorCode, statusOf } from '../src/kernel/error-codes';

describe('error codes', () => {
  it("docs/api.md's table is the one generated from the code table (npm run docs:errors)", async () => {
    const doc = await readFile(API_DOC, 'utf8');
    expect(doc).toBe(withErrorTable(doc));
  });

  it('names at most one generic code per status', () => {
    const generic = Object.entries(ERROR_CODES).filter(([, info]) => 'generic' in info);
    const statuses = generic.map(([, info]) => info.status);
    expect(new Set(statuses).size).toBe(statuses.length);
    for (const [code, info] of generic) expect(codeForStatus(info.status)).toBe(code);
    // 400 has none: GraphQL's bad request is `invalid`, the HTTP layer's `bad_request`.
    expect(codeForStatus(400)).toBeUndefined();
  });

  it('gives every code an error status, and WebSocket close codes of 4000 + status', () => {
    for (const code of Object.keys(ERROR_CODES) as ErrorCode[]) {
      expect(statusOf(code)).toBeGreaterThanOrEqual(400);
      expect(statusOf(code)).toBeLessThan(600);
    }
    expect([closeCodeOf('unauthorized'), closeCodeOf('rate_limited'), closeCodeOf('bad_request')]).toEqual([4401, 4429, 4400]);
  });

  it('knows only its own codes', () => {
    expect(isErrorCode('not_found')).toBe(true);
    expect(isErrorCode('GRAPHQL_PARSE_FAILED')).toBe(false);
    expect(isErrorCode('toString')).toBe(false);
    expect(isErrorCode(404)).toBe(false);
  });
});
