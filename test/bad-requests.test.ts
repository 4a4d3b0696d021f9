import { afterAll, beforeAll, expect, it } from 'vitest';
import { createOrganization } from '../src/services/organizations';
import { rawRequest } from './helpers/raw-http';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

// The bad-request corpus: every route of the OpenAPI document, with bad paths, queries, bodies
// and encodings. Not one answer may be a 5xx or an error without an `{error, code}` body, and
// good requests fired beside the corpus must all succeed.

interface Schema {
  type?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
  enum?: string[];
}
interface Operation {
  parameters?: { name: string; in: 'path' | 'query'; schema: Schema }[];
  requestBody?: { content: Record<string, { schema: Schema }> };
  security?: unknown[];
}
interface BadRequest {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** What the case is, for the failure list. */
  label: string;
}

const NUL = '\u0000';
const deep = (n: number, open: string, close: string, inner = '1') => `${open.repeat(n)}${inner}${close.repeat(n)}`;

/** Path segments: NUL, invalid UTF-8 (a lone surrogate's encoding, a broken sequence), bad percent-encoding, controls, bidi, huge. */
const BAD_SEGMENTS = ['a%00b', '%ED%A0%80', '%C3%28', '%FF', '%zz', 'a%', '%1B%5B31m', '%E2%80%AEx', 'x'.repeat(10_000), '%2F..%2F'];

/** JSON texts of bad values for one field (lone surrogates are written as JSON escapes on purpose). */
function badValues(schema: Schema): string[] {
  const values = [
    JSON.stringify(`a${NUL}b`),
    '"\\ud800x"',
    '"x\\udc00"',
    JSON.stringify('\u001b[31mred\u001b[0m'),
    JSON.stringify('evil\u202egnp.exe'),
    JSON.stringify('x'.repeat(200_000)),
    '1e308',
    '-1',
    '1.5',
    'true',
    'null',
    '{}',
    '[]',
    JSON.stringify(Array.from({ length: 10_000 }, (_, i) => `k${i}`)),
    deep(2_000, '[', ']'),
    deep(2_000, '{"a":', '}'),
    JSON.stringify(Object.fromEntries(Array.from({ length: 5_000 }, (_, i) => [`k${i}`, 'v']))),
  ];
  if (schema.type === 'array') values.push(`[${JSON.stringify(NUL)}]`, '["ok", 5]', '[[["x"]]]');
  if (schema.type === 'object') values.push(`{"k":${JSON.stringify(NUL)}}`, `{${JSON.stringify(NUL)}:"v"}`, '{"k":{"n":1}}');
  return values;
}

/** A value of the right type that names nothing that exists, so bad cases stay side-effect free. */
function placeholder(schema: Schema): string {
  switch (schema.type) {
    case 'integer':
    case 'number':
      return '1';
    case 'boolean':
      return 'false';
    case 'array':
      return '[]';
    case 'object':
      return '{}';
    default:
      return schema.enum ? JSON.stringify(schema.enum[0]) : '"corpus-none"';
  }
}

function bodyOf(schema: Schema, field?: string, value?: string): string {
  const fields = new Map<string, string>();
  for (const name of schema.required ?? []) fields.set(name, placeholder(schema.properties?.[name] ?? {}));
  if (field) fields.set(field, value!);
  return `{${[...fields].map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`;
}

function corpus(doc: { paths: Record<string, Record<string, Operation>> }): BadRequest[] {
  const cases: BadRequest[] = [];
  for (const [template, methods] of Object.entries(doc.paths)) {
    for (const [lower, op] of Object.entries(methods)) {
      const method = lower.toUpperCase();
      const pathParams = (op.parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name);
      const query = (op.parameters ?? []).filter((p) => p.in === 'query');
      const fill = (bad?: { name: string; value: string }) =>
        template.replace(/\{(\w+)\}/g, (_, name: string) => (bad?.name === name ? bad.value : 'corpus-none'));
      const path = fill();
      const json = op.requestBody?.content['application/json']?.schema;
      const base = json ? bodyOf(json) : undefined;
      const send = (label: string, p: string, body: string | Buffer | undefined = base, headers?: Record<string, string>) =>
        cases.push({
          method,
          path: p,
          body,
          headers: { ...(body !== undefined && !headers ? { 'content-type': 'application/json' } : {}), ...headers },
          label: `${method} ${template} ${label}`,
        });

      for (const name of pathParams) for (const value of BAD_SEGMENTS) send(`path ${name}=${value.slice(0, 20)}`, fill({ name, value }));
      for (const param of query) {
        const values = ['a%00b', '%ED%A0%80', '%FF', '%1B', 'x'.repeat(8_000)];
        if (param.schema.type === 'integer') values.push('-1', '0', '5000', 'abc', '1e3', '99999999999999999999');
        if (param.schema.type === 'boolean') values.push('maybe', '2');
        if (param.name === 'cursor') values.push('bad', 'e30', 'WyJ4IiwieSJd');
        for (const value of values) send(`query ${param.name}=${value.slice(0, 20)}`, `${path}?${param.name}=${value}`);
        send(`query ${param.name} twice`, `${path}?${param.name}=a&${param.name}=b`);
      }
      send('unknown query parameter', `${path}?corpus=1`);

      if (json) {
        for (const [name, schema] of Object.entries(json.properties ?? {})) {
          for (const value of badValues(schema)) send(`body ${name}=${value.slice(0, 20)}`, path, bodyOf(json, name, value));
        }
        send('unknown body field', path, bodyOf(json, 'corpusUnknown', '1'));
        for (const body of ['not json', '[]', 'null', '"text"', '{"a":1', deep(100_000, '[', ']'), deep(50_000, '{"a":', '}')]) {
          send(`body ${body.slice(0, 12)}`, path, body);
        }
        send('body of invalid UTF-8', path, Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d]));
        send('body of 2 MiB', path, JSON.stringify({ x: 'x'.repeat(2 * 1024 * 1024) }));
        send('form body', path, 'a=b', { 'content-type': 'application/x-www-form-urlencoded' });
        send('UTF-16 body', path, '{}', { 'content-type': 'application/json; charset=utf-16' });
      } else if (op.requestBody) {
        // The artifact upload: raw bytes.
        send('form upload', path, 'a=b', { 'content-type': 'application/x-www-form-urlencoded' });
        send('multipart upload', path, '--x--', { 'content-type': 'multipart/form-data; boundary=x' });
      }
    }
  }
  return cases;
}

