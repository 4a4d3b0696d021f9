import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../src/kernel/errors';
import { type Catalog, loadCatalog, parseCatalog, validateHostPort, validateTemplateSpec } from '../src/modules/templates/catalog';

const HOUR = 3_600_000;

function base(): any {
  return {
    pools: [
      { name: 'default', hotNodes: 4, maxQueued: 100 },
      { name: 'large', hotNodes: 2, maxQueued: 10 },
    ],
    templates: [
      {
        name: 'default',
        description: 'Debian 12 (bookworm), slim; no network beyond loopback',
        pool: 'default',
        startMs: 200,
        idle: '30m',
        hard: '6h',
        shares: [
          { name: 'src', direction: 'in', envPath: '/workspace/src' },
          { name: 'out', direction: 'out', envPath: '/workspace/out' },
        ],
        services: [{ service: 'postgres', target: '127.0.0.1:5432' }],
        image: 'docker.io/library/debian:bookworm-slim',
        resources: { cpus: 1, memory: '2GiB', pids: 1024, disk: '8GiB' },
        network: 'none',
        workdir: '/workspace/src',
      },
      { name: 'big', pool: 'large', idle: '1h', hard: '24h' },
    ],
  };
}

function errorOf(json: unknown): ValidationError {
  try {
    parseCatalog(json, 'templates.json');
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return err as ValidationError;
  }
  throw new Error('expected a ValidationError');
}

describe('parseCatalog with a valid catalog', () => {
  it('parses pools and templates, adding idleMs/hardMs and defaults', () => {
    const catalog: Catalog = parseCatalog(base(), 'templates.json');
    expect(catalog.pools).toEqual([
      { name: 'default', hotNodes: 4, maxQueued: 100 },
      { name: 'large', hotNodes: 2, maxQueued: 10 },
    ]);
    expect(catalog.templates[0]).toEqual({
      name: 'default',
      description: 'Debian 12 (bookworm), slim; no network beyond loopback',
      pool: 'default',
      startMs: 200,
      idle: '30m',
      hard: '6h',
      idleMs: 30 * 60_000,
      hardMs: 6 * HOUR,
      shares: [
        { name: 'src', direction: 'in', envPath: '/workspace/src' },
        { name: 'out', direction: 'out', envPath: '/workspace/out' },
      ],
      services: [{ service: 'postgres', target: '127.0.0.1:5432' }],
      image: 'docker.io/library/debian:bookworm-slim',
      resources: { cpus: 1, memory: '2GiB', pids: 1024, disk: '8GiB' },
      network: 'none',
      workdir: '/workspace/src',
      shell: '/bin/sh',
      env: {},
      warm: 0,
      lifecycle: [],
    });
    expect(catalog.templates[1]).toEqual({
      name: 'big',
      pool: 'large',
      startMs: 0,
      idle: '1h',
      hard: '24h',
      idleMs: HOUR,
      hardMs: 24 * HOUR,
      shares: [],
      services: [],
      resources: {},
      network: 'none',
      workdir: '/',
      shell: '/bin/sh',
      env: {},
      warm: 0,
      lifecycle: [],
    });
    expect(catalog.templates[1]).not.toHaveProperty('image');
  });

  it('accepts optional fields and normalises envPath', () => {
    const json = base();
    json.$schema = './templates.schema.json';
    json.templates[0].description = 'The default';
    json.templates[0].shares[0].envPath = '/workspace//src/';
    json.templates[0].hard = '1h0m0s';
    json.templates[0].idle = '1h'; // idle may equal hard
    json.pools[0].hotNodes = 0;
    json.pools[0].maxQueued = 0;
    const catalog = parseCatalog(json, 'x.json');
    expect(catalog.templates[0].description).toBe('The default');
    expect(catalog.templates[0].workdir).toBe('/workspace/src');
    expect(catalog.templates[0].shares[0].envPath).toBe('/workspace/src');
    expect(catalog.templates[0].hardMs).toBe(HOUR);
    expect(catalog.pools[0].hotNodes).toBe(0);
  });

  it('allows an empty template list and sibling envPaths with a common prefix', () => {
    expect(parseCatalog({ pools: [{ name: 'p', hotNodes: 1, maxQueued: 1 }], templates: [] }, 't').templates).toEqual([]);
    const json = base();
    json.templates[0].shares[1].envPath = '/workspace/src2';
    expect(() => parseCatalog(json, 't')).not.toThrow();
  });

  it('accepts every kind of service target', () => {
    for (const target of ['127.0.0.1:5432', 'localhost:80', 'db.internal:65535', '[::1]:6379', '[fe80::1]:1', 'my-host:8080']) {
      expect(validateHostPort(target, 't')).toBe(target);
    }
  });
});

