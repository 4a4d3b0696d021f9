import { createHash, randomBytes } from 'node:crypto';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { issueCliToken } from '../src/modules/credentials/service';
import { graphql } from './gql';
import { type Azurite, startAzurite } from './helpers/azurite';
import { openApiValidator } from './helpers/openapi';
import { BOOTSTRAP, client, describeBackends, type Reply, startServer, type TestServer } from './helpers/server';

// Small chunks and segments so a few KiB already span several segments; a small limit for 413.
const CHUNK = 1024;
const SEGMENT = 4096;
const LIMIT = 256 * 1024;
const ENV = { ARTIFACT_CHUNK_SIZE: String(CHUNK), ARTIFACT_SEGMENT_SIZE: String(SEGMENT), ARTIFACT_MAX_BYTES: String(LIMIT) };
const SEAL = 28;
const DAY = 24 * 3600_000;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

const ArtifactQuery = graphql(`
  query TestArtifact($id: ID!) { artifact(id: $id) { id name size sha256 keyVersion segments { name size objects } } }
`);
const ArtifactsQuery = graphql(`
  query TestArtifacts($project: String, $first: Int, $after: String) {
    artifacts(project: $project, first: $first, after: $after) { nodes { id name } pageInfo { hasNextPage endCursor } }
  }
`);
const CreateLink = graphql(`
  mutation TestCreateArtifactLink($id: ID!, $lifetime: String) { createArtifactLink(id: $id, input: { lifetime: $lifetime }) { url expires } }
`);
const DeleteArtifact = graphql(`mutation TestDeleteArtifact($id: ID!) { deleteArtifact(id: $id) }`);

