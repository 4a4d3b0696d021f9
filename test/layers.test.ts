// The layer rules of .dependency-cruiser.cjs (run by `npm run lint`) refuse a planted back-edge,
// naming the file: each case is a small tree in a folder of its own, cruised with the real rules.
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { cruise, type IForbiddenRuleType } from 'dependency-cruiser';
import { afterEach, describe, expect, it } from 'vitest';

const config = createRequire(import.meta.url)('../.dependency-cruiser.cjs') as { forbidden: IForbiddenRuleType[] };

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

/** Cruises a tree of files (path → source) with the real rules; returns "rule: from → to" per violation. */
async function violations(files: Record<string, string>): Promise<string[]> {
  const dir = await mkdtemp(path.join(tmpdir(), 'berth-layers-'));
  dirs.push(dir);
  for (const [file, text] of Object.entries(files)) {
    await mkdir(path.join(dir, path.dirname(file)), { recursive: true });
    await writeFile(path.join(dir, file), text);
  }
  const result = await cruise(['src'], {
    baseDir: dir,
    validate: true,
    ruleSet: { forbidden: config.forbidden },
    tsPreCompilationDeps: true,
  });
  if (typeof result.output === 'string') throw new Error('expected a cruise result');
  return result.output.summary.violations.map((v) => `${v.rule.name}: ${v.from} → ${v.to}`);
}

describe('layer rules', () => {
  it('refuse a platform file that imports an edge, naming the file', async () => {
    const found = await violations({
      'src/platform/db/index.ts': "import { route } from '../../edges/rest/route';\nexport const db = route;\n",
      'src/edges/rest/route.ts': 'export const route = 1;\n',
    });
    expect(found).toEqual(['platform-only-platform: src/platform/db/index.ts → src/edges/rest/route.ts']);
  });

  it('refuse a module reaching into another past its index; the index is the way in', async () => {
    const tree = {
      'src/modules/nodes/index.ts': "export * from './service';\n",
      'src/modules/nodes/service.ts': 'export const nodes = 1;\n',
    };
    expect(
      await violations({
        ...tree,
        'src/modules/templates/service.ts': "import { nodes } from '../nodes/service';\nexport const t = nodes;\n",
      }),
    ).toEqual(['module-through-index: src/modules/templates/service.ts → src/modules/nodes/service.ts']);
    expect(
      await violations({ ...tree, 'src/modules/templates/service.ts': "import { nodes } from '../nodes';\nexport const t = nodes;\n" }),
    ).toEqual([]);
  });

  it('refuse modules that import edges, the kernel that imports modules, clients that import the server', async () => {
    const found = await violations({
      'src/modules/audit/service.ts': "import { sendJson } from '../../edges/http/respond';\nexport const a = sendJson;\n",
      'src/edges/http/respond.ts': 'export const sendJson = 1;\n',
      'src/kernel/access.ts': "import { a } from '../modules/audit';\nexport const b = a;\n",
      'src/modules/audit/index.ts': "export * from './service';\n",
      'src/cli/env.ts': "import { a } from '../modules/audit';\nexport const c = a;\n",
    });
    expect(found.sort()).toEqual([
      'clients-not-server: src/cli/env.ts → src/modules/audit/index.ts',
      'kernel-only-platform: src/kernel/access.ts → src/modules/audit/index.ts',
      'modules-not-edges: src/modules/audit/service.ts → src/edges/http/respond.ts',
    ]);
  });

  it("refuse the server importing the node runtime's code (its engine, its file work); its types and plain shapes are fine", async () => {
    const found = await violations({
      'src/node/engine.ts': 'export class Engine {}\n',
      'src/node/runtime.ts': 'export type RuntimeKind = string;\nexport const prepare = 1;\n',
      'src/node/command.ts': 'export const MAX_TERM = 1000;\n',
      'src/dataplane/beneath.ts': 'export const removeTree = 1;\n',
      'src/app/deps.ts': "import { Engine } from '../node/engine';\nexport const e = Engine;\n",
      'src/modules/nodes/service.ts':
        "import type { RuntimeKind } from '../../node/runtime';\nimport { removeTree } from '../../dataplane/beneath';\nexport const k: RuntimeKind = String(removeTree);\n",
      'src/edges/channels/exec-session.ts': "import { MAX_TERM } from '../../node/command';\nexport const m = MAX_TERM;\n",
    });
    expect(found.sort()).toEqual([
      'server-not-node: src/app/deps.ts → src/node/engine.ts',
      'server-not-node: src/modules/nodes/service.ts → src/dataplane/beneath.ts',
    ]);
  });

  it('refuse the nodes module importing the environments module, even lazily; its GraphQL types may name them', async () => {
    const found = await violations({
      'src/modules/environments/index.ts': "export { transition } from './service';\n",
      'src/modules/environments/service.ts': 'export const transition = 1;\n',
      'src/modules/environments/graphql.ts': 'export const EnvironmentRef = 1;\n',
      'src/modules/nodes/service.ts': "export const fail = () => import('../environments');\n",
      'src/modules/nodes/graphql.ts': "import { EnvironmentRef } from '../environments/graphql';\nexport const n = EnvironmentRef;\n",
    });
    expect(found).toEqual(['nodes-report-through-ends: src/modules/nodes/service.ts → src/modules/environments/index.ts']);
  });

  it('refuse a module face that re-exports everything of a file (Biome, with the real configuration)', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'berth-faces-'));
    dirs.push(dir);
    const root = path.join(import.meta.dirname, '..');
    // The project's rules without its VCS settings: the temporary folder is no repository.
    const biomeConfig = JSON.parse(await readFile(path.join(root, 'biome.json'), 'utf8'));
    delete biomeConfig.$schema;
    await writeFile(path.join(dir, 'biome.json'), JSON.stringify({ ...biomeConfig, vcs: { enabled: false } }));
    await mkdir(path.join(dir, 'src/modules/nodes'), { recursive: true });
    const lint = async (text: string) => {
      await writeFile(path.join(dir, 'src/modules/nodes/index.ts'), text);
      return spawnSync(path.join(root, 'node_modules/.bin/biome'), ['lint', 'src'], { cwd: dir, encoding: 'utf8' });
    };
    const star = await lint("export * from './service';\n");
    expect(star.status).not.toBe(0);
    expect(star.stdout + star.stderr).toContain('lint/performance/noReExportAll');
    expect((await lint("export { nodeHello } from './service';\n")).status).toBe(0);
  });

  it('refuse a cycle of static imports, not one closed by a type-only or dynamic import', async () => {
    const a = "import { b } from './b';\nexport const a = () => b;\n";
    expect(
      (await violations({ 'src/kernel/a.ts': a, 'src/kernel/b.ts': "import { a } from './a';\nexport const b = () => a;\n" })).map(
        (v) => v.split(':')[0],
      ),
    ).toEqual(['no-circular']);
    expect(
      await violations({ 'src/kernel/a.ts': a, 'src/kernel/b.ts': "import type { a } from './a';\nexport const b: typeof a | 1 = 1;\n" }),
    ).toEqual([]);
    expect(await violations({ 'src/kernel/a.ts': a, 'src/kernel/b.ts': "export const b = () => import('./a');\n" })).toEqual([]);
  });
});