describe('runtime fields', () => {
  const imageOf = (image: string) => {
    const json = base();
    json.templates[1].image = image;
    return parseCatalog(json, 't').templates[1]!.image;
  };

  it('stores images normalised as Docker does', () => {
    const digest = `sha256:${'a'.repeat(64)}`;
    const cases: [string, string][] = [
      ['node:20', 'docker.io/library/node:20'],
      ['busybox', 'docker.io/library/busybox:latest'],
      ['docker.io/library/node:20-bookworm', 'docker.io/library/node:20-bookworm'],
      ['docker.io/node', 'docker.io/library/node:latest'],
      ['index.docker.io/library/node:20', 'docker.io/library/node:20'],
      ['grafana/grafana:11.1', 'docker.io/grafana/grafana:11.1'],
      ['localhost/ci:3', 'localhost/ci:3'],
      ['localhost:5000/team/ci', 'localhost:5000/team/ci:latest'],
      ['ghcr.io/org/tool_x.y/sub-dir:v1.2_3', 'ghcr.io/org/tool_x.y/sub-dir:v1.2_3'],
      [`busybox@${digest}`, `docker.io/library/busybox@${digest}`],
      [`quay.io/a/b:1@${digest}`, `quay.io/a/b:1@${digest}`],
    ];
    for (const [given, stored] of cases) expect(imageOf(given), given).toBe(stored);
  });

  it('applies the defaults and keeps sizes as written', () => {
    const json = base();
    json.templates[1].resources = { memory: '1.5GiB', disk: '512MiB' };
    json.templates[1].workdir = '/work//dir/';
    json.templates[1].env = { PATH: '/usr/bin', _x1: '' };
    json.templates[1].network = 'egress';
    const t = parseCatalog(json, 't').templates[1]!;
    expect(t).toMatchObject({
      resources: { memory: '1.5GiB', disk: '512MiB' },
      workdir: '/work/dir',
      env: { PATH: '/usr/bin', _x1: '' },
      network: 'egress',
    });
    expect(Object.keys(t.resources)).toEqual(['memory', 'disk']);
    json.templates[1].workdir = '/';
    json.templates[1].resources = { cpus: 0.1, memory: '6MiB', pids: 16, disk: '1MiB' };
    expect(parseCatalog(json, 't').templates[1]).toMatchObject({ workdir: '/', resources: { cpus: 0.1, pids: 16 } });
    json.templates[1].resources = { cpus: 64, memory: '1TiB', pids: 1_000_000, disk: '64TiB' };
    expect(parseCatalog(json, 't').templates[1]!.resources.cpus).toBe(64);
  });

  it('allows env up to 4 KiB in all, names + values + 2 bytes each', () => {
    const json = base();
    json.templates[1].env = { A: 'x'.repeat(4096 - 3) };
    expect(parseCatalog(json, 't').templates[1]!.env.A).toHaveLength(4093);
    json.templates[1].env = { A: 'x'.repeat(4096 - 2) };
    expect(errorOf(json).message).toBe('templates.json: templates[1].env: holds 4097 bytes (names + values + 2 each); at most 4096 bytes');
  });
});

type Mutation = (json: any) => void;