/** Everything a test needs against one running server. */
function harness(get: () => TestServer) {
  const base = () => get().url;

  async function upload(query: string, body: Buffer, headers: Record<string, string> = {}, token = BOOTSTRAP): Promise<Reply> {
    const res = await fetch(`${base()}/v1/artifacts${query}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', ...headers },
      body: new Uint8Array(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
  }

  async function download(path: string, headers: Record<string, string> = {}, token: string | null = BOOTSTRAP) {
    const res = await fetch(path.startsWith('http') ? path : `${base()}${path}`, {
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
    });
    const bytes = Buffer.from(await res.arrayBuffer());
    return { status: res.status, headers: res.headers, bytes, json: () => JSON.parse(bytes.toString()) };
  }

  return { upload, download };
}

/** Every file under DATA_DIR/blobs (the filesystem store), relative names. */
async function blobFiles(dataDir: string): Promise<string[]> {
  const root = join(dataDir, 'blobs');
  const entries = await readdir(root, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name).slice(root.length + 1));
}

/** How long the server may take to finish what a test waits for (an upload's clean-up, a sweep). */
const SETTLED = { timeout: 10_000, interval: 25 };

interface RawUpload {
  response: Promise<{ status: number; body: string; headers: Record<string, unknown> }>;
  write(data: Buffer): Promise<boolean>;
  end(): void;
  destroy(): void;
}

/** A POST /v1/artifacts through node:http, to control the body exactly (chunked, lying lengths, aborts). */
function rawUpload(url: string, query: string, headers: Record<string, string> = {}): RawUpload {
  const req = request(`${url}/v1/artifacts${query}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${BOOTSTRAP}`, 'content-type': 'application/octet-stream', ...headers },
  });
  req.on('error', () => {}); // the server may close while we still write; the response is what counts
  const response = new Promise<{ status: number; body: string; headers: Record<string, unknown> }>((resolve, reject) => {
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, body, headers: res.headers }));
      res.on('error', reject);
    });
  });
  response.catch(() => {});
  return {
    response,
    write: (data) => new Promise((resolve) => (req.destroyed ? resolve(false) : req.write(data, () => resolve(true)))),
    end: () => req.end(),
    destroy: () => req.destroy(),
  };
}

/** Another organization with an admin token. */
async function otherOrg(s: TestServer, name: string): Promise<string> {
  const org = await s.app.deps.prisma.organization.create({ data: { id: `org_${name}`, name } });
  const person = await s.app.deps.prisma.person.create({
    data: { id: `usr_${name}`, orgId: org.id, email: `boss@${name}.test`, admin: true },
  });
  return (await issueCliToken(s.app.deps.prisma, person, { name: 't', createdBy: 'test', expires: null })).secret;
}

describeBackends('artifacts', (backend) => {
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);
  const { upload, download } = harness(() => s);
  let check: ReturnType<typeof openApiValidator>;

  beforeAll(async () => {
    s = await startServer(backend, ENV);
    check = openApiValidator((await admin.get('/v1/openapi.json')).body);
  });
  afterAll(() => s?.stop());

  it('round-trips empty, 1 byte, chunk boundaries and multi-segment bodies with every field', async () => {
    for (const size of [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK, 10 * CHUNK + 17]) {
      const data = randomBytes(size);
      const res = await upload(`?name=file-${size}.bin`, data);
      check('POST', '/v1/artifacts', res);
      expect(res.status).toBe(201);
      const a = res.body.artifact;
      const chunks = Math.ceil(size / CHUNK);
      expect(a).toEqual({
        id: expect.stringMatching(/^art_[a-z2-7]{20}$/),
        project: 'default',
        name: `file-${size}.bin`,
        size,
        sha256: sha(data),
        contentType: 'application/octet-stream',
        labels: {},
        keyVersion: 1,
        manifest: expect.stringMatching(new RegExp(`/${a.id}/manifest$`)),
        segments: expect.any(Array),
        chunks,
        sealedBytes: size + SEAL * chunks,
        createdBy: 'admin@berth.local',
        created: expect.any(String),
        expires: expect.any(String),
      });
      expect(res.body.link).toBeUndefined();
      expect(Date.parse(a.expires) - Date.parse(a.created)).toBe(7 * DAY);
      // Segments close once they hold >= SEGMENT sealed bytes: 4 chunks of 1052 here.
      expect(a.segments.map((seg: { objects: number }) => seg.objects)).toEqual(
        Array.from({ length: Math.ceil(chunks / 4) }, (_, i) => Math.min(4, chunks - 4 * i)),
      );
      expect(a.segments.reduce((n: number, seg: { size: number }) => n + seg.size, 0)).toBe(a.sealedBytes);
      const got = await download(`/v1/artifacts/${a.id}/content`);
      expect(got.status).toBe(200);
      expect(got.bytes.equals(data)).toBe(true);
      expect(got.headers.get('etag')).toBe(`"${sha(data)}"`);
      expect(got.headers.get('content-type')).toBe('application/octet-stream');
      expect(got.headers.get('content-disposition')).toContain(`filename="file-${size}.bin"`);
      const meta = await admin.get(`/v1/artifacts/${a.id}`);
      check('GET', `/v1/artifacts/${a.id}`, meta);
      expect(meta.body).toEqual(a);
    }
  });

  it('stores name, project, labels, retention and content type as given, and defaults the name to the id', async () => {
    const res = await upload(
      '?name=dist/app%20v1.tar.gz&project=web.app&retention=12h&label=team=infra&label=tier=&label=berth.dev/ci=yes',
      Buffer.from('x'),
      {
        'content-type': 'application/gzip',
      },
    );
    expect(res.status).toBe(201);
    expect(res.body.artifact).toMatchObject({
      name: 'dist/app v1.tar.gz',
      project: 'web.app',
      contentType: 'application/gzip',
      labels: { 'berth.dev/ci': 'yes', team: 'infra', tier: '' },
    });
    const a = res.body.artifact;
    expect(Date.parse(a.expires) - Date.parse(a.created)).toBe(12 * 3600_000);
    const got = await download(`/v1/artifacts/${a.id}/content`);
    expect(got.headers.get('content-type')).toBe('application/gzip');
    expect(got.headers.get('content-disposition')).toBe(`attachment; filename="app v1.tar.gz"; filename*=UTF-8''app%20v1.tar.gz`);
    expect(got.headers.get('x-content-type-options')).toBe('nosniff');

    const max = await upload('?retention=30d', Buffer.alloc(0), { 'content-type': '' });
    expect(max.status).toBe(201);
    expect(max.body.artifact.name).toBe(max.body.artifact.id);
    expect(max.body.artifact.contentType).toBe('application/octet-stream');
    expect(Date.parse(max.body.artifact.expires) - Date.parse(max.body.artifact.created)).toBe(30 * DAY);
  });

  it('refuses bad parameters with 422 naming the problem, and form encodings with 415', async () => {
    const bad: [string, RegExp][] = [
      ['?retention=31d', /retention.*30d maximum/],
      ['?retention=721h', /retention/],
      ['?retention=0s', /retention.*positive/],
      ['?retention=soon', /retention/],
      ['?label=nokey', /key=value/],
      ['?label=a=1&label=a=2', /more than once/],
      ['?label=-bad=1', /label/],
      ['?project=Bad_Project', /project/],
      ['?name=', /name/],
      ['?name=a%0Ab', /name.*control/],
      [`?name=${'x'.repeat(256)}`, /255/],
      ['?link=31d', /link.*30d maximum/],
      ['?link=500ms', /link.*1s/],
      ['?retain=1d', /unknown query parameter "retain"/],
      ['?name=a&name=b', /more than once/],
    ];
    for (const [query, message] of bad) {
      const res = await upload(query, Buffer.from('data'));
      check('POST', '/v1/artifacts', res);
      expect(res.status, query).toBe(422);
      expect(res.body).toEqual({ error: expect.stringMatching(message), code: 'invalid' });
    }
    const form = await upload('', Buffer.from('a=b'), { 'content-type': 'application/x-www-form-urlencoded' });
    expect(form).toMatchObject({ status: 415, body: { code: 'unsupported_media_type' } });
    const weird = await upload('', Buffer.from('a'), { 'content-type': 'not a type' });
    expect(weird).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await s.app.deps.prisma.artifact.count({ where: { status: { not: 'stored' } } })).toBe(0);
  });

  it('answers 413 at once from Content-Length, keeping nothing', async () => {
    const before = await blobFiles(s.dataDir);
    const count = await s.app.deps.prisma.artifact.count();
    const up = rawUpload(s.url, '?name=huge', { 'content-length': String(3 * 1024 ** 3) });
    await up.write(randomBytes(64 * 1024));
    const res = await up.response;
    up.destroy();
    expect(res.status).toBe(413);
    expect(JSON.parse(res.body)).toEqual({ error: expect.stringContaining(String(LIMIT)), code: 'too_large' });
    expect(res.headers.connection).toBe('close');
    expect(await s.app.deps.prisma.artifact.count()).toBe(count);
    expect(await blobFiles(s.dataDir)).toEqual(before);
  });

  it('answers 413 as soon as a chunked body crosses the limit, keeping nothing', async () => {
    const before = await blobFiles(s.dataDir);
    const count = await s.app.deps.prisma.artifact.count();
    const up = rawUpload(s.url, '?name=growing');
    let sent = 0;
    let answered = false;
    void up.response.then(() => (answered = true));
    while (!answered && sent < 64 * LIMIT) {
      await up.write(randomBytes(16 * 1024));
      sent += 16 * 1024;
    }
    const res = await up.response;
    up.destroy();
    expect(res.status).toBe(413);
    expect(JSON.parse(res.body).code).toBe('too_large');
    expect(sent).toBeLessThan(64 * LIMIT); // refused while the body was still coming (never ended)
    await vi.waitFor(async () => expect(await s.app.deps.prisma.artifact.count()).toBe(count), SETTLED);
    await vi.waitFor(async () => expect((await blobFiles(s.dataDir)).length).toBe(before.length), SETTLED);
    expect(await blobFiles(s.dataDir)).toEqual(before);
    // A body of exactly the limit is fine.
    const exact = await upload('?name=exact', randomBytes(LIMIT));
    expect(exact.status).toBe(201);
    expect(exact.body.artifact.size).toBe(LIMIT);
  });

  it('shows an upload only once it is complete, and leaves nothing behind when the client disconnects', async () => {
    const before = await blobFiles(s.dataDir);
    const count = await s.app.deps.prisma.artifact.count();
    const listed = async () => (await admin.get('/v1/artifacts?name=partial&limit=500')).body.artifacts.length;

    const aborted = rawUpload(s.url, '?name=partial');
    await aborted.write(randomBytes(20 * CHUNK)); // several segments stored already
    await vi.waitFor(async () => expect((await blobFiles(s.dataDir)).length).toBeGreaterThan(before.length), SETTLED);
    expect(await s.app.deps.prisma.artifact.count({ where: { status: 'uploading' } })).toBe(1);
    expect(await listed()).toBe(0);
    aborted.destroy();
    await vi.waitFor(async () => expect(await s.app.deps.prisma.artifact.count()).toBe(count), SETTLED);
    await vi.waitFor(async () => expect((await blobFiles(s.dataDir)).length).toBe(before.length), SETTLED);

    const slow = rawUpload(s.url, '?name=partial');
    const data = randomBytes(9 * CHUNK);
    await slow.write(data.subarray(0, 5 * CHUNK));
    await vi.waitFor(async () => expect(await s.app.deps.prisma.artifact.count({ where: { status: 'uploading' } })).toBe(1), SETTLED);
    expect(await listed()).toBe(0);
    await slow.write(data.subarray(5 * CHUNK));
    slow.end();
    const res = await slow.response;
    expect(res.status).toBe(201);
    expect(JSON.parse(res.body).artifact.sha256).toBe(sha(data));
    expect(await listed()).toBe(1);
  });

  it('serves other downloads, byte for byte, while clients walk away from theirs', async () => {
    const data = randomBytes(200 * CHUNK + 5);
    const { id } = (await upload('?name=walked-away', data)).body.artifact;
    /** Reads the first piece of the body, then drops the connection. */
    const walkAway = () =>
      new Promise<void>((resolve, reject) => {
        const req = request(`${s.url}/v1/artifacts/${id}/content`, { headers: { authorization: `Bearer ${BOOTSTRAP}` } });
        req.on('error', reject);
        req.on('response', (res) => {
          res.once('data', () => {
            req.destroy();
            resolve();
          });
        });
        req.end();
      });
    const [full] = await Promise.all([download(`/v1/artifacts/${id}/content`), walkAway(), walkAway(), walkAway()]);
    expect(full.status).toBe(200);
    expect(full.bytes.equals(data)).toBe(true);
    const again = await Promise.all([download(`/v1/artifacts/${id}/content`), download(`/v1/artifacts/${id}/content`)]);
    for (const d of again) expect(d.bytes.equals(data)).toBe(true);
  });

  it('serves single byte ranges, conditional requests and HEAD', async () => {
    const data = randomBytes(5 * CHUNK + 100);
    const { id } = (await upload('?name=ranged', data)).body.artifact;
    const path = `/v1/artifacts/${id}/content`;
    const size = data.length;
    const cases: [string, number, number][] = [
      ['bytes=0-9', 0, 9],
      [`bytes=${CHUNK - 3}-${2 * CHUNK + 5}`, CHUNK - 3, 2 * CHUNK + 5],
      [`bytes=${4 * CHUNK}-`, 4 * CHUNK, size - 1],
      ['bytes=-5', size - 5, size - 1],
      [`bytes=-${size + 100}`, 0, size - 1],
      [`bytes=100-${size + 1000}`, 100, size - 1],
      [`bytes=${size - 1}-${size - 1}`, size - 1, size - 1],
    ];
    for (const [range, start, end] of cases) {
      const got = await download(path, { range });
      expect(got.status, range).toBe(206);
      expect(got.headers.get('content-range')).toBe(`bytes ${start}-${end}/${size}`);
      expect(got.bytes.equals(data.subarray(start, end + 1)), range).toBe(true);
    }
    for (const range of [`bytes=${size}-`, 'bytes=9-3', 'bytes=-0', 'bytes=abc']) {
      const got = await download(path, { range });
      expect(got.status, range).toBe(416);
      expect(got.headers.get('content-range')).toBe(`bytes */${size}`);
      expect(got.json()).toMatchObject({ code: 'range_not_satisfiable' });
    }
    for (const range of ['bytes=0-1,5-6', 'items=0-1']) {
      const got = await download(path, { range });
      expect(got.status, range).toBe(200);
      expect(got.bytes.equals(data)).toBe(true);
    }
    const etag = `"${sha(data)}"`;
    expect((await download(path, { 'if-none-match': etag })).status).toBe(304);
    expect((await download(path, { range: 'bytes=0-0', 'if-range': '"other"' })).status).toBe(200);
    expect((await download(path, { range: 'bytes=0-0', 'if-range': etag })).status).toBe(206);
    const head = await fetch(`${s.url}${path}`, { method: 'HEAD', headers: { authorization: `Bearer ${BOOTSTRAP}`, range: 'bytes=1-2' } });
    expect(head.status).toBe(206);
    expect(head.headers.get('content-length')).toBe('2');
    const empty = (await upload('?name=empty', Buffer.alloc(0))).body.artifact.id;
    expect((await download(`/v1/artifacts/${empty}/content`, { range: 'bytes=0-' })).status).toBe(416);
    const suffix = await download(`/v1/artifacts/${empty}/content`, { range: 'bytes=-10' });
    expect(suffix.status).toBe(200);
    expect(suffix.bytes.length).toBe(0);
  });

  it('makes signed links that download without a token until they expire, are revoked or the artifact goes', async () => {
    const data = randomBytes(3 * CHUNK + 1);
    const res = await upload('?name=linked.bin&link=1h', data);
    check('POST', '/v1/artifacts', res);
    const { artifact, link } = res.body;
    expect(link).toEqual({ url: expect.stringContaining(`${s.url}/v1/links/`), expires: expect.any(String) });
    expect(Math.abs(Date.parse(link.expires) - Date.parse(artifact.created) - 3600_000)).toBeLessThan(1000);

    const got = await download(link.url, {}, null);
    expect(got.status).toBe(200);
    expect(got.bytes.equals(data)).toBe(true);
    const part = await download(link.url, { range: 'bytes=-2' }, null);
    expect(part.status).toBe(206);
    expect(part.bytes.equals(data.subarray(-2))).toBe(true);

    // Tampered: the signature no longer matches, or the claims were swapped.
    const token = link.url.split('/v1/links/')[1]!;
    const [h, p, sig] = token.split('.');
    const flipped = `${h}.${p}.${sig!.slice(0, -2)}${sig!.endsWith('AA') ? 'BB' : 'AA'}`;
    const claims = JSON.parse(Buffer.from(p!, 'base64url').toString());
    const forged = `${h}.${Buffer.from(JSON.stringify({ ...claims, exp: claims.exp + 86400 })).toString('base64url')}.${sig}`;
    for (const bad of [flipped, forged, 'not-a-token', `${h}.${p}.`]) {
      const r = await download(`/v1/links/${bad}`, {}, null);
      expect(r.status).toBe(403);
      expect(r.json()).toEqual({ error: expect.stringContaining('not valid'), code: 'invalid_link' });
    }

    // More links, through REST and GraphQL; a lifetime past the artifact's expiry is cut to it.
    const made = await admin.post(`/v1/artifacts/${artifact.id}/links`, { lifetime: '10m' });
    check('POST', `/v1/artifacts/${artifact.id}/links`, made);
    expect(made.status).toBe(201);
    expect(Math.abs(Date.parse(made.body.link.expires) - Date.now() - 600_000)).toBeLessThan(2000);
    const dflt = await admin.post(`/v1/artifacts/${artifact.id}/links`);
    expect(Math.abs(Date.parse(dflt.body.link.expires) - Date.now() - DAY)).toBeLessThan(2000);
    expect(await admin.post(`/v1/artifacts/${artifact.id}/links`, { lifetime: '31d' })).toMatchObject({
      status: 422,
      body: { code: 'invalid' },
    });
    const viaGql = await admin.gql(CreateLink, { id: artifact.id, lifetime: '30d' });
    expect(viaGql.body.data?.createArtifactLink?.expires).toBe(
      new Date(Math.floor(Date.parse(artifact.expires) / 1000) * 1000).toISOString(),
    );
    expect((await download(viaGql.body.data!.createArtifactLink!.url, {}, null)).status).toBe(200);

    // Expired: the injected clock moves past the link's expiry.
    s.clock.advance(3600_000 + 1000);
    const expired = await download(link.url, {}, null);
    expect(expired.status).toBe(410);
    expect(expired.json()).toEqual({ error: expect.any(String), code: 'link_expired' });
    expect((await download(dflt.body.link.url, {}, null)).status).toBe(200);

    // Revoked: every earlier link stops, later ones work.
    const revoked = await admin.del(`/v1/artifacts/${artifact.id}/links`);
    check('DELETE', `/v1/artifacts/${artifact.id}/links`, revoked);
    expect(revoked.body.artifact.id).toBe(artifact.id);
    expect((await download(dflt.body.link.url, {}, null)).json()).toMatchObject({ code: 'link_revoked' });
    const fresh = (await admin.post(`/v1/artifacts/${artifact.id}/links`, { lifetime: '1h' })).body.link.url;
    expect((await download(fresh, {}, null)).status).toBe(200);

    // Deleted: 404, like any unknown artifact.
    expect((await admin.del(`/v1/artifacts/${artifact.id}`)).status).toBe(200);
    const gone = await download(fresh, {}, null);
    expect(gone.status).toBe(404);
    expect(gone.json().code).toBe('not_found');
  });

  it('never returns bytes that fail authentication: a flipped byte in a stored object is detected', async () => {
    const data = randomBytes(10 * CHUNK);
    const a = (await upload('?name=tampered', data)).body.artifact;
    const file = (name: string) => join(s.dataDir, 'blobs', ...name.split('/'));
    const flip = async (name: string, offset: number) => {
      const bytes = await readFile(file(name));
      bytes[offset] ^= 0x01;
      await writeFile(file(name), bytes);
    };
    // A chunk in the second segment: headers are out, the response is cut short, never wrong data.
    await flip(a.segments[1].name, 2 * (CHUNK + SEAL) + 100);
    await expect(
      fetch(`${s.url}/v1/artifacts/${a.id}/content`, { headers: { authorization: `Bearer ${BOOTSTRAP}` } }).then((r) => r.arrayBuffer()),
    ).rejects.toThrow();
    const before = await download(`/v1/artifacts/${a.id}/content`, { range: `bytes=0-${4 * CHUNK - 1}` });
    expect(before.status).toBe(206);
    expect(before.bytes.equals(data.subarray(0, 4 * CHUNK))).toBe(true);
    // A range that starts in the damaged chunk: a clean 500, nothing sent.
    const at = await download(`/v1/artifacts/${a.id}/content`, { range: `bytes=${6 * CHUNK}-` });
    expect(at.status).toBe(500);
    expect(at.json()).toEqual({ error: expect.stringContaining('integrity'), code: 'integrity' });
    // The manifest: refused before anything is sent.
    await flip(a.manifest, 30);
    const m = await download(`/v1/artifacts/${a.id}/content`);
    expect(m.status).toBe(500);
    expect(m.json().code).toBe('integrity');
  });

  it('deletes objects and record: {deleted: id}, then 404 everywhere', async () => {
    const a = (await upload('?name=doomed', randomBytes(6 * CHUNK))).body.artifact;
    const prefix = a.manifest.replace(/manifest$/, '');
    expect((await blobFiles(s.dataDir)).filter((f) => f.startsWith(prefix))).toHaveLength(3);
    const res = await admin.del(`/v1/artifacts/${a.id}`);
    check('DELETE', `/v1/artifacts/${a.id}`, res);
    expect(res).toMatchObject({ status: 200, body: { deleted: a.id } });
    expect((await blobFiles(s.dataDir)).filter((f) => f.startsWith(prefix))).toEqual([]);
    expect(await s.app.deps.prisma.artifact.count({ where: { id: a.id } })).toBe(0);
    for (const r of [
      await admin.get(`/v1/artifacts/${a.id}`),
      await admin.del(`/v1/artifacts/${a.id}`),
      await admin.post(`/v1/artifacts/${a.id}/links`, {}),
    ]) {
      expect(r).toMatchObject({ status: 404, body: { code: 'not_found' } });
    }
    expect((await download(`/v1/artifacts/${a.id}/content`)).status).toBe(404);
    const viaGql = (await upload('?name=doomed-too', Buffer.from('x'))).body.artifact;
    expect((await admin.gql(DeleteArtifact, { id: viaGql.id })).body.data?.deleteArtifact).toBe(viaGql.id);
    expect((await admin.gql(ArtifactQuery, { id: viaGql.id })).body.errors?.[0]?.extensions?.code).toBe('not_found');
  });

  it('lists newest first with cursor pagination, filters by project, name and label (REST and GraphQL)', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.unshift((await upload(`?project=listing&name=n${i % 2}&label=i=${i}`, Buffer.from(String(i)))).body.artifact.id);
      s.clock.advance(1000);
    }
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await admin.get(`/v1/artifacts?project=listing&limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      check('GET', '/v1/artifacts', page);
      expect(page.status).toBe(200);
      expect(page.body.artifacts.length).toBeLessThanOrEqual(2);
      seen.push(...page.body.artifacts.map((a: { id: string }) => a.id));
      cursor = page.body.next;
    } while (cursor);
    expect(seen).toEqual(ids);
    expect((await admin.get('/v1/artifacts?project=listing&name=n0')).body.artifacts).toHaveLength(3);
    expect((await admin.get('/v1/artifacts?project=listing&label=i=3')).body.artifacts.map((a: { id: string }) => a.id)).toEqual([ids[1]]);
    expect((await admin.get('/v1/artifacts?project=listing&label=i=3&label=i=4')).status).toBe(422);
    expect((await admin.get('/v1/artifacts')).body.artifacts.some((a: { id: string }) => a.id === ids[0])).toBe(true);
    expect(await admin.get('/v1/artifacts?cursor=garbage')).toMatchObject({ status: 422, body: { code: 'invalid' } });
    expect(await admin.get('/v1/artifacts?limit=0')).toMatchObject({ status: 422, body: { code: 'invalid' } });

    const first = await admin.gql(ArtifactsQuery, { project: 'listing', first: 3 });
    expect(first.body.data?.artifacts?.nodes.map((n) => n.id)).toEqual(ids.slice(0, 3));
    const rest = await admin.gql(ArtifactsQuery, { project: 'listing', first: 3, after: first.body.data!.artifacts!.pageInfo.endCursor });
    expect(rest.body.data?.artifacts?.nodes.map((n) => n.id)).toEqual(ids.slice(3));
    expect(rest.body.data?.artifacts?.pageInfo.hasNextPage).toBe(false);
    const one = await admin.gql(ArtifactQuery, { id: ids[0]! });
    expect(one.body.data?.artifact).toMatchObject({ id: ids[0], name: 'n0', size: 1, keyVersion: 1 });
  });

  it('sweeps expired artifacts and abandoned uploads, also after a restart', async () => {
    const short = (await upload('?name=short&retention=1h', randomBytes(5 * CHUNK))).body.artifact;
    const long = (await upload('?name=long&retention=2h', Buffer.from('keep'))).body.artifact;
    // An upload whose process died: a row in `uploading` and a segment, no heartbeat.
    const orphan = 'art_aaaaaaaaaaaaaaaaaaaa';
    const orgId = (await s.app.deps.prisma.organization.findFirstOrThrow({ where: { name: 'default' } })).id;
    await s.app.deps.prisma.artifact.create({
      data: {
        id: orphan,
        orgId,
        project: 'default',
        name: 'orphan',
        size: 0n,
        sha256: '',
        contentType: 'x/y',
        keyVersion: 1,
        manifest: '',
        chunks: 0,
        sealedBytes: 0n,
        createdBy: 'test',
        created: s.clock.now(),
        expires: new Date(s.clock.now().getTime() + 3600_000),
        status: 'uploading',
      },
    });
    await s.app.deps.store.put(`artifacts/${orgId}/default/${orphan}/seg-000000`, Buffer.from('partial'));

    await s.restart();
    await s.app.deps.background.tick();
    expect((await admin.get(`/v1/artifacts/${short.id}`)).status).toBe(200);
    expect(await s.app.deps.prisma.artifact.count({ where: { id: orphan } })).toBe(1);

    s.clock.advance(3600_000 + 1000);
    // Expired but not yet swept: already gone from the API.
    expect((await admin.get(`/v1/artifacts/${short.id}`)).status).toBe(404);
    await s.app.deps.background.tick();
    expect(await s.app.deps.prisma.artifact.count({ where: { id: { in: [short.id, orphan] } } })).toBe(0);
    const files = await blobFiles(s.dataDir);
    expect(files.filter((f) => f.includes(short.id) || f.includes(orphan))).toEqual([]);
    expect((await admin.get(`/v1/artifacts/${long.id}`)).status).toBe(200);
    expect(files.some((f) => f.includes(long.id))).toBe(true);
  });

  it('keeps organizations apart: their artifacts answer exactly like unknown ones', async () => {
    const secret = await otherOrg(s, 'tenant-b');
    const theirs = client(() => s.url, secret);
    const data = Buffer.from('secret bytes');
    const res = await upload('?name=theirs&link=1h', data, {}, secret);
    expect(res.status).toBe(201);
    const { artifact, link } = res.body;
    expect(artifact.keyVersion).toBe(1);
    const unknown = 'art_bbbbbbbbbbbbbbbbbbbb';
    const same = async (make: (id: string) => Promise<{ status: number; body: unknown }>) => {
      const a = await make(artifact.id);
      const b = await make(unknown);
      expect(a.status).toBe(404);
      expect(JSON.stringify(a.body).replace(artifact.id, 'X')).toBe(JSON.stringify(b.body).replace(unknown, 'X'));
    };
    await same((id) => admin.get(`/v1/artifacts/${id}`));
    await same((id) => admin.del(`/v1/artifacts/${id}`));
    await same((id) => admin.post(`/v1/artifacts/${id}/links`, {}));
    await same((id) => admin.del(`/v1/artifacts/${id}/links`));
    await same(async (id) => {
      const r = await download(`/v1/artifacts/${id}/content`);
      return { status: r.status, body: r.json() };
    });
    const gql = await admin.gql(ArtifactQuery, { id: artifact.id });
    expect(gql.body.errors?.[0]?.extensions?.code).toBe('not_found');
    expect((await admin.get('/v1/artifacts?limit=500')).body.artifacts.map((a: { id: string }) => a.id)).not.toContain(artifact.id);
    // Their link still works for anyone holding it; their data is still theirs.
    expect((await download(link.url, {}, null)).bytes.equals(data)).toBe(true);
    expect((await theirs.get(`/v1/artifacts/${artifact.id}`)).status).toBe(200);
  });

  it('creates one project key under concurrent first uploads, and refuses to open what a shred destroyed', async () => {
    const results = await Promise.all([1, 2, 3].map((i) => upload(`?project=race&name=r${i}`, randomBytes(2 * CHUNK))));
    expect(results.map((r) => r.status)).toEqual([201, 201, 201]);
    expect(results.map((r) => r.body.artifact.keyVersion)).toEqual([1, 1, 1]);
    expect(await s.app.deps.prisma.projectKey.count({ where: { project: 'race' } })).toBe(1);
    const row = await s.app.deps.prisma.projectKey.findFirstOrThrow({ where: { project: 'race' } });
    expect(Buffer.from(row.wrapped)).toHaveLength(61);
    for (const r of results) {
      expect((await download(`/v1/artifacts/${r.body.artifact.id}/content`)).status).toBe(200);
    }
    // A shred empties (or deletes) the wrapped key: nothing sealed under it opens, at once.
    await s.app.deps.prisma.projectKey.updateMany({ where: { project: 'race' }, data: { wrapped: new Uint8Array(0) } });
    const shredded = await download(`/v1/artifacts/${results[0]!.body.artifact.id}/content`);
    expect(shredded.status).toBe(410);
    expect(shredded.json().code).toBe('key_shredded');
    const next = await upload('?project=race&name=after', Buffer.from('new'));
    expect(next.body.artifact.keyVersion).toBe(2);
    expect((await download(`/v1/artifacts/${next.body.artifact.id}/content`)).bytes.toString()).toBe('new');
  });

  it('holds at most 8 uploads in flight per member or key: the next is 429 too_many_uploads, others go on', async () => {
    const inFlight = () => s.app.deps.prisma.artifact.count({ where: { status: 'uploading', createdBy: 'admin@berth.local' } });
    const before = await inFlight();
    const stalled = Array.from({ length: 8 - before }, (_, i) =>
      rawUpload(s.url, `?name=stalled-${i}`, { 'transfer-encoding': 'chunked' }),
    );
    for (const u of stalled) await u.write(Buffer.from('part'));
    await vi.waitFor(async () => expect(await inFlight()).toBe(8), SETTLED);
    const refused = await upload('?name=ninth', Buffer.from('x'));
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ code: 'too_many_uploads' });
    // Another member is not held back.
    const other = await admin.post('/v1/tokens', { email: 'uploader@example.com' });
    const theirs = await fetch(`${s.url}/v1/artifacts?name=theirs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${other.body.secret}`, 'content-type': 'application/octet-stream' },
      body: 'mine',
    });
    expect(theirs.status).toBe(201);
    // One finishes: room for the next.
    stalled[0]!.end();
    expect((await stalled[0]!.response).status).toBe(201);
    expect((await upload('?name=ninth', Buffer.from('x'))).status).toBe(201);
    for (const u of stalled.slice(1)) u.destroy();
    await vi.waitFor(async () => expect(await inFlight()).toBe(0), SETTLED);
  });

  it('refuses requests without a bearer token', async () => {
    expect((await download('/v1/artifacts/art_bbbbbbbbbbbbbbbbbbbb/content', {}, null)).status).toBe(401);
    const res = await fetch(`${s.url}/v1/artifacts`, { method: 'POST', body: 'x' });
    expect(res.status).toBe(401);
  });
});

