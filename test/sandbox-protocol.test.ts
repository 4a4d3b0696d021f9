// The schemas the server and the sandbox agent share (src/protocol/sandbox-config.ts): what the
// server builds passes, what no server builds is refused with the field that is wrong.
import { describe, expect, it } from 'vitest';
import { DEFAULT_IGNORES, MAX_INCLUDE_PATTERNS, MAX_PATTERN_LENGTH } from '../src/kernel/sync-rules';
import { configProblems, JoinAnswer, MAX_EXTRA_FILES, PORT_MAX, PORT_MIN, SandboxConfig } from '../src/protocol/sandbox-config';

/** A config as sandboxConfig (src/modules/sandboxes/wiring.ts) builds it: the example of docs/sandboxes.md. */
function built(): SandboxConfig {
  return {
    sandbox: { id: 'sb_01', name: 'dev-laptop', org: 'default' },
    version: 7,
    environments: [
      {
        id: 'env_01',
        name: 'brave-otter-4821',
        state: 'ready',
        template: 'default',
        project: 'payments',
        node: 'default-2',
        imports: [{ service: 'postgres', listen: '127.0.0.1:15432', target: '127.0.0.1:5432' }],
        shares: [
          {
            name: 'src',
            direction: 'in',
            envPath: '/workspace/src',
            localPath: 'app',
            files: ['.env'],
            sync: { include: ['dist'], noIgnore: false, defaultIgnores: [...DEFAULT_IGNORES], files: { '.env': 'secrets/dev.env' } },
          },
          {
            name: 'out',
            direction: 'out',
            envPath: '/workspace/out',
            localPath: '.',
            files: [],
            sync: { include: [], noIgnore: true, defaultIgnores: [...DEFAULT_IGNORES], files: {} },
          },
        ],
      },
      { id: 'env_02', name: 'calm-heron-1234', state: 'pending', template: 'db', project: 'payments', imports: [], shares: [] },
    ],
    keyring: [{ project: 'payments', version: 1, key: Buffer.alloc(32, 7).toString('base64') }],
  };
}

type Config = SandboxConfig;

/** The problems SandboxConfig finds in the built config after `change`, or 'ok'. */
function problems(change: (config: Config) => void): string {
  const config = built();
  change(config);
  const parsed = SandboxConfig.safeParse(config);
  return parsed.success ? 'ok' : configProblems(parsed.error);
}

