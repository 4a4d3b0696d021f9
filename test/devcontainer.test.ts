// devcontainer.json → template (src/modules/templates/devcontainer.ts): each mapping, each refusal
// with the field it names, the warnings, and that what comes out passes validateTemplateSpec.
// biome-ignore-all lint/suspicious/noTemplateCurlyInString: devcontainer.json's variables are written ${…}
import { describe, expect, it } from 'vitest';
import { validateTemplateSpec } from '../src/modules/templates/catalog';
import { type DevcontainerOptions, parseDevcontainer } from '../src/modules/templates/devcontainer';
import { thrown } from './helpers/thrown';

const POOLS = ['default', 'large'];
const OPTS: DevcontainerOptions = { name: 'app', pools: POOLS, defaultPool: 'default' };

const parse = (doc: unknown, opts: Partial<DevcontainerOptions> = {}) =>
  parseDevcontainer(typeof doc === 'string' ? doc : JSON.stringify(doc), { ...OPTS, ...opts });
/** The template as the lead's validateTemplateSpec takes it. */
const spec = (doc: unknown, opts: Partial<DevcontainerOptions> = {}) => validateTemplateSpec(parse(doc, opts).template, 'app', POOLS);
const refusal = (doc: unknown, opts: Partial<DevcontainerOptions> = {}) => thrown(() => parse(doc, opts));

describe('devcontainer.json: reading JSONC', () => {
  it('takes comments and trailing commas', () => {
    const text = `// the team's environment
{
  /* a block comment */
  "name": "My project",
  "image": "mcr.microsoft.com/devcontainers/base:bookworm", // trailing comment
  "forwardPorts": [3000, 5432,],
  "containerEnv": { "A": "1", },
}
`;
    const out = parse(text);
    expect(out.template.image).toBe('mcr.microsoft.com/devcontainers/base:bookworm');
    expect(out.warnings).toEqual([]);
    expect(validateTemplateSpec(out.template, 'app', POOLS).services.map((s) => s.target)).toEqual(['127.0.0.1:3000', '127.0.0.1:5432']);
  });

  it('takes a byte order mark', () => {
    expect(parse('\uFEFF{"image": "debian:12"}').template.image).toBe('debian:12');
  });

  it('names devcontainer.json with line:column when it does not parse', () => {
    const err = refusal('{\n  "image": "debian",\n  "x" 1\n}');
    expect(err.field).toBe('devcontainer.json');
    expect(err.message).toMatch(/^devcontainer\.json:3:7: colon expected/);
    expect(refusal('').message).toMatch(/^devcontainer\.json:1:1: /);
    expect(refusal('{"image": "a"} extra').message).toMatch(/^devcontainer\.json:1:16: /);
  });

  it('refuses what is no object, too deep or too long', () => {
    expect(refusal('["image"]').message).toBe('devcontainer.json: must be a JSON object');
    const deep = `{"a": ${'['.repeat(100)}${']'.repeat(100)}}`;
    expect(refusal(deep)).toMatchObject({ field: 'devcontainer.json', message: expect.stringMatching(/nested deeper than 64 levels/) });
    // Brackets inside strings and comments are no nesting.
    expect(parse(`{"image": "a", "x": "${'['.repeat(100)}" /* ${'{'.repeat(100)} */}`).template.image).toBe('a');
    const long = `{"image": "a", "x": "${'y'.repeat(1024 * 1024)}"}`;
    expect(refusal(long)).toMatchObject({ field: 'devcontainer.json', message: 'devcontainer.json: is larger than 1 MiB' });
  });

  it('keeps a "__proto__" key a key', () => {
    // The object's prototype is not replaced: image is not found through it.
    const err = refusal('{"__proto__": {"image": "evil"}}');
    expect(err.field).toBe('devcontainer.image');
    expect(err.message).toMatch(/is required/);
  });
});

