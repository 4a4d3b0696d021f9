// devcontainer.json builds on a real engine, offline (docs/environments.md, "Templates through the
// API"): `berth template push --devcontainer` sends the folder with its build context, the built-in
// node builds the image through the engine's build API (FROM a local image, no registry, no
// network), the template is `ready` and its leases run in the built image; a failed build fails
// the template and its leases; with no node to build, leases wait naming the build.
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { launchBrowser, openConsole, screenshot, signIn } from './helpers/browser';
import { describeContainers, engine, TEST_IMAGE, writeCatalog } from './helpers/containers';
import { podman } from './helpers/engine-setup';
import { berthExec, runBerth } from './helpers/processes';
import { BOOTSTRAP, client, startServer, type TestServer, untilState } from './helpers/server';
import { poll } from './helpers/wait';

/** Writes a repository folder with `.devcontainer/` holding `files`. */
async function repo(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-devcontainer-'));
  for (const [name, text] of Object.entries(files)) {
    const file = join(dir, name);
    await mkdir(join(file, '..'), { recursive: true });
    await writeFile(file, text);
  }
  return dir;
}

describeContainers('devcontainer builds on the engine', () => {
  let s: TestServer;
  const url = () => s.url;
  const admin = client(url, BOOTSTRAP);
  const berth = (...args: string[]) => runBerth(args, { BERTH_URL: s.url, BERTH_TOKEN: BOOTSTRAP });
  const untilStatus = (name: string, status: string) =>
    poll(
      `template ${name} to be ${status}`,
      async () => {
        const { template } = (await admin.get(`/v1/templates/${name}`)).body;
        return template.status === status ? template : undefined;
      },
      { timeout: 120_000 },
    );

  beforeAll(async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-builds-'));
    const templates = await writeCatalog(dir, [{ name: 'plain', image: TEST_IMAGE }], [{ name: 'nohot', hotNodes: 0, maxQueued: 10 }]);
    s = await startServer('pglite', { DOCKER_HOST: engine(), TEMPLATES_FILE: templates });
  });
  afterAll(() => s?.stop());

  it('builds a Dockerfile FROM a local image with args, a target and a file of the context, then leases run in the built image', async () => {
    const dir = await repo({
      '.devcontainer/devcontainer.json': JSON.stringify({
        build: { dockerfile: 'Dockerfile', context: '..', args: { GREETING: 'hello from the build' }, target: 'final' },
        workspaceFolder: '/opt',
      }),
      '.devcontainer/Dockerfile': [
        '# a comment, then a multi-stage build',
        `FROM ${TEST_IMAGE} AS base`,
        'ARG GREETING',
        'ENV GREETING=$GREETING \\',
        '    STAGE=base',
        'COPY app.txt /opt/app.txt',
        `FROM ${TEST_IMAGE} AS final`,
        'COPY --from=base /opt/app.txt /opt/copied.txt',
        'ENV STAGE=final',
      ].join('\n'),
      'app.txt': 'from the context\n',
    });
    const pushed = await berth('template', 'push', 'built', '--devcontainer', dir);
    expect(pushed.code, pushed.stderr).toBe(0);
    expect(pushed.stdout).toMatch(/built: version 1, made, (building|ready)/);
    const template = await untilStatus('built', 'ready');
    expect(template.image).toMatch(/^localhost\/berth-build\//);
    const log = await berth('template', 'get', 'built', '--log');
    expect(log.code).toBe(0);
    expect(log.stdout).toMatch(/==> the built-in node: ready/);

    const lease = await admin.post('/v1/environments', { template: 'built' });
    expect(lease.status).toBe(202);
    await untilState(s, BOOTSTRAP, lease.body.environment.id, 'ready');
    const ran = await berthExec(s.url, BOOTSTRAP, lease.body.environment.name, 'sh', '-c', 'cat /opt/copied.txt; echo "$STAGE"; pwd');
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toBe('from the context\nfinal\n/opt\n');
    await admin.del(`/v1/environments/${lease.body.environment.id}`);

    // The same inputs again: a new version, the image already there.
    const again = await berth('template', 'push', 'built', '--devcontainer', dir);
    expect(again.stdout).toMatch(/built: version 2, changed/);
    expect((await untilStatus('built', 'ready')).image).toBe(template.image);

    // Other inputs: another image; the old one goes from the node, and the new one once the template does.
    await writeFile(join(dir, 'app.txt'), 'changed\n');
    expect((await berth('template', 'push', 'built', '--devcontainer', dir)).stdout).toMatch(/built: version 3, changed/);
    const changed = await untilStatus('built', 'ready');
    expect(changed.image).not.toBe(template.image);
    const held = (image: string) => () =>
      podman('image', 'exists', image).then(
        () => true,
        () => false,
      );
    await poll(`${template.image} to be removed`, async () => ((await held(template.image)()) ? undefined : true));
    expect(await held(changed.image)()).toBe(true);
    expect((await berth('template', 'rm', 'built')).code).toBe(0);
    await poll(`${changed.image} to be removed`, async () => ((await held(changed.image)()) ? undefined : true));
  });

  it("runs a Dockerfile's RUN steps only where the engine isolates them from the node's network", async () => {
    const dir = await repo({
      '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
      '.devcontainer/Dockerfile': `FROM ${TEST_IMAGE}\nRUN ip -o link | grep -vc " lo:" > /links || true\n`,
    });
    expect((await berth('template', 'push', 'runs', '--devcontainer', dir)).code).toBe(0);
    const template = await poll(
      'the build of runs to end',
      async () => {
        const { template } = (await admin.get('/v1/templates/runs')).body;
        return template.status === 'building' ? undefined : template;
      },
      { timeout: 120_000 },
    );
    if (template.status === 'ready') {
      // An engine that isolates build steps (Docker's): the step saw loopback only.
      const lease = await admin.post('/v1/environments', { template: 'runs' });
      await untilState(s, BOOTSTRAP, lease.body.environment.id, 'ready');
      const ran = await berthExec(s.url, BOOTSTRAP, lease.body.environment.name, 'cat', '/links');
      expect(ran.stdout).toBe('0\n');
      await admin.del(`/v1/environments/${lease.body.environment.id}`);
    } else {
      // Podman 4's build API runs build steps on the host's network: the step never ran.
      expect(template.error).toMatch(/runs build steps on the node's network/);
      expect((await admin.get('/v1/templates/runs/log')).body).toMatch(/only Dockerfiles without RUN steps/);
    }
  });

  it('refuses a Dockerfile that fetches a source by URL', async () => {
    const dir = await repo({
      '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
      '.devcontainer/Dockerfile': `FROM ${TEST_IMAGE}\nADD http://127.0.0.1:9/x /x\n`,
    });
    const pushed = await berth('template', 'push', 'fetches', '--devcontainer', dir);
    expect(pushed.code).not.toBe(0);
    expect(pushed.stderr).toContain('devcontainer.build.dockerfile');
    expect((await admin.get('/v1/templates/fetches')).status).toBe(404);
  });

  it('fails the template when its build fails: the log says why and leases are refused', async () => {
    const dir = await repo({
      '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
      '.devcontainer/Dockerfile': `FROM ${TEST_IMAGE}\nCOPY not-in-the-context.txt /x\n`,
    });
    expect((await berth('template', 'push', 'broken', '--devcontainer', dir)).code).toBe(0);
    const template = await untilStatus('broken', 'failed');
    expect(template.error).toMatch(/did not build on the built-in node/);
    const log = (await admin.get('/v1/templates/broken/log')).body as string;
    expect(log).toContain('not-in-the-context.txt');
    expect(await admin.post('/v1/environments', { template: 'broken' })).toMatchObject({ status: 409, body: { code: 'conflict' } });
    const shown = await berth('template', 'get', 'broken');
    expect(shown.stdout).toMatch(/status\s+failed/);

    // The console's template page shows the same: status, version, the warnings and the build log.
    const browser = await launchBrowser();
    try {
      const { page, problems } = await openConsole(browser, s.url);
      await signIn(page, BOOTSTRAP);
      await page.goto('/templates/broken');
      await page.getByRole('heading', { level: 1, name: 'Template broken' }).waitFor();
      const field = (name: string) =>
        page
          .locator('dl.fields > div')
          .filter({ has: page.getByRole('term').getByText(name, { exact: true }) })
          .getByRole('definition');
      await page.getByText(/^failed: the image did not build on the built-in node/).waitFor();
      expect(await field('Version').textContent()).toBe("1 (the organization's own)");
      await page.getByRole('heading', { name: 'Build log' }).waitFor();
      expect(await page.locator('pre').textContent()).toContain('not-in-the-context.txt');
      await screenshot(page, 'template-build-failed');
      expect(problems).toEqual([]);
    } finally {
      await browser.close();
    }

    // A base image the engine does not have is not pulled: the build fails saying so.
    const missing = await repo({
      '.devcontainer/devcontainer.json': '{ "build": { "dockerfile": "Dockerfile" } }',
      '.devcontainer/Dockerfile': 'FROM localhost/berth-test/not-there:1\n',
    });
    await berth('template', 'push', 'missing-base', '--devcontainer', missing);
    expect((await untilStatus('missing-base', 'failed')).error).toBeTruthy();
  });

  it('keeps a lease pending, naming the build, while no node of its pool has built the image', async () => {
    const dir = await repo({
      '.devcontainer/devcontainer.json': JSON.stringify({
        build: { dockerfile: 'Dockerfile' },
        customizations: { berth: { pool: 'nohot' } },
      }),
      '.devcontainer/Dockerfile': `FROM ${TEST_IMAGE}\n`,
    });
    const contexts = async () => {
      const keys: string[] = [];
      for await (const blob of s.app.deps.store.list('templates/')) keys.push(blob.name);
      return keys.sort();
    };
    const before = await contexts();
    expect((await berth('template', 'push', 'waits', '--devcontainer', dir)).code).toBe(0);
    expect((await contexts()).length).toBe(before.length + 1);
    expect((await admin.get('/v1/templates/waits')).body.template.status).toBe('building');
    const lease = await admin.post('/v1/environments', { template: 'waits' });
    expect(lease.status).toBe(202);
    expect(lease.body.environment).toMatchObject({
      state: 'pending',
      waiting: expect.stringContaining('template waits version 1: its image is building'),
    });
    await s.app.deps.background.tick();
    expect((await admin.get(`/v1/environments/${lease.body.environment.id}`)).body).toMatchObject({
      state: 'pending',
      waiting: expect.stringContaining('its image is building'),
    });
    await admin.del(`/v1/environments/${lease.body.environment.id}`);
    expect((await berth('template', 'rm', 'waits')).stdout).toContain('waits: removed');
    // Its build context went with it.
    expect(await contexts()).toEqual(before);
  });
});