describe('SandboxConfig', () => {
  it('accepts what the server builds, with and without a keyring, and a removed sandbox', () => {
    expect(SandboxConfig.parse(built())).toEqual(built());
    expect(problems((c) => delete (c as Partial<Config>).keyring)).toBe('ok');
    expect(
      problems((c) => {
        c.sandbox.removed = new Date(0).toISOString();
        c.environments = [];
        c.keyring = [];
      }),
    ).toBe('ok');
    // The port range's ends, an IPv6 target and the most extra files a request may add.
    expect(
      problems((c) => {
        c.environments[0]!.imports[0]!.listen = `127.0.0.1:${PORT_MIN}`;
      }),
    ).toBe('ok');
    expect(
      problems((c) => {
        c.environments[0]!.imports[0]!.listen = `127.0.0.1:${PORT_MAX}`;
      }),
    ).toBe('ok');
    expect(
      problems((c) => {
        c.environments[0]!.imports[0]!.target = '[::1]:5432';
      }),
    ).toBe('ok');
    expect(
      problems((c) => {
        const share = c.environments[0]!.shares[0]!;
        share.files = Array.from({ length: MAX_EXTRA_FILES }, (_, i) => `f${i}`);
        share.sync.files = Object.fromEntries(share.files.map((f) => [f, `sources/${f}`]));
        share.sync.include = Array.from({ length: MAX_INCLUDE_PATTERNS }, () => 'x'.repeat(MAX_PATTERN_LENGTH));
      }),
    ).toBe('ok');
  });

  it('refuses a config no server builds, naming the field', () => {
    expect(
      problems((c) => {
        c.version = -1;
      }),
    ).toMatch(/^version: /);
    expect(
      problems((c) => {
        c.version = 1.5;
      }),
    ).toMatch(/^version: /);
    expect(
      problems((c) => {
        c.environments[0]!.state = 'stopped' as never;
      }),
    ).toMatch(/^environments\.0\.state: /);
    expect(
      problems((c) => {
        c.environments[0]!.imports[0]!.listen = '0.0.0.0:15432';
      }),
    ).toMatch(/^environments\.0\.imports\.0\.listen: must be 127\.0\.0\.1:<port>/);
    expect(
      problems((c) => {
        c.environments[0]!.imports[0]!.listen = `127.0.0.1:${PORT_MAX + 1}`;
      }),
    ).toMatch(/listen: /);
    expect(
      problems((c) => {
        c.environments[0]!.imports[0]!.target = 'postgres';
      }),
    ).toMatch(/target: must be host:port/);
    expect(
      problems((c) => {
        c.environments[0]!.shares[0]!.direction = 'both' as never;
      }),
    ).toMatch(/shares\.0\.direction: /);
    expect(
      problems((c) => {
        c.environments[0]!.shares[0]!.envPath = 'workspace';
      }),
    ).toMatch(/shares\.0\.envPath: /);
    expect(
      problems((c) => {
        c.keyring![0]!.key = 'c2hvcnQ=';
      }),
    ).toMatch(/^keyring\.0\.key: must be the base64 of 32 bytes/);
    expect(
      problems((c) => {
        c.sandbox.removed = 'yesterday';
      }),
    ).toMatch(/^sandbox\.removed: /);
    expect(problems((c) => void delete (c as Partial<Config>).environments)).toMatch(/^environments: /);
  });

  it("refuses paths that leave the agent's folder or reach its credential", () => {
    const share = (c: Config) => c.environments[0]!.shares[0]!;
    expect(
      problems((c) => {
        share(c).localPath = '../elsewhere';
      }),
    ).toMatch(/localPath: .*must not escape its folder/);
    expect(
      problems((c) => {
        share(c).localPath = '/home/me';
      }),
    ).toMatch(/localPath: .*must be a relative path/);
    expect(
      problems((c) => {
        share(c).localPath = '.berth';
      }),
    ).toMatch(/localPath: must not reach \.berth\//);
    expect(
      problems((c) => {
        share(c).sync.files = { '.env': '.berth/sandbox.json' };
      }),
    ).toMatch(/sync\.files\.\.env: must not reach \.berth\//);
    expect(
      problems((c) => {
        share(c).sync.files = { '../.env': 'secrets/dev.env' };
      }),
    ).toMatch(/sync\.files/);
    // A destination is in the environment's share, where .berth means nothing.
    expect(
      problems((c) => {
        share(c).sync.files = { '.berth/x': 'secrets/dev.env' };
      }),
    ).toBe('ok');
  });

  it('bounds what a share carries', () => {
    const share = (c: Config) => c.environments[0]!.shares[0]!;
    expect(
      problems((c) => {
        share(c).files = Array.from({ length: MAX_EXTRA_FILES + 1 }, (_, i) => `f${i}`);
      }),
    ).toMatch(/shares\.0\.files: /);
    expect(
      problems((c) => {
        share(c).sync.files = Object.fromEntries(Array.from({ length: MAX_EXTRA_FILES + 1 }, (_, i) => [`f${i}`, `s${i}`]));
      }),
    ).toMatch(/sync\.files: at most 100 extra files/);
    expect(
      problems((c) => {
        share(c).sync.include = Array.from({ length: MAX_INCLUDE_PATTERNS + 1 }, () => 'x');
      }),
    ).toMatch(/sync\.include: /);
    expect(
      problems((c) => {
        share(c).sync.include = ['x'.repeat(MAX_PATTERN_LENGTH + 1)];
      }),
    ).toMatch(/sync\.include\.0: /);
  });
});

describe('JoinAnswer', () => {
  it("reads the join's answer, leaving what REST adds about the sandbox", () => {
    const answer = {
      sandbox: { id: 'sb_01', org: 'default', name: 'dev-laptop', createdBy: 'usr_01', created: new Date(0).toISOString() },
      config: built(),
      credential: 'bsc_secret',
    };
    expect(JoinAnswer.parse(answer)).toEqual({
      sandbox: { id: 'sb_01', org: 'default', name: 'dev-laptop' },
      config: built(),
      credential: 'bsc_secret',
    });
    expect(JoinAnswer.safeParse({ ...answer, credential: '' }).success).toBe(false);
  });
});