describe('devcontainer.json: mapping', () => {
  it('maps image, users, env, the workspace folder and resources', () => {
    const out = parse({
      image: 'node:20',
      containerUser: 'root',
      remoteUser: 'node',
      containerEnv: { A: '1', B: '2' },
      remoteEnv: { B: 'remote', C: '3' },
      workspaceFolder: '/src/app',
      hostRequirements: { cpus: 2, memory: '4gb', storage: '32GB' },
    });
    expect(out.template).toMatchObject({
      image: 'node:20',
      containerUser: 'root',
      user: 'node',
      env: { A: '1', B: 'remote', C: '3' },
      workdir: '/src/app',
      resources: { cpus: 2, memory: '4GiB', disk: '32GiB' },
      pool: 'default',
      idle: '30m',
      hard: '6h',
    });
    expect(out.build).toBeUndefined();
    expect(out.warnings).toEqual([]);
    const t = validateTemplateSpec(out.template, 'app', POOLS);
    expect(t).toMatchObject({ image: 'docker.io/library/node:20', user: 'node', containerUser: 'root', workdir: '/src/app' });
    expect(t.resources).toEqual({ cpus: 2, memory: '4GiB', disk: '32GiB' });
  });

  it('maps the size units of hostRequirements', () => {
    for (const [text, size] of [
      ['512mb', '512MiB'],
      ['1tb', '1TiB'],
      ['2048kb', '2048KiB'],
      ['1.5gb', '1.5GiB'],
      ['1073741824', '1073741824B'],
    ]) {
      expect(parse({ image: 'a', hostRequirements: { storage: text } }).template.resources).toEqual({ disk: size });
    }
  });

  it('runs commands as the containerUser when there is no remoteUser', () => {
    expect(spec({ image: 'a', containerUser: 'dev' })).toMatchObject({ user: 'dev', containerUser: 'dev' });
    expect(spec({ image: 'a' }).user).toBeUndefined();
  });

  it('puts the workspace under /workspaces/<template name> by default', () => {
    expect(spec({ image: 'a' }).workdir).toBe('/workspaces/app');
    expect(spec({ image: 'a', workspaceFolder: '/workspaces/${localWorkspaceFolderBasename}' }).workdir).toBe('/workspaces/app');
  });

  it('makes a service of each forwarded port, named from its label', () => {
    const out = parse({
      image: 'a',
      forwardPorts: [3000, 'db:5432', 8080, 9000, 3000, 9001],
      portsAttributes: {
        '3000': { label: 'Web App (dev)' },
        'db:5432': { label: 'Postgres' },
        '8080': { label: 'Web App (dev)' },
        '9001': { label: '!!!' },
      },
    });
    expect(out.template.services).toEqual([
      { service: 'web-app-dev', target: '127.0.0.1:3000' },
      { service: 'postgres', target: 'db:5432' },
      { service: 'web-app-dev-8080', target: '127.0.0.1:8080' },
      { service: 'port-9000', target: '127.0.0.1:9000' },
      { service: 'port-9001', target: '127.0.0.1:9001' },
    ]);
    expect(out.warnings).toEqual([]);
    expect(validateTemplateSpec(out.template, 'app', POOLS).services).toHaveLength(5);
  });

  it('makes a long or accented label a valid name', () => {
    const out = spec({ image: 'a', forwardPorts: [1], portsAttributes: { '1': { label: `Café ${'x'.repeat(80)}` } } });
    expect(out.services[0]!.service).toMatch(/^cafe-x+$/);
    expect(out.services[0]!.service.length).toBeLessThanOrEqual(63);
  });

  it('maps the lifecycle commands in their three forms, in phase order', () => {
    const out = parse({
      image: 'a',
      postStartCommand: ['echo', 'started'],
      postCreateCommand: { deps: 'npm ci', build: ['npm', 'run', 'build'] },
      onCreateCommand: 'echo "made in ${containerWorkspaceFolder}" > /tmp/x',
      updateContentCommand: '',
    });
    expect(out.template.lifecycle).toEqual([
      { phase: 'onCreateCommand', argv: ['/bin/sh', '-c', 'echo "made in /workspaces/app" > /tmp/x'] },
      { phase: 'postCreateCommand', name: 'deps', argv: ['/bin/sh', '-c', 'npm ci'] },
      { phase: 'postCreateCommand', name: 'build', argv: ['npm', 'run', 'build'] },
      { phase: 'postStartCommand', argv: ['echo', 'started'] },
    ]);
    expect(validateTemplateSpec(out.template, 'app', POOLS).lifecycle).toEqual(out.template.lifecycle);
    // A shell's own variables are the command's; the container's variables are the shell's.
    const shell = parse({ image: 'a', postStartCommand: 'echo ${HOME} ${containerEnv:PATH} ${containerEnv:X:none}' });
    expect(shell.template.lifecycle).toEqual([{ phase: 'postStartCommand', argv: ['/bin/sh', '-c', 'echo ${HOME} ${PATH} ${X:-none}'] }]);
    expect(shell.warnings).toEqual([]);
  });

  it("takes Berth's own settings from customizations.berth", () => {
    const out = spec({
      image: 'a',
      hostRequirements: { cpus: 1 },
      customizations: {
        berth: {
          pool: 'large',
          warm: 2,
          network: 'egress',
          idle: '10m',
          hard: '2h',
          shares: [{ name: 'src', direction: 'in', envPath: '/workspaces/app' }],
          pids: 512,
        },
      },
    });
    expect(out).toMatchObject({ pool: 'large', warm: 2, network: 'egress', idle: '10m', hard: '2h', resources: { cpus: 1, pids: 512 } });
    expect(out.shares).toEqual([{ name: 'src', direction: 'in', envPath: '/workspaces/app' }]);
    expect(spec({ image: 'a' }, { defaultPool: 'large' }).pool).toBe('large');
  });

  it('reads a build, its paths from the folder of devcontainer.json', () => {
    const out = parse(
      { build: { dockerfile: 'Dockerfile', context: '..', args: { VARIANT: '20', FROM_HOST: '${localEnv:X:dflt}' }, target: 'dev' } },
      { folder: '.devcontainer' },
    );
    expect(out.build).toEqual({
      context: '',
      dockerfile: '.devcontainer/Dockerfile',
      args: { VARIANT: '20', FROM_HOST: 'dflt' },
      target: 'dev',
    });
    expect(out.template.image).toBeUndefined();
    expect(validateTemplateSpec(out.template, 'app', POOLS).image).toBeUndefined();
    // The context defaults to the folder itself.
    expect(parse({ build: { dockerfile: 'Dockerfile' } }, { folder: '.devcontainer' }).build).toEqual({
      context: '.devcontainer',
      dockerfile: 'Dockerfile',
      args: {},
    });
    expect(parse({ build: { dockerfile: 'docker/Dockerfile', context: '.' } }).build).toMatchObject({
      context: '',
      dockerfile: 'docker/Dockerfile',
    });
  });

  it('reads the legacy dockerFile and context', () => {
    expect(parse({ dockerFile: 'Dockerfile', context: '..' }, { folder: '.devcontainer' }).build).toEqual({
      context: '',
      dockerfile: '.devcontainer/Dockerfile',
      args: {},
    });
  });

  it('checks that the Dockerfile is in the upload', () => {
    const files = new Set(['.devcontainer/Dockerfile']);
    const contextFiles = (p: string) => files.has(p);
    expect(parse({ build: { dockerfile: 'Dockerfile' } }, { folder: '.devcontainer', contextFiles }).build?.dockerfile).toBe('Dockerfile');
    const err = refusal({ build: { dockerfile: 'Containerfile' } }, { folder: '.devcontainer', contextFiles });
    expect(err).toMatchObject({
      field: 'devcontainer.build.dockerfile',
      message: expect.stringMatching(/".devcontainer\/Containerfile" is not in the upload/),
    });
  });
});

