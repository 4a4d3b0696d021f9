import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { createOrganization } from '../src/modules/organizations/service';
import { rawRequest } from './helpers/raw-http';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer } from './helpers/server';

// The bad-request corpus: every route of the OpenAPI document, with bad paths, queries, bodies
// and encodings, each sent with the credential the route is for. Not one answer may be a 5xx or
// an error without an `{error, code}` body, a bad request may not succeed, and good requests
// fired beside the corpus must all succeed.

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
  description?: string;
}
type Doc = { paths: Record<string, Record<string, Operation>> };

/** Who sends a request: a member, a node agent (bnd_), a sandbox agent (bsc_), or nobody (the route's own credential). */
type Kind = 'member' | 'node' | 'sandbox' | 'none';

/**
 * The routes that are not a member's (docs/agents.md, docs/api.md): a node's calls act only on
 * environments on that node, a sandbox credential reads its own config and reports its heartbeat
 * (members read the config too). Routes without security take no bearer; the rest are members'.
 */
const CREDENTIALS: Record<string, Kind[]> = {
  'PUT /v1/snapshots/{lease}/{share}': ['node'],
  'GET /v1/environments/{id}/restore': ['node'],
  'GET /v1/snapshots/{snapshot}/archive': ['node'],
  'POST /v1/environments/{id}/restored': ['node'],
  'GET /v1/template-builds/{id}/context': ['node'],
  'POST /v1/template-builds/{id}': ['node'],
  'GET /v1/sandboxes/{id}/config': ['member', 'sandbox'],
  'POST /v1/sandboxes/{id}/heartbeat': ['sandbox'],
};
const kindsOf = (op: string, operation: Operation): Kind[] => CREDENTIALS[op] ?? (operation.security?.length === 0 ? ['none'] : ['member']);

interface Credential {
  token?: string;
  /** Path parameters that name something of the credential's (its environments, its sandbox), so checks behind the lookup run. */
  ids: Record<string, string>;
}

interface BadRequest {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  token?: string;
  /** What the case is, for the failure list. */
  label: string;
  /** Not wrong for every route (null for an optional field, a filter that matches nothing): a 2xx is no finding. */
  fine?: boolean;
}

const NUL = '\u0000';
const deep = (n: number, open: string, close: string, inner = '1') => `${open.repeat(n)}${inner}${close.repeat(n)}`;

/** Path segments: NUL, invalid UTF-8 (a lone surrogate's encoding, a broken sequence), bad percent-encoding, controls, bidi, huge. */
const BAD_SEGMENTS = ['a%00b', '%ED%A0%80', '%C3%28', '%FF', '%zz', 'a%', '%1B%5B31m', '%E2%80%AEx', 'x'.repeat(10_000), '%2F..%2F'];

const CONTROL = JSON.stringify('\u001b[31mred\u001b[0m');
const BIDI = JSON.stringify('evil\u202egnp.exe');

/** Fields that take any text by design: a client's hostname only suggests a sandbox name, cleaned into a DNS label (docs/sandboxes.md). */
const FREE_TEXT = new Set(['hostname']);

/** Whether a value of badValues() may be right for this field after all. */
function fineValue(name: string, schema: Schema, required: boolean, value: string): boolean {
  if (value === 'null') return !required;
  if (FREE_TEXT.has(name) && (value === CONTROL || value === BIDI)) return true;
  return (
    (value === 'true' && schema.type === 'boolean') ||
    (value === '[]' && schema.type === 'array') ||
    (value === '{}' && schema.type === 'object')
  );
}