describe('parseCatalog errors name the field path', () => {
  const cases: [string, Mutation, string | RegExp][] = [
    ['hard over 24h', (j) => (j.templates[1].hard = '25h'), 'templates.json: templates[1].hard: "25h" exceeds the 24h maximum'],
    ['hard of 2 days', (j) => (j.templates[1].hard = '2d'), 'templates.json: templates[1].hard: "2d" exceeds the 24h maximum'],
    ['negative hotNodes', (j) => (j.pools[0].hotNodes = -1), 'templates.json: pools[0].hotNodes: must be an integer >= 0'],
    ['fractional hotNodes', (j) => (j.pools[1].hotNodes = 1.5), 'templates.json: pools[1].hotNodes: must be an integer >= 0'],
    ['string hotNodes', (j) => (j.pools[0].hotNodes = '4'), 'templates.json: pools[0].hotNodes: must be an integer >= 0'],
    ['huge hotNodes', (j) => (j.pools[0].hotNodes = 1e9), 'templates.json: pools[0].hotNodes: must be at most 10000'],
    ['missing maxQueued', (j) => delete j.pools[0].maxQueued, 'templates.json: pools[0].maxQueued: is required'],
    ['negative maxQueued', (j) => (j.pools[0].maxQueued = -5), 'templates.json: pools[0].maxQueued: must be an integer >= 0'],
    [
      'duplicate pool',
      (j) => (j.pools[1].name = 'default'),
      /^templates\.json: pools\[1\]\.name: duplicate pool name "default" \(also pools\[0\]\)$/,
    ],
    ['bad pool name', (j) => (j.pools[0].name = 'Default'), /^templates\.json: pools\[0\]\.name: "Default" is not a valid name/],
    ['unknown pool field', (j) => (j.pools[0].hotnodes = 3), /^templates\.json: pools\[0\]\.hotnodes: unknown field/],
    ['no pools', (j) => (j.pools = []), 'templates.json: pools: at least one pool is needed'],
    ['pools not an array', (j) => (j.pools = {}), 'templates.json: pools: must be an array'],
    ['missing pools', (j) => delete j.pools, 'templates.json: pools: is required'],
    ['missing templates', (j) => delete j.templates, 'templates.json: templates: is required'],
    ['unknown top-level field', (j) => (j.tempaltes = []), /^templates\.json: tempaltes: unknown field/],
    ['pool is not an object', (j) => (j.pools[0] = 'default'), /^templates\.json: pools\[0\]: must be an object/],
    ['template is not an object', (j) => (j.templates[1] = null), /^templates\.json: templates\[1\]: must be an object/],
    [
      'unknown pool reference',
      (j) => (j.templates[1].pool = 'gpu'),
      'templates.json: templates[1].pool: unknown pool "gpu" (pools: default, large)',
    ],
    ['missing pool', (j) => delete j.templates[1].pool, 'templates.json: templates[1].pool: is required'],
    [
      'duplicate template',
      (j) => (j.templates[1].name = 'default'),
      /^templates\.json: templates\[1\]\.name: duplicate template name "default"/,
    ],
    ['missing template name', (j) => delete j.templates[0].name, 'templates.json: templates[0].name: is required'],
    [
      'bad template name',
      (j) => (j.templates[0].name = 'my template'),
      /^templates\.json: templates\[0\]\.name: "my template" is not a valid name/,
    ],
    ['template named *', (j) => (j.templates[0].name = '*'), /^templates\.json: templates\[0\]\.name: "\*" is not a valid name/],
    [
      'unknown template field',
      (j) => (j.templates[0].hrad = '6h'),
      /^templates\.json: templates\[0\]\.hrad: unknown field \(expected name, description, pool/,
    ],
    ['negative startMs', (j) => (j.templates[0].startMs = -1), 'templates.json: templates[0].startMs: must be an integer >= 0'],
    ['fractional startMs', (j) => (j.templates[0].startMs = 0.5), 'templates.json: templates[0].startMs: must be an integer >= 0'],
    ['string startMs', (j) => (j.templates[0].startMs = '200'), 'templates.json: templates[0].startMs: must be an integer >= 0'],
    [
      'bad idle',
      (j) => (j.templates[0].idle = '30 minutes'),
      /^templates\.json: templates\[0\]\.idle: "30 minutes" is not a valid duration/,
    ],
    ['numeric idle', (j) => (j.templates[0].idle = 1800), /^templates\.json: templates\[0\]\.idle: must be a duration string/],
    ['zero idle', (j) => (j.templates[0].idle = '0s'), 'templates.json: templates[0].idle: "0s" must be longer than 0s'],
    ['missing hard', (j) => delete j.templates[0].hard, 'templates.json: templates[0].hard: is required'],
    [
      'idle over hard',
      (j) => (j.templates[0].idle = '7h'),
      'templates.json: templates[0].idle: "7h" exceeds hard "6h"; idle must be at most hard',
    ],
    [
      'description too long',
      (j) => (j.templates[0].description = 'x'.repeat(501)),
      'templates.json: templates[0].description: must be at most 500 characters',
    ],
    ['shares not an array', (j) => (j.templates[0].shares = { src: 'in' }), 'templates.json: templates[0].shares: must be an array'],
    [
      'duplicate share',
      (j) => (j.templates[0].shares[1].name = 'src'),
      'templates.json: templates[0].shares[1].name: duplicate share name "src" (also shares[0])',
    ],
    [
      'bad share name',
      (j) => (j.templates[0].shares[1].name = '../x'),
      /^templates\.json: templates\[0\]\.shares\[1\]\.name: "\.\.\/x" is not a valid name/,
    ],
    [
      'bad direction',
      (j) => (j.templates[0].shares[0].direction = 'both'),
      'templates.json: templates[0].shares[0].direction: must be "in" or "out" (got "both")',
    ],
    [
      'missing direction',
      (j) => delete j.templates[0].shares[0].direction,
      'templates.json: templates[0].shares[0].direction: is required',
    ],
    [
      'relative envPath',
      (j) => (j.templates[0].shares[0].envPath = 'workspace/src'),
      'templates.json: templates[0].shares[0].envPath: "workspace/src" must be an absolute path',
    ],
    [
      'envPath with ..',
      (j) => (j.templates[0].shares[0].envPath = '/workspace/../etc'),
      'templates.json: templates[0].shares[0].envPath: "/workspace/../etc" must not contain ".."',
    ],
    [
      'root envPath',
      (j) => (j.templates[0].shares[0].envPath = '/'),
      'templates.json: templates[0].shares[0].envPath: must not be the root folder "/"',
    ],
    [
      'envPath with NUL',
      (j) => (j.templates[0].shares[0].envPath = '/a\u0000b'),
      /^templates\.json: templates\[0\]\.shares\[0\]\.envPath: .* must not contain control characters/,
    ],
    [
      'same envPath',
      (j) => (j.templates[0].shares[1].envPath = '/workspace/src/'),
      'templates.json: templates[0].shares[1].envPath: "/workspace/src" is also the envPath of shares[0]',
    ],
    [
      'nested envPath',
      (j) => (j.templates[0].shares[1].envPath = '/workspace/src/out'),
      /^templates\.json: templates\[0\]\.shares\[1\]\.envPath: "\/workspace\/src\/out" and shares\[0\]\.envPath "\/workspace\/src" are nested/,
    ],
    [
      'enclosing envPath',
      (j) => (j.templates[0].shares[1].envPath = '/workspace'),
      /^templates\.json: templates\[0\]\.shares\[1\]\.envPath: "\/workspace" and shares\[0\]\.envPath "\/workspace\/src" are nested/,
    ],
    [
      'unknown share field',
      (j) => (j.templates[0].shares[0].localPath = '.'),
      /^templates\.json: templates\[0\]\.shares\[0\]\.localPath: unknown field/,
    ],
    ['services not an array', (j) => (j.templates[0].services = 'postgres'), 'templates.json: templates[0].services: must be an array'],
    [
      'duplicate service',
      (j) => j.templates[0].services.push({ service: 'postgres', target: '127.0.0.1:5433' }),
      'templates.json: templates[0].services[1].service: duplicate service "postgres" (also services[0])',
    ],
    ['missing target', (j) => delete j.templates[0].services[0].target, 'templates.json: templates[0].services[0].target: is required'],
    [
      'uppercase image',
      (j) => (j.templates[0].image = 'Node:20'),
      'templates.json: templates[0].image: "Node:20" must be lowercase in its repository name',
    ],
    [
      'image with a bad tag',
      (j) => (j.templates[0].image = 'node:-20'),
      /^templates\.json: templates\[0\]\.image: "node:-20" has an invalid tag/,
    ],
    [
      'image with a short digest',
      (j) => (j.templates[0].image = 'busybox@sha256:abc'),
      'templates.json: templates[0].image: "busybox@sha256:abc" has a digest that is not "sha256:" and 64 lowercase hex digits',
    ],
    [
      'image with a URL scheme',
      (j) => (j.templates[0].image = 'https://docker.io/node'),
      /^templates\.json: templates\[0\]\.image: "https:\/\/docker\.io\/node" is not an image reference/,
    ],
    ['image with a space', (j) => (j.templates[0].image = 'node 20'), /^templates\.json: templates\[0\]\.image: "node 20" is not an image/],
    ['empty image', (j) => (j.templates[0].image = ''), /^templates\.json: templates\[0\]\.image: must not be empty/],
    [
      'long image',
      (j) => (j.templates[0].image = `a${'/b'.repeat(130)}`),
      'templates.json: templates[0].image: is longer than 255 characters',
    ],
    ['numeric image', (j) => (j.templates[0].image = 20), 'templates.json: templates[0].image: must be a string'],
    [
      'bad memory',
      (j) => (j.templates[0].resources.memory = '12XB'),
      'templates.json: templates[0].resources.memory: "12XB" is not a size such as "512MiB" or "8GiB"',
    ],
    [
      'decimal units',
      (j) => (j.templates[0].resources.memory = '4GB'),
      'templates.json: templates[0].resources.memory: "4GB" is not a size such as "512MiB" or "8GiB"',
    ],
    [
      'numeric memory',
      (j) => (j.templates[0].resources.memory = 4096),
      'templates.json: templates[0].resources.memory: must be a size string such as "512MiB" or "8GiB"',
    ],
    [
      'small memory',
      (j) => (j.templates[0].resources.memory = '5MiB'),
      'templates.json: templates[0].resources.memory: "5MiB" is less than the 6MiB minimum',
    ],
    [
      'huge memory',
      (j) => (j.templates[0].resources.memory = '1.5TiB'),
      'templates.json: templates[0].resources.memory: "1.5TiB" exceeds the 1TiB maximum',
    ],
    [
      'small disk',
      (j) => (j.templates[0].resources.disk = '1023KiB'),
      'templates.json: templates[0].resources.disk: "1023KiB" is less than the 1MiB minimum',
    ],
    [
      'huge disk',
      (j) => (j.templates[0].resources.disk = '65TiB'),
      'templates.json: templates[0].resources.disk: "65TiB" exceeds the 64TiB maximum',
    ],
    [
      'fraction of a byte',
      (j) => (j.templates[0].resources.disk = '0.5B'),
      'templates.json: templates[0].resources.disk: "0.5B" is not a whole number of bytes',
    ],
    [
      'zero cpus',
      (j) => (j.templates[0].resources.cpus = 0),
      'templates.json: templates[0].resources.cpus: must be a number from 0.1 to 64',
    ],
    [
      'many cpus',
      (j) => (j.templates[0].resources.cpus = 65),
      'templates.json: templates[0].resources.cpus: must be a number from 0.1 to 64',
    ],
    [
      'string cpus',
      (j) => (j.templates[0].resources.cpus = '2'),
      'templates.json: templates[0].resources.cpus: must be a number from 0.1 to 64',
    ],
    ['few pids', (j) => (j.templates[0].resources.pids = 15), 'templates.json: templates[0].resources.pids: must be an integer >= 16'],
    [
      'many pids',
      (j) => (j.templates[0].resources.pids = 1_000_001),
      'templates.json: templates[0].resources.pids: must be at most 1000000',
    ],
    [
      'fractional pids',
      (j) => (j.templates[0].resources.pids = 100.5),
      'templates.json: templates[0].resources.pids: must be an integer >= 16',
    ],
    [
      'unknown resource',
      (j) => (j.templates[0].resources.gpus = 1),
      'templates.json: templates[0].resources.gpus: unknown field (expected cpus, memory, pids, disk)',
    ],
    [
      'resources not an object',
      (j) => (j.templates[0].resources = '2cpu'),
      /^templates\.json: templates\[0\]\.resources: must be an object/,
    ],
    [
      'bad network',
      (j) => (j.templates[0].network = 'host'),
      'templates.json: templates[0].network: must be "none" or "egress" (got "host")',
    ],
    ['relative workdir', (j) => (j.templates[0].workdir = 'src'), 'templates.json: templates[0].workdir: "src" must be an absolute path'],
    [
      'workdir with ..',
      (j) => (j.templates[0].workdir = '/a/../b'),
      'templates.json: templates[0].workdir: "/a/../b" must not contain ".."',
    ],
    [
      'workdir with a control character',
      (j) => (j.templates[0].workdir = '/a\nb'),
      /^templates\.json: templates\[0\]\.workdir: .* must not contain control characters/,
    ],
    ['env not an object', (j) => (j.templates[0].env = ['A=1']), /^templates\.json: templates\[0\]\.env: must be an object/],
    [
      'bad variable name',
      (j) => (j.templates[0].env = { '1A': 'x' }),
      /^templates\.json: templates\[0\]\.env\.1A: "1A" is not a variable name/,
    ],
    [
      'variable name with a dash',
      (j) => (j.templates[0].env = { 'MY-VAR': 'x' }),
      /^templates\.json: templates\[0\]\.env\.MY-VAR: "MY-VAR" is not a variable name/,
    ],
    ['numeric variable', (j) => (j.templates[0].env = { PORT: 3000 }), 'templates.json: templates[0].env.PORT: must be a string'],
    [
      'variable with NUL',
      (j) => (j.templates[0].env = { A: 'a\u0000b' }),
      'templates.json: templates[0].env.A: must not contain NUL characters',
    ],
    [
      'env over 4 KiB',
      (j) => (j.templates[0].env = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`VAR_${i}`, 'x'.repeat(40)]))),
      /^templates\.json: templates\[0\]\.env: holds \d+ bytes \(names \+ values \+ 2 each\); at most 4096 bytes$/,
    ],
  ];
  it.each(cases)('%s', (_name, mutate, expected) => {
    const json = base();
    mutate(json);
    const err = errorOf(json);
    if (typeof expected === 'string') expect(err.message).toBe(expected);
    else expect(err.message).toMatch(expected);
    expect(err.code).toBe('invalid');
  });

  it('refuses a catalog that is not an object', () => {
    expect(errorOf([]).message).toMatch(/^templates\.json: must be an object/);
    expect(errorOf(null).message).toMatch(/^templates\.json: must be an object/);
  });

  const badTargets = [
    '127.0.0.1',
    '5432',
    ':5432',
    '127.0.0.1:',
    '127.0.0.1:0',
    '127.0.0.1:65536',
    '127.0.0.1:05432',
    '127.0.0.1:54a',
    '::1:5432',
    '[::1]',
    '[zz::1]:5432',
    '[127.0.0.1]:80',
    '999.1.1.1:80',
    '1.2.3:80',
    'bad_host:80',
    '-host:80',
    'host-:80',
    'a..b:80',
    'http://db:5432',
    'db:5432/x',
    ' db:5432',
  ];
  it.each(badTargets)('refuses the service target %j', (target) => {
    const json = base();
    json.templates[0].services[0].target = target;
    expect(errorOf(json).message).toMatch(/^templates\.json: templates\[0\]\.services\[0\]\.target: .*(host:port|ports are 1-65535)/);
  });
});