describe('devcontainer.json: refusals name the field', () => {
  const cases: [string, unknown, string, RegExp][] = [
    ['image of the wrong type', { image: 3 }, 'devcontainer.image', /^devcontainer\.image: must be a string$/],
    ['no image, no build', { name: 'x' }, 'devcontainer.image', /is required/],
    ['image and build', { image: 'a', build: { dockerfile: 'D' } }, 'devcontainer.image', /either image or build/],
    ['a bad image reference', { image: 'UPPER CASE' }, 'devcontainer.image', /^devcontainer\.image: /],
    ['build with no dockerfile', { build: { context: '.' } }, 'devcontainer.build.dockerfile', /is required/],
    ['a build that is no object', { build: 'Dockerfile' }, 'devcontainer.build', /must be an object/],
    [
      'a context out of the upload',
      { build: { dockerfile: 'D', context: '../..' } },
      'devcontainer.build.context',
      /leads out of the upload/,
    ],
    ['an absolute dockerfile', { build: { dockerfile: '/etc/D' } }, 'devcontainer.build.dockerfile', /relative/],
    [
      'a dockerfile outside the context',
      { build: { dockerfile: 'D', context: 'sub' } },
      'devcontainer.build.dockerfile',
      /outside the build context "sub"/,
    ],
    ['a build arg that is no string', { build: { dockerfile: 'D', args: { V: 20 } } }, 'devcontainer.build.args.V', /must be a string/],
    ['a bad build target', { build: { dockerfile: 'D', target: 'a b' } }, 'devcontainer.build.target', /not a build stage name/],
    ['Docker Compose', { dockerComposeFile: 'compose.yml', service: 'app' }, 'devcontainer.dockerComposeFile', /Compose is not supported/],
    [
      'features',
      { image: 'a', features: { 'ghcr.io/devcontainers/features/node:1': {} } },
      'devcontainer.features',
      /fetched from registries/,
    ],
    ['features of the wrong type', { image: 'a', features: [] }, 'devcontainer.features', /must be an object/],
    ['containerEnv not an object', { image: 'a', containerEnv: 'A=1' }, 'devcontainer.containerEnv', /must be an object/],
    ['an env value not a string', { image: 'a', containerEnv: { A: 1 } }, 'devcontainer.containerEnv.A', /must be a string/],
    ['a bad variable name', { image: 'a', remoteEnv: { '1A': 'x' } }, 'devcontainer.remoteEnv.1A', /not a variable name/],
    ['a bad remoteUser', { image: 'a', remoteUser: 'a b' }, 'devcontainer.remoteUser', /user name or uid/],
    ['a containerUser not a string', { image: 'a', containerUser: 0 }, 'devcontainer.containerUser', /must be a string/],
    ['a relative workspaceFolder', { image: 'a', workspaceFolder: 'src' }, 'devcontainer.workspaceFolder', /absolute path/],
    ['forwardPorts not an array', { image: 'a', forwardPorts: 3000 }, 'devcontainer.forwardPorts', /must be an array/],
    ['a port out of range', { image: 'a', forwardPorts: [1, 70000] }, 'devcontainer.forwardPorts[1]', /not a port/],
    ['a bad host:port', { image: 'a', forwardPorts: ['db'] }, 'devcontainer.forwardPorts[0]', /host:port/],
    [
      'a label not a string',
      { image: 'a', forwardPorts: [1], portsAttributes: { '1': { label: 1 } } },
      'devcontainer.portsAttributes.1.label',
      /must be a string/,
    ],
    ['cpus not a number', { image: 'a', hostRequirements: { cpus: '2' } }, 'devcontainer.hostRequirements.cpus', /must be a number/],
    ['too many cpus', { image: 'a', hostRequirements: { cpus: 1000 } }, 'devcontainer.hostRequirements.cpus', /from 0.1 to 64/],
    [
      'a bad memory size',
      { image: 'a', hostRequirements: { memory: '4 gigs' } },
      'devcontainer.hostRequirements.memory',
      /not a size such as "4gb"/,
    ],
    [
      'too much memory',
      { image: 'a', hostRequirements: { memory: '2tb' } },
      'devcontainer.hostRequirements.memory',
      /exceeds the 1TiB maximum/,
    ],
    [
      'a command of the wrong type',
      { image: 'a', postCreateCommand: 3 },
      'devcontainer.postCreateCommand',
      /string, an array of strings or an object/,
    ],
    ['an argv item not a string', { image: 'a', postCreateCommand: ['make', 1] }, 'devcontainer.postCreateCommand[1]', /must be a string/],
    [
      'an object command of the wrong type',
      { image: 'a', postStartCommand: { a: 1 } },
      'devcontainer.postStartCommand.a',
      /string, an array/,
    ],
    ['an unnamed object command', { image: 'a', postStartCommand: { '': 'x' } }, 'devcontainer.postStartCommand', /needs a name/],
    [
      'commands too long',
      { image: 'a', postCreateCommand: 'x'.repeat(3000) },
      'devcontainer',
      /lifecycle commands together: holds \d+ bytes/,
    ],
    ['customizations not an object', { image: 'a', customizations: [] }, 'devcontainer.customizations', /must be an object/],
    [
      'a Berth setting unknown',
      { image: 'a', customizations: { berth: { memory: '1GiB' } } },
      'devcontainer.customizations.berth.memory',
      /unknown setting/,
    ],
    [
      'an unknown pool',
      { image: 'a', customizations: { berth: { pool: 'gpu' } } },
      'devcontainer.customizations.berth.pool',
      /unknown pool "gpu"/,
    ],
    ['warm of the wrong type', { image: 'a', customizations: { berth: { warm: 'two' } } }, 'devcontainer.customizations.berth.warm', /./],
    [
      'a bad network',
      { image: 'a', customizations: { berth: { network: 'host' } } },
      'devcontainer.customizations.berth.network',
      /"none" or "egress"/,
    ],
    [
      'idle over hard',
      { image: 'a', customizations: { berth: { idle: '8h' } } },
      'devcontainer.customizations.berth.idle',
      /exceeds hard "6h"/,
    ],
    ['too few pids', { image: 'a', customizations: { berth: { pids: 1 } } }, 'devcontainer.customizations.berth.pids', /./],
    [
      'a share with a relative path',
      { image: 'a', customizations: { berth: { shares: [{ name: 's', direction: 'in', envPath: 'rel' }] } } },
      'devcontainer.customizations.berth.shares[0].envPath',
      /absolute path/,
    ],
  ];
  it.each(cases)('%s', (_what, doc, field, message) => {
    const err = refusal(doc);
    expect(err.field).toBe(field);
    expect(err.message.startsWith(`${field}: `)).toBe(true);
    expect(err.message).toMatch(message);
  });
});

