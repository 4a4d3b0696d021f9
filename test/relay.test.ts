// The relay endpoint's checks (docs/agents.md, "The relay"): every refusal is an HTTP answer
// `{error, code}` before the upgrade; a peer that goes silent is cut, and its tunnel with it.
import { once } from 'node:events';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { openRelay, openRelayMux } from '../src/agent/sandbox-agent';
import type { ApiError } from '../src/cli/client';
import { RELAY_NODE_MUX_PATH, type RelayQuery } from '../src/protocol/relay';
import { engine, TEST_ECHO_IMAGE } from './helpers/containers';
import { berthExec } from './helpers/processes';
import { BOOTSTRAP, client, describeBackends, startServer, type TestServer, untilState } from './helpers/server';

describeBackends('relay checks', (backend) => {
  let s: TestServer;
  let credential: string;
  let otherCredential: string;
  let envId: string;
  // Sends queries an agent would never build (missing or unknown fields), as a hostile client can.
  const refusal = (token: string, params: Record<string, string>) =>
    openRelay(s.url, token, params as unknown as RelayQuery).then(
      (ws) => {
        ws.resume();
        ws.close();
        return { status: 101, code: 'upgraded' };
      },
      (error: ApiError) => ({ status: error.status, code: error.code }),
    );

  beforeAll(async () => {
    s = await startServer(backend, { DOCKER_HOST: engine() || 'none' });
    const admin = client(() => s.url, BOOTSTRAP);
    const anonymous = client(() => s.url);
    const mine = await admin.post('/v1/sandboxes', { name: 'mine' });
    credential = (await anonymous.post('/v1/sandboxes/join', { key: mine.body.key })).body.credential;
    const other = await admin.post('/v1/sandboxes', { name: 'other' });
    otherCredential = (await anonymous.post('/v1/sandboxes/join', { key: other.body.key })).body.credential;
    // The catalog's default template, on the offline test image (no registry is reachable here).
    const catalogDefault = (await admin.get('/v1/templates')).body.templates.find((t: { name: string }) => t.name === 'default');
    const { name: _name, ...spec } = catalogDefault;
    expect((await admin.put('/v1/templates/default', { ...spec, image: engine() ? TEST_ECHO_IMAGE : undefined })).status).toBe(201);
    const created = await admin.post('/v1/environments', { template: 'default', sandbox: 'mine' });
    envId = created.body.environment.id;
  });
  afterAll(() => s?.stop());

  it('refuses what a sandbox may not open, with the reason, before the upgrade', async () => {
    // Pending: no node yet.
    expect(await refusal(credential, { environment: envId, kind: 'import', service: 'postgres' })).toEqual({
      status: 409,
      code: 'conflict',
    });
    await untilState(s, BOOTSTRAP, envId, 'ready');
    expect(await refusal('bsc_nonsense', { environment: envId, kind: 'import', service: 'postgres' })).toEqual({
      status: 401,
      code: 'unauthorized',
    });
    expect(await refusal(BOOTSTRAP, { environment: envId, kind: 'import', service: 'postgres' })).toEqual({
      status: 403,
      code: 'forbidden',
    });
    expect(await refusal(otherCredential, { environment: envId, kind: 'import', service: 'postgres' })).toEqual({
      status: 404,
      code: 'not_found',
    });
    expect(await refusal(credential, { kind: 'import', service: 'postgres' })).toEqual({ status: 422, code: 'invalid' });
    expect(await refusal(credential, { environment: envId, kind: 'tunnel' })).toEqual({ status: 422, code: 'invalid' });
    expect(await refusal(credential, { environment: envId, kind: 'import', service: 'redis' })).toEqual({ status: 404, code: 'not_found' });
    expect(await refusal(credential, { environment: envId, kind: 'share', share: 'nope' })).toEqual({ status: 404, code: 'not_found' });
    expect(await refusal(credential, { environment: envId, kind: 'share', share: 'src', final: '1' })).toEqual({
      status: 422,
      code: 'invalid',
    });
    expect(await refusal(credential, { environment: envId, kind: 'share', share: 'out' })).toEqual({ status: 101, code: 'upgraded' });
    // A query that is not well-formed UTF-8 is refused as on every route (not read as U+FFFD).
    const raw = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const ws = new WebSocket(`${s.url.replace('http', 'ws')}/v1/relay?environment=${envId}&kind=import&service=%ED%A0%80`, {
        headers: { authorization: `Bearer ${credential}` },
      });
      ws.once('open', () => reject(new Error('upgraded')));
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      ws.once('error', () => undefined);
    });
    expect(raw.status).toBe(400);
    expect(JSON.parse(raw.body)).toMatchObject({ code: 'bad_request', error: expect.stringContaining('service: malformed') });
  });

  it("checks each stream of a sandbox's mux as it checks a relay socket; a refused one leaves the mux and its other streams working", async (ctx) => {
    if (!engine()) ctx.skip();
    const refused = (promise: Promise<unknown>) =>
      promise.then(
        () => 'opened',
        (error: ApiError) => `${error.status} ${error.code}`,
      );
    // The mux itself: a sandbox's own credential only, refused before the upgrade.
    expect(await refused(openRelayMux(s.url, 'bsc_nonsense'))).toBe('401 unauthorized');
    expect(await refused(openRelayMux(s.url, BOOTSTRAP))).toBe('403 forbidden');
    // A node's mux is a node's: a sandbox's credential is refused there.
    const asNode = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`${s.url.replace('http', 'ws')}${RELAY_NODE_MUX_PATH}`, {
        headers: { authorization: `Bearer ${credential}` },
      });
      ws.once('open', () => resolve(101));
      ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.once('error', () => undefined);
    });
    expect(asNode).toBe(403);

    // The environment of this file (no lease more: the pool's slots are the other tests'); nothing listens on its postgres port yet.
    await untilState(s, BOOTSTRAP, envId, 'ready');
    const id = envId;
    const mux = await openRelayMux(s.url, credential);
    const theirs = await openRelayMux(s.url, otherCredential);
    /** What a stream answers to `payload` (its echo), or why it was cut. */
    const ask = (on: typeof mux, request: object, payload = 'ping') =>
      new Promise<string>((resolve) => {
        const stream = on.open(request);
        let got = '';
        stream.on('data', (c: Buffer) => {
          got += c.toString();
          if (got.length >= payload.length) {
            resolve(got);
            stream.destroy();
          }
        });
        stream.once('error', (error) => resolve(`cut: ${error.message}`));
        stream.write(payload);
      });
    const answers = await Promise.all([
      ask(theirs, { environment: id, service: 'postgres' }),
      ask(mux, { environment: id, service: 'redis' }),
      ask(mux, { environment: 'env_unknown', service: 'postgres' }),
      ask(mux, { environment: 5, service: 'postgres' }),
      ask(mux, { environment: id, service: 'postgres' }),
    ]);
    // Another organization's sandbox: as if it did not exist.
    expect(answers[0]).toBe(`cut: environment ${id} not found`);
    expect(answers[1]).toMatch(/^cut: service redis of environment .* \(its services: .*\) not found$/);
    expect(answers[2]).toBe('cut: environment env_unknown not found');
    expect(answers[3]).toBe('cut: a relay stream names an environment and a service');
    // Nothing listens on the postgres port yet: the node says so.
    expect(answers[4]).toMatch(/^cut: cannot reach postgres on port 5432: /);
    // Then an echo does (setsid: it outlives the command), and streams on the same mux carry it, one after another (its backlog is short).
    const service = 'setsid sh -c "nc -ll -p 5432 -e cat </dev/null >/dev/null 2>&1 &"; echo started';
    expect(await berthExec(s.url, BOOTSTRAP, id, 'sh', '-c', service)).toMatchObject({ code: 0, stdout: 'started\n' });
    await vi.waitFor(async () => expect(await ask(mux, { environment: id, service: 'postgres' }, 'up')).toBe('up'), {
      timeout: 10_000,
      interval: 50,
    });
    for (let i = 0; i < 10; i++) expect(await ask(mux, { environment: id, service: 'postgres' }, `echo ${i}`)).toBe(`echo ${i}`);
    // The refusals cost neither mux its socket.
    expect(mux.ws.readyState).toBe(mux.ws.OPEN);
    expect(theirs.ws.readyState).toBe(theirs.ws.OPEN);
    mux.close(1000, 'done');
    theirs.close(1000, 'done');
  });

  it('counts relay traffic as activity: a tunnel in use outlives the idle time-out, an environment without traffic ends idle', async (ctx) => {
    if (!engine()) ctx.skip();
    const admin = client(() => s.url, BOOTSTRAP);
    {
      const pool = (await admin.get('/v1/templates')).body.templates.find((t: { name: string }) => t.name === 'default').pool;
      // The image's own command echoes on the environment's port 7000.
      const services = [{ service: 'echo', target: '127.0.0.1:7000' }];
      const spec = { pool, startMs: 10, idle: '5m', hard: '1h', image: TEST_ECHO_IMAGE, services };
      expect((await admin.put('/v1/templates/echoing', spec)).status).toBe(201);
      const used = (await admin.post('/v1/environments', { template: 'echoing', sandbox: 'mine' })).body.environment.id;
      const unused = (await admin.post('/v1/environments', { template: 'echoing', sandbox: 'mine' })).body.environment.id;
      await untilState(s, BOOTSTRAP, used, 'ready');
      await untilState(s, BOOTSTRAP, unused, 'ready');
      const ws = await openRelay(s.url, credential, { environment: used, kind: 'import', service: 'echo' });
      // The echo says nothing before it is sent something: nothing is missed before roundTrip listens.
      ws.resume();
      const roundTrip = (payload: Buffer) =>
        new Promise<Buffer>((resolve) => {
          const got: Buffer[] = [];
          const onMessage = (data: Buffer) => {
            got.push(data);
            if (Buffer.concat(got).length >= payload.length) {
              ws.off('message', onMessage);
              resolve(Buffer.concat(got));
            }
          };
          ws.on('message', onMessage);
          ws.send(payload, { binary: true });
        });
      const idleUntil = async (id: string) => Date.parse((await admin.get(`/v1/environments/${id}`)).body.idleUntil);
      // Three minutes at a time, 9 minutes in all: past the 5m idle time-out of both.
      for (let round = 0; round < 3; round++) {
        const before = await idleUntil(used);
        s.clock.advance(3 * 60_000);
        const payload = Buffer.from(`round ${round}`);
        expect(await roundTrip(payload)).toEqual(payload);
        // The traffic moved the idle time-out to now + 5m (written after the bytes passed).
        const after = await vi.waitFor(
          async () => {
            const at = await idleUntil(used);
            expect(at).toBeGreaterThan(before);
            return at;
          },
          { timeout: 20_000, interval: 20 },
        );
        expect(after).toBeGreaterThanOrEqual(before + 3 * 60_000);
        await s.app.deps.background.tick();
        expect((await admin.get(`/v1/environments/${used}`)).body.state).toBe('ready');
      }
      const ended = (await admin.get(`/v1/environments/${unused}`)).body;
      expect(['stopping', 'stopped']).toContain(ended.state);
      expect(ended.error).toMatch(/^idle time-out/);
      ws.close();
    }
  });
  it("closes a removed sandbox's open tunnels at once, and only its own", async (ctx) => {
    if (!engine()) ctx.skip();
    const admin = client(() => s.url, BOOTSTRAP);
    const anonymous = client(() => s.url);
    const pool = (await admin.get('/v1/templates')).body.templates.find((t: { name: string }) => t.name === 'default').pool;
    const services = [{ service: 'echo', target: '127.0.0.1:7000' }];
    expect(
      (await admin.put('/v1/templates/echo-doomed', { pool, startMs: 10, idle: '30m', hard: '1h', image: TEST_ECHO_IMAGE, services }))
        .status,
    ).toBe(201);
    const doomed = await admin.post('/v1/sandboxes', { name: 'doomed' });
    const doomedCredential = (await anonymous.post('/v1/sandboxes/join', { key: doomed.body.key })).body.credential;
    const open = async (sandbox: string, token: string) => {
      const id = (await admin.post('/v1/environments', { template: 'echo-doomed', sandbox })).body.environment.id;
      await untilState(s, BOOTSTRAP, id, 'ready');
      const ws = await openRelay(s.url, token, { environment: id, kind: 'import', service: 'echo' });
      const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
      const echoed = new Promise<Buffer>((resolve) => ws.once('message', (data: Buffer) => resolve(data)));
      ws.resume();
      ws.send(Buffer.from('ping'), { binary: true });
      expect((await echoed).toString()).toBe('ping');
      return { ws, closed, id };
    };
    const theirs = await open('doomed', doomedCredential);
    const mine = await open('mine', credential);
    // And a connection on their mux.
    const theirMux = await openRelayMux(s.url, doomedCredential);
    const muxClosed = new Promise<number>((resolve) => theirMux.ws.once('close', (code) => resolve(code)));
    const onMux = theirMux.open({ environment: theirs.id, service: 'echo' });
    const cut = new Promise<void>((resolve) => onMux.once('close', () => resolve()));
    onMux.write('ping');
    expect((await once(onMux, 'data')).toString()).toBe('ping');
    let mineClosed = false;
    void mine.closed.then(() => {
      mineClosed = true;
    });
    expect((await admin.del(`/v1/sandboxes/${doomed.body.sandbox.id}`)).status).toBe(200);
    expect(await theirs.closed).toBe(4401);
    expect(await muxClosed).toBe(4401);
    await cut;
    expect(onMux.errored?.message).toBe('this sandbox was removed');
    expect(mineClosed).toBe(false);
    mine.ws.close();
  });

  it('cuts a relay socket whose peer went silent, and the connection inside the environment ends with it', async (ctx) => {
    if (!engine()) ctx.skip();
    // The environment's postgres service, played by an echo (setsid: it outlives the command).
    const service = 'setsid sh -c "nc -ll -p 5432 -e cat </dev/null >/dev/null 2>&1 &"; echo started';
    expect(await berthExec(s.url, BOOTSTRAP, envId, 'sh', '-c', service)).toMatchObject({ code: 0, stdout: 'started\n' });
    /** The environment's connections to that service (each seen from both its ends). */
    const connections = async () => {
      const { stdout } = await berthExec(s.url, BOOTSTRAP, envId, 'netstat', '-tn');
      return stdout.split('\n').filter((line) => {
        const [, , , local, foreign, state] = line.trim().split(/\s+/);
        return state === 'ESTABLISHED' && (local?.endsWith(':5432') || foreign?.endsWith(':5432'));
      }).length;
    };
    // Once its bytes came back, the peer sends nothing and answers no ping: as one whose machine
    // went away without closing anything (no close frame, no FIN).
    const ws = new WebSocket(`${s.url.replace('http', 'ws')}/v1/relay?environment=${envId}&kind=import&service=postgres`, {
      headers: { authorization: `Bearer ${credential}` },
      autoPong: false,
    });
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    await once(ws, 'open');
    const echoed = new Promise<Buffer>((resolve) => ws.once('message', (data: Buffer) => resolve(data)));
    ws.send(Buffer.from('hello'), { binary: true });
    expect((await echoed).toString()).toBe('hello');
    expect(await connections()).toBe(2);
    // Cut by the server (no close frame), and the service inside sees its connection end.
    expect(await closed).toBe(1006);
    await vi.waitFor(async () => expect(await connections()).toBe(0), { timeout: 30_000, interval: 200 });
  });
});