/** Requests whose Content-Length lies, shorter and longer than the body. */
function lyingLengths(
  doc: { paths: Record<string, Record<string, Operation>> },
  host: string,
): { label: string; raw: string; end: boolean }[] {
  const out: { label: string; raw: string; end: boolean }[] = [];
  for (const [template, methods] of Object.entries(doc.paths)) {
    for (const [lower, op] of Object.entries(methods)) {
      if (!op.requestBody) continue;
      const path = template.replace(/\{\w+\}/g, 'corpus-none');
      const head = `${lower.toUpperCase()} ${path} HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${BOOTSTRAP}\r\nContent-Type: application/json\r\n`;
      out.push({ label: `${lower} ${template} shorter`, raw: `${head}Content-Length: 3\r\n\r\n{"name":"x"}`, end: false });
      out.push({ label: `${lower} ${template} longer`, raw: `${head}Content-Length: 900\r\n\r\n{"name":"x"}`, end: true });
    }
  }
  return out;
}

describeBackends('bad-request corpus', (backend) => {
  let s: TestServer;
  let other: string;

  beforeAll(async () => {
    // Bad join keys count toward the 429 lock of this one address; the corpus is not an attack on it.
    s = await startServer(backend, { AUTH_FAILURE_LIMIT: '1000000' });
    other = (await createOrganization(s.app.deps.prisma, 'corpus-other', 'root@other.test')).secret;
  });
  afterAll(() => s?.stop());

  it('answers every bad request to every route with a 4xx and an error body, and hurts no good request', async () => {
    const admin = client(() => s.url, BOOTSTRAP);
    const doc = (await admin.get('/v1/openapi.json')).body;
    const cases = corpus(doc);
    // Every operation of the document is walked; a few thousand requests at most (CI has 2 cores).
    const operations = Object.entries(doc.paths as Record<string, object>).flatMap(([path, methods]) =>
      Object.keys(methods).map((m) => `${m.toUpperCase()} ${path}`),
    );
    const walked = new Set(cases.map((c) => c.label.split(' ').slice(0, 2).join(' ')));
    expect([...walked].sort()).toEqual(operations.sort());
    expect(cases.length).toBeLessThan(4000);

    const problems: string[] = [];
    const check = (label: string, status: number, text: string) => {
      if (status >= 500) problems.push(`${label}: ${status} ${text.slice(0, 200)}`);
      if (status < 400) return;
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
      const b = body as { error?: unknown; code?: unknown } | undefined;
      if (typeof b?.error !== 'string' || typeof b.code !== 'string')
        problems.push(`${label}: ${status} without {error, code}: ${text.slice(0, 200)}`);
    };

    // Good requests run beside the corpus, from this organization and another one.
    let running = true;
    const goodFailures: string[] = [];
    let goodCount = 0;
    const theirs = client(() => s.url, other);
    const good = async () => {
      for (let i = 0; running; i++) {
        const res =
          i % 3 === 0
            ? await theirs.get('/v1/me')
            : i % 3 === 1
              ? await admin.get('/v1/environments?limit=5')
              : await theirs.post('/v1/tokens', { name: `good ${i}` });
        if (res.status >= 300) goodFailures.push(`${res.status} ${JSON.stringify(res.body)}`);
        goodCount++;
      }
    };
    const goodWorkers = [good(), good()];

    let next = 0;
    const worker = async () => {
      while (next < cases.length) {
        const c = cases[next++]!;
        const res = await fetch(`${s.url}${c.path}`, {
          method: c.method,
          headers: { authorization: `Bearer ${BOOTSTRAP}`, ...c.headers },
          body: typeof c.body === 'string' || c.body === undefined ? c.body : new Uint8Array(c.body),
        });
        check(c.label, res.status, await res.text());
      }
    };
    await Promise.all(Array.from({ length: 6 }, worker));
    for (const lie of lyingLengths(doc, new URL(s.url).host)) {
      const reply = await rawRequest(s.url, lie.raw, { endAfterWrite: lie.end });
      if (reply) check(lie.label, reply.status, reply.text);
    }
    running = false;
    await Promise.all(goodWorkers);

    expect(problems).toEqual([]);
    expect(goodFailures).toEqual([]);
    expect(goodCount).toBeGreaterThan(10);
  });
});
