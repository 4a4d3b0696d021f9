import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

// The OpenAPI request schemas and the server's body checks come from one interpreter of the
// GraphQL input types (src/edges/rest/body.ts); here the boundary values of every documented JSON body
// go to both, and both must give the same verdict.

type Schema = {
  type?: string | string[];
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  format?: string;
};

const typeOf = (s: Schema) => (Array.isArray(s.type) ? s.type.find((t) => t !== 'null') : s.type);

/** A body the schema accepts: every required field with a plain value. */
function sample(s: Schema): unknown {
  if (s.enum) return s.enum[0];
  switch (typeOf(s)) {
    case 'object':
      return Object.fromEntries((s.required ?? []).map((name) => [name, sample(s.properties![name]!)]));
    case 'array':
      return [];
    case 'integer':
    case 'number':
      return Math.max(s.minimum ?? 0, 0);
    case 'boolean':
      return false;
    case 'string':
      return s.format === 'date-time' ? '2026-11-22T02:14:16.522Z' : 'x';
    default:
      return {};
  }
}

interface Variant {
  field: string;
  body: Record<string, unknown>;
}

/** Each field's edge: the ends of its range and one past them, wrong types, unknown and missing fields. */
function variants(s: Schema, base: Record<string, unknown>, prefix = ''): Variant[] {
  const out: Variant[] = [{ field: `${prefix}unknownField`, body: { ...base, unknownField: 1 } }];
  for (const [name, prop] of Object.entries(s.properties ?? {})) {
    const field = `${prefix}${name}`;
    const withValue = (value: unknown) => ({ field, body: { ...base, [name]: value } });
    if (s.required?.includes(name)) {
      const { [name]: _, ...rest } = base;
      out.push({ field, body: rest });
    }
    if (prop.enum) out.push(...prop.enum.map(withValue), withValue('not-a-value'));
    switch (typeOf(prop)) {
      case 'integer':
        for (const edge of [prop.minimum, prop.maximum]) if (edge !== undefined) out.push(withValue(edge));
        if (prop.minimum !== undefined) out.push(withValue(prop.minimum - 1));
        if (prop.maximum !== undefined) out.push(withValue(prop.maximum + 1));
        else out.push(withValue(2 ** 53)); // no documented bound: the server must take any integer

        out.push(withValue(1.5), withValue('1'));
        break;
      case 'string':
        out.push(withValue(42));
        break;
      case 'boolean':
        out.push(withValue('true'));
        break;
      case 'array':
        out.push(withValue('x'), withValue([sample(prop.items ?? {})]));
        break;
      case 'object':
        if (prop.properties) {
          const inner = sample(prop) as Record<string, unknown>;
          for (const v of variants(prop, inner, `${field}.`)) out.push({ field: v.field, body: { ...base, [name]: v.body } });
        } else out.push(withValue([]));
        break;
    }
  }
  return out;
}

describeBackends('GraphQL input types: OpenAPI and the server agree', (backend) => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    s = await startServer(backend);
  });
  afterAll(() => s?.stop());

  it('documents the Int range the server keeps: exitCode 2^31-1 is taken, 2^31 refused by both', async () => {
    const doc = (await admin.get('/v1/openapi.json')).body;
    const schema = doc.paths['/v1/environments/{id}/execs'].post.requestBody.content['application/json'].schema;
    expect(schema.properties.exitCode).toMatchObject({ type: 'integer', minimum: -(2 ** 31), maximum: 2 ** 31 - 1 });
    const ajv = new Ajv2020({ strict: false });
    const validate = ajv.compile(schema);
    const body = (exitCode: number) => ({ command: 'make', exitCode, durationMs: 1 });
    expect(validate(body(2 ** 31 - 1))).toBe(true);
    expect(validate(body(2 ** 31))).toBe(false);
    // Past the body check a missing environment is a 404; refused, the 422 names the field.
    expect((await admin.post('/v1/environments/env_missing/execs', body(2 ** 31 - 1))).status).toBe(404);
    const refused = await admin.post('/v1/environments/env_missing/execs', body(2 ** 31));
    expect(refused.status).toBe(422);
    expect(refused.body).toMatchObject({ code: 'invalid', error: expect.stringMatching(/^exitCode: /) });
  });

  it("gives every route's documented JSON body the server's verdict at each field's edges", async () => {
    const doc = (await admin.get('/v1/openapi.json')).body;
    const ajv = new Ajv2020({ strict: false });
    addFormats(ajv);
    const covered: string[] = [];
    for (const [template, ops] of Object.entries<Record<string, any>>(doc.paths)) {
      // On a named resource that is missing every accepted body is a 404 with no side effect; on
      // the others only refused bodies are sent (they are refused before anything runs).
      const named = template.includes('{');
      const path = template.replace(/\{\w+\}/g, 'zz_missing');
      for (const [method, op] of Object.entries(ops)) {
        const schema = op.requestBody?.content?.['application/json']?.schema as Schema | undefined;
        if (!schema?.properties) continue;
        covered.push(`${method.toUpperCase()} ${template}`);
        const validate = ajv.compile(schema);
        const base = sample(schema) as Record<string, unknown>;
        for (const { field, body } of variants(schema, base)) {
          const documented = validate(body);
          if (documented && !named) continue;
          const reply = await admin.call(method.toUpperCase(), path, body);
          const refused = reply.status === 422 && String(reply.body?.error).startsWith(`${field}: `);
          expect(
            refused,
            `${method.toUpperCase()} ${template} ${JSON.stringify(body)}: ${reply.status} ${JSON.stringify(reply.body)}`,
          ).toBe(!documented);
        }
      }
    }
    expect(covered).toEqual(
      expect.arrayContaining([
        'POST /v1/environments/{id}/execs',
        'POST /v1/environments/{id}/restored',
        'POST /v1/environments/{id}/exec',
        'POST /v1/sandboxes/join',
        'POST /v1/environments',
      ]),
    );
  });
});