describe('validateTemplateSpec (admin upsert)', () => {
  const body = {
    pool: 'default',
    startMs: 100,
    idle: '10m',
    hard: '1h',
    shares: [{ name: 'src', direction: 'in', envPath: '/w/src' }],
  };

  it('takes the name from the path', () => {
    expect(validateTemplateSpec(body, 'custom', ['default'])).toEqual({
      name: 'custom',
      pool: 'default',
      startMs: 100,
      idle: '10m',
      hard: '1h',
      idleMs: 600_000,
      hardMs: HOUR,
      shares: [{ name: 'src', direction: 'in', envPath: '/w/src' }],
      services: [],
      resources: {},
      network: 'none',
      workdir: '/',
      shell: '/bin/sh',
      env: {},
      warm: 0,
      lifecycle: [],
    });
    expect(validateTemplateSpec({ ...body, name: 'custom' }, 'custom', ['default']).name).toBe('custom');
  });

  const cases: [string, unknown, string, string | RegExp][] = [
    ['a name that differs from the path', { ...body, name: 'other' }, 'custom', 'name: "other" does not match the template name "custom"'],
    ['a bad path name', body, 'Bad Name', /^name: "Bad Name" is not a valid name/],
    ['an unknown pool', { ...body, pool: 'gpu' }, 'custom', 'pool: unknown pool "gpu" (pools: default)'],
    ['hard over 24h', { ...body, hard: '24h0m1s' }, 'custom', 'hard: "24h0m1s" exceeds the 24h maximum'],
    [
      'a bad envPath',
      { ...body, shares: [{ name: 'src', direction: 'in', envPath: 'rel' }] },
      'custom',
      'shares[0].envPath: "rel" must be an absolute path',
    ],
    ['an unknown field', { ...body, hotNodes: 3 }, 'custom', /^hotNodes: unknown field/],
    ['a non-object body', 'x', 'custom', /^must be an object/],
    ['a bad image', { ...body, image: 'UPPER' }, 'custom', 'image: "UPPER" must be lowercase in its repository name'],
    [
      'a bad memory',
      { ...body, resources: { memory: '1 GiB' } },
      'custom',
      'resources.memory: "1 GiB" is not a size such as "512MiB" or "8GiB"',
    ],
    ['a bad network', { ...body, network: 'all' }, 'custom', 'network: must be "none" or "egress" (got "all")'],
    ['a bad env', { ...body, env: { 'A B': '1' } }, 'custom', /^env\.A B: "A B" is not a variable name/],
  ];
  it.each(cases)('refuses %s with a field relative to the body', (_name, input, name, expected) => {
    let err: unknown;
    try {
      validateTemplateSpec(input, name, ['default']);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    const message = (err as ValidationError).message;
    if (typeof expected === 'string') expect(message).toBe(expected);
    else expect(message).toMatch(expected);
  });

  it('sets the error field to the path', () => {
    try {
      validateTemplateSpec({ ...body, idle: '2h' }, 'custom', ['default']);
    } catch (e) {
      expect((e as ValidationError).field).toBe('idle');
    }
    expect.assertions(1);
  });
});

describe('loadCatalog', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'berth-templates-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('loads the shipped templates.json, which has the default template as documented', async () => {
    const catalog = await loadCatalog(fileURLToPath(new URL('../templates.json', import.meta.url)));
    expect(catalog.pools.find((p) => p.name === 'default')).toEqual({ name: 'default', hotNodes: 4, maxQueued: 100 });
    const def = catalog.templates.find((t) => t.name === 'default');
    // The documented template, with no image: the shipped default holds files only, so it works
    // on a machine that reaches no registry (docs/environments.md, "Images without a registry").
    const { image: _image, description: _description, resources: _resources, ...documented } = parseCatalog(base(), 't').templates[0]!;
    expect(def).toEqual({ ...documented, resources: {}, description: expect.stringContaining('images-without-a-registry') });
    expect(def).not.toHaveProperty('image');
    expect(catalog.templates.length).toBeGreaterThanOrEqual(3);
  });

  it('prefixes errors with the file path', async () => {
    const file = path.join(dir, 'bad.json');
    const json = base();
    json.templates[1].hard = '25h';
    await writeFile(file, JSON.stringify(json));
    await expect(loadCatalog(file)).rejects.toThrow(`${file}: templates[1].hard: "25h" exceeds the 24h maximum`);
  });

  it('reports invalid JSON and missing files', async () => {
    const file = path.join(dir, 'broken.json');
    await writeFile(file, '{ "pools": [ }');
    await expect(loadCatalog(file)).rejects.toThrow(new RegExp(`^${escapeRegExp(file)}: not valid JSON`));
    await expect(loadCatalog(path.join(dir, 'missing.json'))).rejects.toThrow(/missing\.json: cannot read the templates file/);
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