describe('devcontainer.json: warnings', () => {
  it('lists every key not honoured, one line each; name and $schema are silent', () => {
    const out = parse({
      $schema: 'https://example.com/schema.json',
      name: 'x',
      image: 'a',
      runArgs: ['--privileged'],
      mounts: ['source=/,target=/host,type=bind'],
      privileged: true,
      capAdd: ['SYS_ADMIN'],
      securityOpt: ['seccomp=unconfined'],
      initializeCommand: 'make secrets',
      postAttachCommand: 'echo',
      waitFor: 'postCreateCommand',
      shutdownAction: 'none',
      overrideCommand: false,
      appPort: 3000,
      otherPortsAttributes: { onAutoForward: 'ignore' },
      hostRequirements: { gpu: 'optional', cpus: 1 },
      customizations: { vscode: { extensions: ['x'] }, codespaces: {} },
      forwardPorts: [3000],
      portsAttributes: { '3000': { label: 'web', onAutoForward: 'notify' }, '4000': { label: 'other' } },
      build: undefined,
    });
    expect(out.warnings).toEqual([
      'portsAttributes.3000.onAutoForward is not supported; ignored',
      'portsAttributes.4000 names no port of forwardPorts; ignored',
      'hostRequirements.gpu is not supported; ignored',
      'customizations.vscode is not supported; ignored',
      'customizations.codespaces is not supported; ignored',
      "initializeCommand runs on the developer's machine, which Berth does not have; ignored",
      'runArgs is not supported; ignored',
      'mounts is not supported; ignored',
      'privileged is not supported; ignored',
      'capAdd is not supported; ignored',
      'securityOpt is not supported; ignored',
      'postAttachCommand is not supported; ignored',
      'waitFor is not supported; ignored',
      'shutdownAction is not supported; ignored',
      'overrideCommand is not supported; ignored',
      'appPort is not supported; ignored',
      'otherPortsAttributes is not supported; ignored',
    ]);
    // None of them reaches the template.
    expect(Object.keys(out.template).sort()).toEqual(['hard', 'idle', 'image', 'pool', 'resources', 'services', 'workdir']);
    expect(parse({ image: 'a', features: {}, hostRequirements: { gpu: false } }).warnings).toEqual([]);
  });

  it('warns of build keys it does not use, and of context with an image', () => {
    expect(parse({ build: { dockerfile: 'D', cacheFrom: 'x', options: ['--network=host'] } }).warnings).toEqual([
      'build.cacheFrom is not supported; ignored',
      'build.options is not supported; ignored',
    ]);
    expect(parse({ image: 'a', context: '..' }).warnings).toEqual(['context is used only with dockerFile; ignored']);
  });

  it('tells what it does with variables it cannot resolve', () => {
    const out = parse({
      image: 'a',
      containerEnv: { HOME_TOOL: '${localEnv:HOME}/tool', HOST: '${localWorkspaceFolder}' },
      remoteEnv: { PATH: '${containerEnv:PATH}:/opt/bin', OK: 'yes' },
      postCreateCommand: 'echo ${devcontainerId}',
      postStartCommand: ['printenv', '${containerEnv:HOME}'],
    });
    expect(out.template.env).toEqual({ HOME_TOOL: '/tool', HOST: '${localWorkspaceFolder}', OK: 'yes' });
    expect(out.warnings).toEqual([
      `containerEnv.HOME_TOOL uses "\${localEnv:HOME}": Berth has no developer's machine; it reads as ""`,
      'containerEnv.HOST uses "${localWorkspaceFolder}", which Berth does not substitute; left as written',
      'remoteEnv.PATH uses "${containerEnv:PATH}", which Berth does not resolve; the variable is left out',
      'postCreateCommand uses "${devcontainerId}", which Berth does not substitute; left as written',
      'postStartCommand[1] uses "${containerEnv:HOME}", which Berth does not substitute; left as written',
    ]);
  });

  it('unsets a variable with a remoteEnv null', () => {
    expect(parse({ image: 'a', containerEnv: { A: '1', B: '2' }, remoteEnv: { A: null } }).template.env).toEqual({ B: '2' });
  });

  it('bounds the list: a flood of unknown keys is one line at the end', () => {
    const doc: Record<string, unknown> = { image: 'a' };
    for (let i = 0; i < 100; i++) doc[`unknown${i}`] = i;
    const { warnings } = parse(doc);
    expect(warnings).toHaveLength(33);
    expect(warnings.at(-1)).toBe('… and 68 more warnings');
    expect(parse({ image: 'a', 'odd key\n': 1 }).warnings).toEqual(['"odd key\\n" is not supported; ignored']);
  });
});