/** JSON texts of bad values for one field (lone surrogates are written as JSON escapes on purpose). */
function badValues(schema: Schema): string[] {
  const values = [
    JSON.stringify(`a${NUL}b`),
    '"\\ud800x"',
    '"x\\udc00"',
    CONTROL,
    BIDI,
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

/** Each operation of the document with the credentials it is probed with. */
function* operations(doc: Doc, credentials: Record<Kind, Credential>) {
  for (const [template, methods] of Object.entries(doc.paths)) {
    for (const [lower, op] of Object.entries(methods)) {
      const method = lower.toUpperCase();
      for (const kind of kindsOf(`${method} ${template}`, op)) {
        const { token, ids } = credentials[kind];
        const fill = (bad?: { name: string; value: string }) =>
          template.replace(/\{(\w+)\}/g, (_, name: string) => (bad?.name === name ? bad.value : (ids[name] ?? 'corpus-none')));
        const type = Object.keys(op.requestBody?.content ?? {})[0];
        const json = type === 'application/json' ? op.requestBody!.content[type]!.schema : undefined;
        // A raw body route gets a few bytes of its own type (for the node's save, not an archive).
        const base = json ? bodyOf(json) : type ? 'corpus' : undefined;
        const label = `${method} ${template}${kind === 'member' ? '' : ` (${kind})`}`;
        yield { method, op, kind, token, fill, type, json, base, label };
      }
    }
  }
}

function corpus(doc: Doc, credentials: Record<Kind, Credential>, archives: Record<string, Buffer>): BadRequest[] {
  const cases: BadRequest[] = [];
  for (const { method, op, token, fill, type, json, base, label: opLabel } of operations(doc, credentials)) {
    const pathParams = (op.parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name);
    const query = (op.parameters ?? []).filter((p) => p.in === 'query');
    const path = fill();
    const baseHeaders: Record<string, string> = type ? { 'content-type': type } : {};
    const send = (label: string, p: string, { body = base, headers = baseHeaders, fine = false }: Partial<BadRequest> = {}) =>
      cases.push({ method, path: p, body, headers, token, fine, label: `${opLabel} ${label}` });

    for (const name of pathParams) for (const value of BAD_SEGMENTS) send(`path ${name}=${value.slice(0, 20)}`, fill({ name, value }));
    for (const param of query) {
      const values = ['a%00b', '%ED%A0%80', '%FF', '%1B', 'x'.repeat(8_000)];
      if (param.schema.type === 'integer') values.push('-1', '0', '5000', 'abc', '1e3', '99999999999999999999');
      if (param.schema.type === 'boolean') values.push('maybe', '2');
      if (param.name === 'cursor') values.push('bad', 'e30', 'WyJ4IiwieSJd');
      // A list filter may be given an escape or a long value: it matches nothing.
      const filter = method === 'GET' && param.schema.type === 'string' && param.name !== 'cursor';
      for (const value of values) {
        const fine = filter && (value === '%1B' || value.length > 100);
        send(`query ${param.name}=${value.slice(0, 20)}`, `${path}?${param.name}=${value}`, { fine });
      }
      send(`query ${param.name} twice`, `${path}?${param.name}=a&${param.name}=b`);
    }
    send('unknown query parameter', `${path}?corpus=1`);

    if (json) {
      for (const [name, schema] of Object.entries(json.properties ?? {})) {
        const required = json.required?.includes(name) ?? false;
        for (const value of badValues(schema)) {
          const fine = fineValue(name, schema, required, value);
          send(`body ${name}=${value.slice(0, 20)}`, path, { body: bodyOf(json, name, value), fine });
        }
      }
      send('unknown body field', path, { body: bodyOf(json, 'corpusUnknown', '1') });
      for (const body of ['not json', '[]', 'null', '"text"', '{"a":1', deep(100_000, '[', ']'), deep(50_000, '{"a":', '}')]) {
        send(`body ${body.slice(0, 12)}`, path, { body });
      }
      send('body of invalid UTF-8', path, { body: Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d]) });
      send('body of 2 MiB', path, { body: JSON.stringify({ x: 'x'.repeat(2 * 1024 * 1024) }) });
      send('form body', path, { body: 'a=b', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
      send('UTF-16 body', path, { body: '{}', headers: { 'content-type': 'application/json; charset=utf-16' } });
    } else if (type) {
      send('form upload', path, { body: 'a=b', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
      send('multipart upload', path, { body: '--x--', headers: { 'content-type': 'multipart/form-data; boundary=x' } });
      if (type === 'application/x-tar') for (const [name, body] of Object.entries(archives)) send(`archive ${name}`, path, { body });
    }
  }
  return cases;
}

/** Tar archives a node must not get saved: not tar, cut short, a link, a path out of the share. */
async function badArchives(): Promise<Record<string, Buffer>> {
  const tarOf = async (header: Partial<tar.Header> & { name: string }, body = '') => {
    const pack = tar.pack();
    pack.entry(header, body);
    pack.finalize();
    return Buffer.concat(await Readable.from(pack as AsyncIterable<Buffer>).toArray());
  };
  return {
    'not tar': Buffer.alloc(1024, 7),
    truncated: (await tarOf({ name: 'a.txt' }, 'hello world')).subarray(0, 700),
    symlink: await tarOf({ name: 'l', type: 'symlink', linkname: 'a', size: 0 }),
    'escaping path': await tarOf({ name: '../x' }, 'x'),
  };
}

/** Requests whose Content-Length lies, shorter and longer than the body. */
function lyingLengths(doc: Doc, credentials: Record<Kind, Credential>, host: string) {
  const out: { label: string; raw: string; end: boolean; fine?: boolean }[] = [];
  for (const { method, token, fill, type, label } of operations(doc, credentials)) {
    if (!type) continue;
    const auth = token ? `Authorization: Bearer ${token}\r\n` : '';
    const head = `${method} ${fill()} HTTP/1.1\r\nHost: ${host}\r\n${auth}Content-Type: ${type}\r\n`;
    // Cut at 3 bytes, an upload of any bytes is a whole 3-byte upload.
    out.push({
      label: `${label} shorter`,
      raw: `${head}Content-Length: 3\r\n\r\n{"name":"x"}`,
      end: false,
      fine: type === 'application/octet-stream',
    });
    out.push({ label: `${label} longer`, raw: `${head}Content-Length: 900\r\n\r\n{"name":"x"}`, end: true });
  }
  return out;
}

/** How long the server may take to move an environment along. */
const MOVED = { timeout: 20_000, interval: 50 };

/**
 * A node agent's stand-in on the control channel (docs/agents.md): it says hello, keeps its
 * heartbeat and holds each question (prepare, release) until the test answers it, so the
 * environments on it stay where the test put them.
 */
async function fakeNode(url: string, secret: string) {
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}/v1/nodes/channel`, { headers: { authorization: `Bearer ${secret}` } });
  type Frame = { type: string; reply?: string; environment?: { id: string }; [k: string]: unknown };
  const frames: Frame[] = [];
  ws.on('message', (data) => frames.push(JSON.parse(String(data))));
  /** The first frame since `from` that `match`es, as soon as it arrives. */
  const frame = (match: (f: Frame) => boolean, from = 0) =>
    new Promise<Frame>((resolve) => {
      const check = () => {
        const found = frames.slice(from).find(match);
        if (!found) return;
        ws.off('message', check);
        resolve(found);
      };
      ws.on('message', check);
      check();
    });
  await once(ws, 'open');
  ws.send(JSON.stringify({ type: 'hello', slots: 2, environments: [] }));
  await frame((f) => f.type === 'welcome');
  const heartbeat = setInterval(() => ws.send('{"type":"heartbeat"}'), 1000);
  const answer = (question: { reply?: string }) => ws.send(JSON.stringify({ type: 'reply', reply: question.reply }));
  return {
    ws,
    frames,
    frame,
    asked: (type: string, id: string) => frame((f) => f.type === type && f.environment?.id === id),
    answer,
    answerAll: () => frames.filter((f) => f.reply).forEach(answer),
    close() {
      clearInterval(heartbeat);
      ws.close();
    },
  };
}

/** A pool only remote nodes serve; a lease of `later` is not due for ten minutes, so it stays starting on its node. */
const CATALOG = {
  pools: [{ name: 'remote', hotNodes: 0, maxQueued: 10 }],
  templates: ['now', 'later'].map((name) => ({
    name,
    pool: 'remote',
    startMs: name === 'now' ? 0 : 600_000,
    idle: '30m',
    hard: '1h',
    shares: [{ name: 'src', direction: 'in', envPath: '/workspace/src' }],
    services: [],
  })),
};

describeBackends('bad-request corpus', (backend) => {
  let s: TestServer;
  let dir: string;
  let other: string;
  let node: Awaited<ReturnType<typeof fakeNode>> | undefined;
  let stopping: string | undefined;
  let credentials: Record<Kind, Credential>;
  const admin = client(() => s.url, BOOTSTRAP);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-corpus-'));
    await writeFile(join(dir, 'templates.json'), JSON.stringify(CATALOG));
    // Bad join keys count toward the 429 lock of this one address; the corpus is not an attack on it.
    s = await startServer(backend, { AUTH_FAILURE_LIMIT: '1000000', TEMPLATES_FILE: join(dir, 'templates.json') });
    other = (await createOrganization(s.app.deps.prisma, 'corpus-other', 'root@other.test')).secret;

    // A node with one environment stopping on it (with a snapshot key: the save route) and one
    // starting on it (the restore routes); it holds the release, so both stay so.
    const created = await admin.post('/v1/nodes', { pool: 'remote', name: 'corpus-node' });
    node = await fakeNode(s.url, created.body.secret);
    const lease = async (body: object): Promise<string> => (await admin.post('/v1/environments', body)).body.environment.id;
    const inState = (id: string, state: string) =>
      vi.waitFor(async () => expect((await admin.get(`/v1/environments/${id}`)).body.state).toBe(state), MOVED);
    stopping = await lease({ template: 'now', snapshot: 'corpus' });
    node.answer(await node.asked('prepare', stopping));
    await inState(stopping, 'ready');
    const starting = await lease({ template: 'later' });
    await inState(starting, 'starting');
    expect((await admin.del(`/v1/environments/${stopping}`)).body.environment.state).toBe('stopping');
    await node.asked('release', stopping);

    // A sandbox whose join key is spent: its agent's credential.
    const registered = (await admin.post('/v1/sandboxes', { name: 'corpus-sandbox' })).body;
    const joined = (await client(() => s.url).post('/v1/sandboxes/join', { key: registered.key })).body;
    credentials = {
      member: { token: BOOTSTRAP, ids: {} },
      node: { token: created.body.secret, ids: { lease: stopping, share: 'src', id: starting } },
      sandbox: { token: joined.credential, ids: { id: registered.sandbox.id } },
      none: { ids: {} },
    };
  });
  afterAll(async () => {
    // The held release is answered and done first: the server's stop waits for the job that asked.
    node?.answerAll();
    if (stopping)
      await vi.waitFor(async () => expect((await admin.get(`/v1/environments/${stopping}`)).body.state).not.toBe('stopping'), MOVED);
    node?.close();
    await s?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('answers every bad request to every route with a 4xx and an error body, and hurts no good request', async () => {
    const doc: Doc = (await admin.get('/v1/openapi.json')).body;
    // Every node-only route of the document is probed as a node, and each node or sandbox
    // credential gets past the access check of its routes, so the corpus reaches what is behind.
    const nodeOnly = Object.entries(doc.paths).flatMap(([path, methods]) =>
      Object.entries(methods)
        .filter(([, op]) => op.description?.includes('Node credentials (bnd_) only'))
        .map(([m]) => `${m.toUpperCase()} ${path}`),
    );
    expect(nodeOnly.sort()).toEqual(
      Object.keys(CREDENTIALS)
        .filter((op) => CREDENTIALS[op]!.includes('node'))
        .sort(),
    );
    const refused: string[] = [];
    for (const { method, kind, token, fill, type, base, label } of operations(doc, credentials)) {
      if (kind !== 'node' && kind !== 'sandbox') continue;
      const res = await fetch(`${s.url}${fill()}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(type && { 'content-type': type }) },
        body: base,
      });
      if (res.status === 401 || res.status === 403) refused.push(`${label}: ${res.status} ${await res.text()}`);
      else await res.arrayBuffer();
    }
    expect(refused).toEqual([]);

    const cases = corpus(doc, credentials, await badArchives());
    // Every operation of the document is walked; a few thousand requests at most (CI has 2 cores).
    const operationNames = Object.entries(doc.paths).flatMap(([path, methods]) =>
      Object.keys(methods).map((m) => `${m.toUpperCase()} ${path}`),
    );
    const walked = new Set(cases.map((c) => c.label.split(' ').slice(0, 2).join(' ')));
    expect([...walked].sort()).toEqual(operationNames.sort());
    expect(cases.length).toBeLessThan(4000);

    const problems: string[] = [];
    const check = (c: { label: string; fine?: boolean }, status: number, text: string) => {
      if (status >= 500) problems.push(`${c.label}: ${status} ${text.slice(0, 200)}`);
      if (status < 400) {
        if (!c.fine) problems.push(`${c.label}: ${status} to a bad request: ${text.slice(0, 200)}`);
        return;
      }
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
      const b = body as { error?: unknown; code?: unknown } | undefined;
      if (typeof b?.error !== 'string' || typeof b.code !== 'string')
        problems.push(`${c.label}: ${status} without {error, code}: ${text.slice(0, 200)}`);
    };

    // Good requests run beside the corpus: members of this organization and another one, the node, the sandbox.
    let running = true;
    const goodFailures: string[] = [];
    let goodCount = 0;
    const theirs = client(() => s.url, other);
    const asNode = client(() => s.url, credentials.node.token);
    const asSandbox = client(() => s.url, credentials.sandbox.token);
    const goods = [
      () => theirs.get('/v1/me'),
      () => admin.get('/v1/environments?limit=5'),
      (i: number) => theirs.post('/v1/tokens', { name: `good ${i}` }),
      () => asNode.get(`/v1/environments/${credentials.node.ids.id}/restore`),
      () => asSandbox.get(`/v1/sandboxes/${credentials.sandbox.ids.id}/config`),
    ];
    const good = async () => {
      for (let i = 0; running; i++) {
        const res = await goods[i % goods.length]!(i);
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
          headers: { ...(c.token && { authorization: `Bearer ${c.token}` }), ...c.headers },
          body: typeof c.body === 'string' || c.body === undefined ? c.body : new Uint8Array(c.body),
        });
        check(c, res.status, await res.text());
      }
    };
    await Promise.all(Array.from({ length: 6 }, worker));
    for (const lie of lyingLengths(doc, credentials, new URL(s.url).host)) {
      const reply = await rawRequest(s.url, lie.raw, { endAfterWrite: lie.end });
      if (reply) check(lie, reply.status, reply.text);
    }
    running = false;
    await Promise.all(goodWorkers);

    expect(problems).toEqual([]);
    expect(goodFailures).toEqual([]);
    expect(goodCount).toBeGreaterThan(10);
  });

  // A node's other input: the frames of its control channel (docs/agents.md), hello and heartbeat included.
  it('answers every bad frame on the node control channel with an error frame, never an internal one', async () => {
    const frames = [
      'not json',
      '[]',
      'null',
      '{}',
      deep(2_000, '{"a":', '}'),
      '{"type":"hello","slots":0,"environments":[]}',
      '{"type":"hello","slots":2,"environments":"x"}',
      `{"type":"hello","slots":2,"environments":[${JSON.stringify(`a${NUL}b`)}]}`,
      '{"type":"hello","slots":2,"environments":["\\ud800"]}',
      `{"type":"heartbeat","x":${JSON.stringify(NUL)}}`,
      '{"type":"reply","reply":"elsewhere"}',
      `{"type":"reply","reply":${JSON.stringify(`node-reply:${NUL}`)}}`,
      '{"type":"reply","reply":"node-reply:\\ud800"}',
      '{"type":"exec-output","exec":"x"}',
      `{"type":${JSON.stringify(NUL)}}`,
    ];
    const problems: string[] = [];
    for (const [i, frame] of frames.entries()) {
      const from = node!.frames.length;
      node!.ws.send(frame);
      // Frames are handled in order: the answer to this one comes before the sentinel's.
      node!.ws.send(JSON.stringify({ type: `corpus-${i}` }));
      await node!.frame((f) => String(f.error).includes(`corpus-${i}`), from);
      const answers = node!.frames.slice(from).filter((f) => !String(f.error).includes(`corpus-${i}`));
      if (answers.length !== 1 || answers[0]!.type !== 'error' || typeof answers[0]!.error !== 'string' || answers[0]!.code === 'internal')
        problems.push(`${frame.slice(0, 60)}: ${JSON.stringify(answers).slice(0, 200)}`);
    }
    expect(problems).toEqual([]);
  });
});