describe('artifacts on Azure Blob Storage (Azurite)', () => {
  let azurite: Azurite;
  let s: TestServer;
  const admin = client(() => s.url, BOOTSTRAP);
  const { upload, download } = harness(() => s);

  beforeAll(async () => {
    azurite = await startAzurite();
    s = await startServer('pglite', {
      ...ENV,
      AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString,
      AZURE_STORAGE_CONTAINER: 'artifacts-test',
    });
  });
  afterAll(async () => {
    await s?.stop();
    await azurite?.stop();
  });

  const objects = async (prefix: string) => {
    const names: string[] = [];
    for await (const { name } of s.app.deps.store.list(prefix)) names.push(name);
    return names;
  };

  it('round-trips, serves ranges and links, and deletes its objects', async () => {
    for (const size of [0, 1, CHUNK, 10 * CHUNK + 17]) {
      const data = randomBytes(size);
      const res = await upload(`?name=az-${size}&link=1h`, data);
      expect(res.status).toBe(201);
      const a = res.body.artifact;
      expect(a.sha256).toBe(sha(data));
      expect(a.segments).toHaveLength(Math.ceil(Math.ceil(size / CHUNK) / 4));
      const prefix = a.manifest.replace(/manifest$/, '');
      expect(await objects(prefix)).toHaveLength(a.segments.length + 1);
      expect((await download(`/v1/artifacts/${a.id}/content`)).bytes.equals(data)).toBe(true);
      expect((await download(res.body.link.url, {}, null)).bytes.equals(data)).toBe(true);
      if (size > 10) {
        const part = await download(`/v1/artifacts/${a.id}/content`, { range: `bytes=${CHUNK - 5}-${size - 3}` });
        expect(part.status).toBe(206);
        expect(part.bytes.equals(data.subarray(CHUNK - 5, size - 2))).toBe(true);
      }
      expect((await admin.del(`/v1/artifacts/${a.id}`)).body).toEqual({ deleted: a.id });
      expect(await objects(prefix)).toEqual([]);
      expect((await download(res.body.link.url, {}, null)).status).toBe(404);
    }
  });

  it('answers 413 and leaves no objects when a chunked body crosses the limit', async () => {
    const up = rawUpload(s.url, '?name=az-huge');
    let answered = false;
    void up.response.then(() => (answered = true));
    for (let sent = 0; !answered && sent < 64 * LIMIT; sent += 16 * 1024) await up.write(randomBytes(16 * 1024));
    expect((await up.response).status).toBe(413);
    up.destroy();
    await vi.waitFor(async () => expect((await objects('artifacts/')).length).toBe(0), SETTLED);
    expect(await s.app.deps.prisma.artifact.count()).toBe(0);
  });
});
