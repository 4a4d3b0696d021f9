import { readlinkSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import type { SyncRules } from '../src/kernel/sync-rules';
import { thrown } from './helpers/thrown';

// Record which folders the walk reads, to check that excluded folders are not read needlessly,
// and let a test act the moment a folder's listing arrives.
const fsSpy = vi.hoisted(() => ({ readdirs: [] as string[], onListed: null as ((dir: string) => void) | null }));
vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...actual,
    readdir: ((...args: Parameters<typeof actual.readdir>) => {
      // The walk lists folders through their descriptors (/proc/self/fd/N): the folder's own path.
      const dir = String(args[0]).startsWith('/proc/self/fd/') ? readlinkSync(String(args[0])) : String(args[0]);
      fsSpy.readdirs.push(dir);
      return (actual.readdir as (...a: unknown[]) => Promise<unknown>)(...args).then((entries) => {
        fsSpy.onListed?.(dir);
        return entries;
      });
    }) as typeof actual.readdir,
  };
});

// Test files share a module cache (vitest.config.ts, isolate: false): an earlier file may have
// loaded the walk with the real node:fs/promises. Loaded again here, after the mock, with the
// errors it throws.
vi.resetModules();
const { ValidationError } = await import('../src/kernel/errors');
const { Glob, GlobSyntaxError } = await import('../src/kernel/glob');
const { DEFAULT_IGNORES, rebaseGitignore, selectFiles, validateInclude, validateRelativePath } = await import('../src/kernel/sync-rules');

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(path.join(tmpdir(), 'berth-sync-'));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

let counter = 0;
/** Writes a tree: keys are POSIX paths (a trailing `/` makes an empty folder), values contents. */
async function tree(files: Record<string, string>): Promise<string> {
  const root = path.join(tmp, `t${counter++}`);
  await mkdir(root, { recursive: true });
  for (const [rel, content] of Object.entries(files)) {
    const abs = path.join(root, rel);
    if (rel.endsWith('/')) {
      await mkdir(abs, { recursive: true });
      continue;
    }
    await mkdir(path.dirname(abs), { recursive: true });
    await writeFile(abs, content);
  }
  return root;
}

async function select(root: string, rules: Partial<SyncRules> = {}): Promise<string[]> {
  const out: string[] = [];
  for await (const f of selectFiles(root, { include: [], noIgnore: false, ...rules })) out.push(f.path);
  return out;
}

const sorted = (list: string[]) => [...list].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

describe('validateInclude', () => {
  it('returns normalised patterns without duplicates', () => {
    expect(validateInclude(undefined)).toEqual([]);
    expect(validateInclude(null)).toEqual([]);
    expect(validateInclude([])).toEqual([]);
    expect(
      validateInclude(['dist', './dist/', 'node_modules/.prisma', 'a//b/./c', '**/*.log', '.env', 'src/**/gen/*.{ts,js}', '\\!bang']),
    ).toEqual(['dist', 'node_modules/.prisma', 'a/b/c', '**/*.log', '.env', 'src/**/gen/*.{ts,js}', '\\!bang']);
  });

  const good = [
    'a',
    'a/b',
    '*.log',
    '**',
    '**/x',
    'build/**',
    '[abc].txt',
    '[!a]*',
    '[]]x',
    '[a-z]*',
    '{a,b}/c',
    '@(a|b)',
    'file (1).txt',
    'x[[:alpha:]]',
    'a\\[b',
    '~/x',
    'a..b',
    '...',
  ];
  it.each(good)('accepts %j', (pattern) => {
    expect(validateInclude([pattern])).toHaveLength(1);
  });

  const bad: [unknown, RegExp][] = [
    ['', /must not be empty/],
    ['/abs', /not absolute/],
    ['/', /not absolute/],
    ['C:\\x', /not absolute/],
    ['c:/x', /not absolute/],
    ['..', /"\.\."/],
    ['../x', /"\.\."/],
    ['a/../b', /"\.\."/],
    ['a/..', /"\.\."/],
    ['.', /must name something inside/],
    ['./', /must name something inside/],
    ['!x', /negated patterns/],
    ['[abc', /unclosed "\[" at 0/],
    ['src/[ab', /unclosed "\[" at 4/],
    ['a[b]c[d', /unclosed "\[" at 5/],
    ['a{b', /not a valid glob/],
    ['*.{js', /not a valid glob/],
    ['[z-a]', /not a valid glob/],
    ['a\\', /not a valid glob/],
    ['a\u0000b', /control characters/],
    ['a\nb', /control characters/],
    ['x'.repeat(1025), /longer than 1024/],
    [5, /must be a string/],
    [null, /must be a string/],
    [['a'], /must be a string/],
  ];
  it.each(bad)('refuses %j naming the index', (pattern, message) => {
    const err = thrown(() => validateInclude(['ok', pattern]), ValidationError);
    expect(err.message).toMatch(/^include\[1\]: /);
    expect(err.message).toMatch(message);
    expect(err.field).toBe('include[1]');
  });

  it('refuses non-arrays and too many patterns', () => {
    expect(thrown(() => validateInclude('dist'), ValidationError).message).toBe('include: must be an array of paths or globs');
    expect(thrown(() => validateInclude({ 0: 'a' }), ValidationError).field).toBe('include');
    expect(thrown(() => validateInclude(Array.from({ length: 101 }, (_, i) => `f${i}`)), ValidationError).message).toMatch(
      /at most 100 patterns/,
    );
    expect(validateInclude(Array.from({ length: 100 }, (_, i) => `f${i}`))).toHaveLength(100);
  });

  it('uses the given field name', () => {
    expect(thrown(() => validateInclude(['/x'], 'sandboxConfig.include'), ValidationError).message).toMatch(
      /^sandboxConfig\.include\[0\]: /,
    );
  });
});

describe('validateRelativePath', () => {
  const good: [string, string][] = [
    ['a', 'a'],
    ['a/b', 'a/b'],
    ['./a', 'a'],
    ['a/', 'a'],
    ['a//b', 'a/b'],
    ['a/./b', 'a/b'],
    ['a/../b', 'b'],
    ['a/b/../../c', 'c'],
    ['.env', '.env'],
    ['..a', '..a'],
    ['a..', 'a..'],
    ['~/x', '~/x'],
    ['with space/é', 'with space/é'],
  ];
  it.each(good)('%j -> %j', (input, output) => {
    expect(validateRelativePath(input, 'shares.src')).toBe(output);
  });

  const bad: [string, RegExp][] = [
    ['', /must not be empty/],
    ['/etc', /not absolute/],
    ['/', /not absolute/],
    ['C:/x', /not absolute/],
    ['..', /escape/],
    ['../x', /escape/],
    ['a/../../x', /escape/],
    ['./..', /escape/],
    ['a\u0000b', /NUL or control/],
    ['a\nb', /NUL or control/],
    ['a\\b', /separator/],
    ['..\\x', /separator/],
    ['.', /inside its folder/],
    ['./', /inside its folder/],
    ['a/..', /inside its folder/],
    ['x'.repeat(4097), /longer than 4096/],
  ];
  it.each(bad)('refuses %j', (input, message) => {
    const err = thrown(() => validateRelativePath(input, 'files["x"]'), ValidationError);
    expect(err.message).toMatch(/^files\["x"\]: /);
    expect(err.message).toMatch(message);
    expect(err.field).toBe('files["x"]');
  });

  it('allows the folder itself when asked, as "."', () => {
    for (const p of ['.', './', 'a/..']) expect(validateRelativePath(p, 'shares.src', { allowRoot: true })).toBe('.');
  });

  it('refuses non-strings at run time', () => {
    expect(() => validateRelativePath(3 as unknown as string, 'x')).toThrow(/x: must be a string/);
  });
});

describe('rebaseGitignore', () => {
  it('leaves the root file alone and anchors nested patterns to their folder', () => {
    expect(rebaseGitignore('a\n/b\n', '')).toEqual(['a', '/b', '']);
    expect(
      rebaseGitignore('\uFEFF# comment\r\n\r\n*.log\n!keep.log\n/local\nsub/x\ndir/\n**/deep\n  \n\\#hash\n\\!bang\ntrail \n', 'src/pkg'),
    ).toEqual([
      'src/pkg/**/*.log',
      '!src/pkg/**/keep.log',
      'src/pkg/local',
      'src/pkg/sub/x',
      'src/pkg/**/dir/',
      'src/pkg/**/deep',
      'src/pkg/**/\\#hash',
      'src/pkg/**/\\!bang',
      'src/pkg/**/trail ',
    ]);
  });

  it('escapes glob characters in the folder name', () => {
    expect(rebaseGitignore('x', '[a]/b*?')).toEqual(['\\[a\\]/b\\*\\?/**/x']);
    expect(rebaseGitignore('x', '!a')).toEqual(['\\!a/**/x']);
    expect(rebaseGitignore('x', '#a')).toEqual(['\\#a/**/x']);
  });
});

describe('selectFiles', () => {
  let root: string;
  let layout: Record<string, string>;
  beforeAll(async () => {
    layout = {
      '.gitignore': '# root rules\n*.log\n!keep.log\nbuild/\n/secret.txt\n*.LOCAL\n',
      'README.md': 'readme',
      'app.log': 'log',
      'keep.log': 'keep',
      'secret.txt': 'secret',
      'x.local': 'lower case: not matched by *.LOCAL',
      'build/out.js': 'out',
      'build/nested/x.js': 'x',
      'build/.gitignore': '!out.js\n', // never read: build/ is excluded
      'dist/bundle.js': 'bundle',
      'node_modules/pkg/index.js': 'pkg',
      'node_modules/pkg/debug.log': 'log in node_modules',
      'node_modules/.prisma/client/index.js': 'prisma',
      '.git/HEAD': 'ref: refs/heads/main',
      '.git/config': '[core]',
      '.DS_Store': 'x',
      'Thumbs.db': 'x',
      '.env': 'SECRET=1',
      'src/index.ts': 'index',
      'src/.gitignore': 'generated/\r\n*.tmp\r\n!important.tmp\r\n/local.txt\r\n',
      'src/generated/a.ts': 'gen',
      'src/x.tmp': 'tmp',
      'src/important.tmp': 'important',
      'src/local.txt': 'local',
      'src/secret.txt': 'not the root secret',
      'src/app.log': 'log',
      'src/deep/local.txt': 'deep local',
      'src/deep/y.tmp': 'tmp',
      'src/deep/__pycache__/m.pyc': 'pyc',
      'lib/a.js': 'a',
      'lib/node_modules/dep/index.js': 'dep',
      'docs/.gitignore': '!*.log\n',
      'docs/debug.log': 'docs log',
      'docs/.hg/store': 'hg',
      '[weird]/.gitignore': '*.o\n',
      '[weird]/a.o': 'o',
      '[weird]/a.c': 'c',
      'a.txt': 'order',
      'a/b.txt': 'order',
      'a-b.txt': 'order',
      'empty/': '',
    };
    root = await tree(layout);
    await writeFile(path.join(root, 'run.sh'), '#!/bin/sh\n');
    await chmod(path.join(root, 'run.sh'), 0o755);
    await symlink(path.join(root, 'README.md'), path.join(root, 'link-to-readme'));
    await symlink(path.join(root, 'src'), path.join(root, 'link-to-src'));
    await symlink(path.join(root, 'nowhere'), path.join(root, 'dangling'));
  });

  const DEFAULT_SELECTION = [
    '.env',
    '.gitignore',
    'README.md',
    '[weird]/.gitignore',
    '[weird]/a.c',
    'a-b.txt',
    'a.txt',
    'a/b.txt',
    'dist/bundle.js',
    'docs/.gitignore',
    'docs/debug.log',
    'keep.log',
    'lib/a.js',
    'run.sh',
    'src/.gitignore',
    'src/deep/local.txt',
    'src/important.tmp',
    'src/index.ts',
    'src/secret.txt',
    'x.local',
  ];

  it('applies nested .gitignore files and the default ignores, in sorted order', async () => {
    const files = await select(root);
    expect(files).toEqual(DEFAULT_SELECTION);
    expect(files).toEqual(sorted(files));
  });

  it('reports size and permission bits', async () => {
    const files = [];
    for await (const f of selectFiles(root, { include: [], noIgnore: false })) files.push(f);
    expect(files.find((f) => f.path === 'run.sh')).toEqual({ path: 'run.sh', size: 10, mode: 0o755, mtimeMs: expect.any(Number) });
    expect(files.find((f) => f.path === 'README.md')).toMatchObject({ size: 6 });
    expect(files.find((f) => f.path === 'README.md')!.mode & 0o600).toBe(0o600);
  });

  it('does not read excluded folders when no include can reach into them', async () => {
    fsSpy.readdirs.length = 0;
    await select(root);
    const read = fsSpy.readdirs.map((d) => path.relative(root, d).split(path.sep).join('/'));
    expect(read).toContain('src/deep');
    for (const excluded of ['node_modules', '.git', 'build', 'src/generated', 'lib/node_modules', 'src/deep/__pycache__', 'docs/.hg']) {
      expect(read).not.toContain(excluded);
    }
  });

  const includeCases: [string, string[], string[], string[]?][] = [
    // [title, include, added to the default selection, folders that may be read]
    ['a folder inside node_modules', ['node_modules/.prisma'], ['node_modules/.prisma/client/index.js']],
    ['a file inside node_modules', ['node_modules/pkg/index.js'], ['node_modules/pkg/index.js']],
    ['an excluded folder, whole', ['build'], ['build/.gitignore', 'build/nested/x.js', 'build/out.js']],
    ['an excluded folder via /**', ['build/**'], ['build/.gitignore', 'build/nested/x.js', 'build/out.js']],
    ['a glob in an excluded folder', ['build/*.js'], ['build/out.js']],
    ['a glob reaching everywhere', ['**/*.log'], ['app.log', 'node_modules/pkg/debug.log', 'src/app.log']],
    ['a top-level glob (picomatch: no basename matching)', ['*.log'], ['app.log']],
    ['an anchored ignored file', ['secret.txt'], ['secret.txt']],
    ['a nested-ignored folder', ['src/generated'], ['src/generated/a.ts']],
    ['a glob with braces', ['{build,src/generated}/*.{js,ts}'], ['build/out.js', 'src/generated/a.ts']],
    ['.git files', ['.git/HEAD'], ['.git/HEAD']],
    ['dot files with **', ['.git/**'], ['.git/HEAD', '.git/config']],
    ['a default-ignored file', ['.DS_Store', 'Thumbs.db'], ['.DS_Store', 'Thumbs.db']],
    ['a pattern matching nothing', ['nope/**', 'missing.txt'], []],
    ['a path to an unignored folder, which then takes everything below it', ['lib'], ['lib/node_modules/dep/index.js']],
    ['a character class', ['src/[xy].tmp', 'src/deep/[xy].tmp'], ['src/deep/y.tmp', 'src/x.tmp']],
  ];
  it.each(includeCases)('include: %s', async (_title, include, added) => {
    const files = await select(root, { include });
    expect(files).toEqual(sorted([...DEFAULT_SELECTION, ...added]));
  });

  it('include reaches only the excluded folders it could match in', async () => {
    fsSpy.readdirs.length = 0;
    await select(root, { include: ['node_modules/.prisma/client/*.js'] });
    const read = fsSpy.readdirs.map((d) => path.relative(root, d).split(path.sep).join('/'));
    expect(read).toEqual(expect.arrayContaining(['node_modules', 'node_modules/.prisma', 'node_modules/.prisma/client']));
    for (const excluded of ['node_modules/pkg', '.git', 'build', 'lib/node_modules']) expect(read).not.toContain(excluded);
  });

  it('files destinations are selected like exact include paths', async () => {
    const files = await select(root, {
      files: { 'build/out.js': '../outside/source.js', 'src/generated/a.ts': 'x', 'not/there.txt': 'y' },
    });
    expect(files).toEqual(sorted([...DEFAULT_SELECTION, 'build/out.js', 'src/generated/a.ts']));
  });

  it('noIgnore selects every regular file, skipping symlinks', async () => {
    const files = await select(root, { noIgnore: true });
    expect(files).toEqual(files.slice().sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    expect(files).toEqual(
      expect.arrayContaining(['.git/HEAD', 'node_modules/pkg/index.js', 'build/out.js', 'app.log', 'src/generated/a.ts', '.DS_Store']),
    );
    const everyFile = Object.keys(layout).filter((k) => !k.endsWith('/'));
    expect(files).toEqual(sorted([...everyFile, 'run.sh']));
    for (const link of ['link-to-readme', 'link-to-src', 'dangling']) {
      expect(files.some((f) => f === link || f.startsWith(`${link}/`))).toBe(false);
    }
  });

  it('never selects symlinks, even when included', async () => {
    const files = await select(root, { include: ['link-to-readme', 'link-to-src', 'link-to-src/**', 'dangling'] });
    expect(files).toEqual(DEFAULT_SELECTION);
  });

  it('validates the rules it is given', async () => {
    await expect(select(root, { include: ['/abs'] })).rejects.toThrow(ValidationError);
    await expect(select(root, { files: { '../x': 'y' } })).rejects.toThrow(/escape/);
  });

  it('fails on a missing root', async () => {
    await expect(select(path.join(tmp, 'does-not-exist'))).rejects.toThrow(/ENOENT/);
  });
});

describe('selectFiles: .gitignore precedence', () => {
  it('a root .gitignore can re-include a default ignore', async () => {
    const root = await tree({
      '.gitignore': '!node_modules/\n',
      'node_modules/a/index.js': 'a',
      'node_modules/a/node_modules/b/index.js': 'b',
      'x.js': 'x',
    });
    // `!node_modules/` re-includes every node_modules folder, at any depth.
    expect(await select(root)).toEqual(['.gitignore', 'node_modules/a/index.js', 'node_modules/a/node_modules/b/index.js', 'x.js']);
  });

  it('deeper files win, and nothing inside an excluded folder comes back', async () => {
    const root = await tree({
      '.gitignore': '*.gen\nlogs/\nout/*\n!out/keep/\n',
      'a.gen': '',
      'pkg/.gitignore': '!*.gen\n',
      'pkg/b.gen': '',
      'pkg/sub/.gitignore': '*.gen\n',
      'pkg/sub/c.gen': '',
      'pkg/sub/d.txt': '',
      'logs/.gitignore': '!*\n',
      'logs/x.txt': '',
      'out/drop.txt': '',
      'out/keep/k.txt': '',
      'out/other/o.txt': '',
    });
    expect(await select(root)).toEqual([
      '.gitignore',
      'out/keep/k.txt',
      'pkg/.gitignore',
      'pkg/b.gen',
      'pkg/sub/.gitignore',
      'pkg/sub/d.txt',
    ]);
  });

  it('anchored patterns in nested files apply relative to their folder only', async () => {
    const root = await tree({
      'a/.gitignore': '/x\nb/y\n',
      'a/x': '',
      'a/b/y': '',
      'a/c/x': '',
      'a/c/b/y': '',
      x: '',
      'b/y': '',
    });
    expect(await select(root)).toEqual(['a/.gitignore', 'a/c/b/y', 'a/c/x', 'b/y', 'x']);
  });

  it('handles an empty folder and a folder with only ignored files', async () => {
    const root = await tree({ 'empty/': '', 'only/.DS_Store': '' });
    expect(await select(root)).toEqual([]);
    expect(await select(root, { noIgnore: true })).toEqual(['only/.DS_Store']);
  });

  it('sorts by path in code-unit order', async () => {
    const root = await tree({ b: '', 'a/z': '', 'a.txt': '', 'a-b': '', A: '', a0: '', _: '', é: '', 'a/0': '' });
    expect(await select(root)).toEqual(['A', '_', 'a-b', 'a.txt', 'a/0', 'a/z', 'a0', 'b', 'é']);
  });
});

describe('DEFAULT_IGNORES', () => {
  it('is the documented conservative list', () => {
    expect([...DEFAULT_IGNORES]).toEqual(['.git', '.hg', '.svn', 'node_modules/', '__pycache__/', '.DS_Store', 'Thumbs.db']);
    expect(Object.isFrozen(DEFAULT_IGNORES)).toBe(true);
  });

  it('treats a .git file (worktree or submodule) as ignored too', async () => {
    const root = await tree({ '.git': 'gitdir: ../.git/worktrees/x', 'sub/.git': 'gitdir: x', 'sub/a': '' });
    expect(await select(root)).toEqual(['sub/a']);
  });
});

beforeEach(() => {
  fsSpy.readdirs.length = 0;
  fsSpy.onListed = null;
});

describe('Glob', () => {
  // [pattern, paths it matches, paths it does not]
  const table: [string, string[], string[]][] = [
    ['*.log', ['a.log', '.log', 'a.b.log'], ['a/b.log', 'a.logs']],
    ['*', ['a', '.env'], ['a/b']],
    ['a?c', ['abc', 'a.c'], ['ac', 'a/c', 'abbc']],
    ['**', ['a', 'a/b/c', '.git/HEAD'], []],
    ['**/x', ['x', 'a/x', 'a/.b/x'], ['ax', 'x/a']],
    ['a/**/b', ['a/b', 'a/x/b', 'a/x/y/b'], ['ab', 'a/xb', 'b']],
    ['a/**', ['a', 'a/b', 'a/b/c'], ['ab', 'b/a']],
    ['src/*/**', ['src/a/b', 'src/a/b/c'], ['src/a', 'src']],
    ['**/**/x', ['x', 'a/b/x'], ['a/bx']],
    ['a**b', ['ab', 'axxb'], ['a/b', 'ax/yb']],
    ['**/*.log', ['a.log', 'x/y/a.log', '.h/.log'], ['a.logs', 'a.log/x']],
    ['[abc].txt', ['a.txt', 'c.txt', '[abc].txt'], ['d.txt', 'ab.txt']],
    ['[a-c]x', ['bx'], ['dx', 'Bx']],
    ['[!a]x', ['bx', '!x'], ['ax']],
    ['a[^b]c', ['axc'], ['abc', 'a/c']],
    ['[]]x', [']x'], ['x']],
    ['[]-a]', ['^', 'a'], ['b']],
    ['x[[:digit:]_]', ['x1', 'x_'], ['xa']],
    ['\\*', ['*'], ['a']],
    ['a\\[b', ['a[b'], ['ab']],
    ['{a,b}/c', ['a/c', 'b/c'], ['c', 'ab/c']],
    ['{a,b{c,d}}x', ['ax', 'bcx', 'bdx'], ['bx', 'cx']],
    ['*.{js,ts}', ['a.js', 'b.ts'], ['a.jsx', 'a.']],
    ['a{,b}', ['a', 'ab'], ['b']],
    ['{a..c}', ['b'], ['d', 'ab']],
    ['{a}', ['{a}'], ['a']],
    ['{build,src/gen}/*.js', ['build/a.js', 'src/gen/a.js'], ['src/a.js']],
    ['@(a|b)x', ['ax', 'bx'], ['x', 'abx']],
    ['x*(ab)', ['x', 'xab', 'xabab'], ['xa', 'xaba']],
    ['+(a|b)', ['a', 'abba'], ['c', 'ac']],
    ['?(a)b', ['b', 'ab'], ['aab']],
    ['@(a/b|c)', ['a/b', 'c'], ['a']],
    ['file (1).txt', ['file (1).txt', 'file 1.txt'], ['file (2).txt']],
    ['a(b', ['a(b'], ['ab']],
    ['a|b', ['a|b'], ['a']],
  ];
  it.each(table)('%j', (pattern, yes, no) => {
    const glob = new Glob(pattern);
    for (const p of yes) expect(glob.matches(p), p).toBe(true);
    for (const p of no) expect(glob.matches(p), p).toBe(false);
  });

  // [pattern, folder, whether something below it could match]
  const reach: [string, string, boolean][] = [
    ['node_modules/.prisma/client/*.js', 'node_modules', true],
    ['node_modules/.prisma/client/*.js', 'node_modules/.prisma/client', true],
    ['node_modules/.prisma/client/*.js', 'node_modules/pkg', false],
    ['**/x', 'a/b/c', true],
    ['a/*', 'a', true],
    ['a/*', 'a/b', false],
    ['a', 'a', false],
    ['a/**', 'a', true],
    ['{build,src/gen}/*.js', 'src', true],
    ['{build,src/gen}/*.js', 'lib', false],
    ['@(a/b|c)/x', 'a', true],
    ['[weird]/x.o', '[weird]', true],
  ];
  it.each(reach)('%j may match below %j: %j', (pattern, dir, expected) => {
    expect(new Glob(pattern).mayMatchBelow(dir)).toBe(expected);
  });

  const invalid: [string, RegExp][] = [
    ['[abc', /unclosed "\[" at 0/],
    ['a{b', /unclosed "\{" at 1/],
    ['{{a,b}', /unclosed "\{" at 0/],
    ['[z-a]', /range "z-a" at 1 is backwards/],
    ['a\\', /ends with "\\"/],
    ['!(a)', /"!\(…\)" at 0 is not supported/],
    ['{1..10}', /only ranges of single characters/],
    ['[[:foo:]]', /unknown class "\[:foo:\]"/],
  ];
  it.each(invalid)('refuses %j', (pattern, message) => {
    expect(() => new Glob(pattern)).toThrow(GlobSyntaxError);
    expect(() => new Glob(pattern)).toThrow(message);
  });

  it('validateInclude refuses what the glob syntax refuses, naming the index', () => {
    for (const pattern of ['a/!(b)', '{1..10}', '[[:foo:]]']) {
      const err = thrown(() => validateInclude(['ok', pattern]), ValidationError);
      expect(err.message).toMatch(/^include\[1\]: .* is not a valid glob \(/);
      expect(err.field).toBe('include[1]');
    }
  });
});

describe('Glob: linear time', () => {
  // Each of these froze picomatch's backtracking regular expressions for minutes or more.
  const name = 'a'.repeat(4096);
  const deep = Array.from({ length: 16 }, () => 'a'.repeat(255)).join('/');
  const mixed = Array.from({ length: 4096 }, (_, i) => ((i * 7919) % 13 < 6 ? 'a' : 'b')).join('');
  const cases: [string, string, string][] = [
    ['stars', `${'*a'.repeat(10)}*b`, name],
    ['stars after **/', `**/${'*a'.repeat(7)}*b`, deep],
    ['braces and stars', `${'{a,b}*'.repeat(100)}c`, name],
    ['1024 characters of stars', `${'*a'.repeat(511)}*b`, name],
    ['an extglob and 1018 ?', `*(?|/)${'?'.repeat(1018)}`, name],
    ['an exponential DFA', `*([ab])a${'?'.repeat(1016)}`, mixed],
  ];
  it.each(cases)('%s: at most (path length + 1) × (4 × states + 1) steps', (_title, pattern, path) => {
    expect(validateInclude([pattern])).toEqual([pattern]);
    const glob = new Glob(pattern);
    expect(glob.size).toBeLessThanOrEqual(2 * pattern.length + 1);
    // Twice, the second time with its transitions cached, then as a folder (`path/` is fed).
    for (const [fed, run] of [
      [path, () => glob.matches(path)],
      [path, () => glob.matches(path)],
      [`${path}/`, () => glob.mayMatchBelow(path)],
    ] as const) {
      const before = glob.meter.steps;
      expect(typeof run()).toBe('boolean');
      expect(glob.meter.steps - before).toBeLessThanOrEqual((fed.length + 1) * (4 * glob.size + 1));
    }
  });

  it('a walk with such patterns over long names finishes', async () => {
    // node_modules is excluded: only the includes select there, and `**/` makes the walk look everywhere.
    const segment = 'a'.repeat(250);
    const deep = ['node_modules', ...Array.from({ length: 14 }, () => segment), 'x'].join('/');
    const wanted = `node_modules/${segment}/${segment}.txt`;
    const root = await tree({ [deep]: '', [wanted]: '' });
    const include = [`**/${'*a'.repeat(10)}*b`, `${'{a,b}*'.repeat(100)}c`, `${'*a'.repeat(511)}*b`, `**/${'*a'.repeat(10)}*.txt`];
    expect(await select(root, { include })).toEqual([wanted]);
  });
});

describe('selectFiles: the event loop', () => {
  it('gets turns while a walk matches, with no I/O in between', async () => {
    // node_modules is excluded: its files are only matched against the includes, never read.
    const files = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`node_modules/${'a'.repeat(200)}${i}`, '']));
    const root = await tree(files);
    const include = Array.from({ length: 40 }, (_, i) => `node_modules/${'*a'.repeat(100 + i)}*b`);
    let turn = false;
    fsSpy.onListed = (dir) => {
      if (dir.endsWith('node_modules')) setImmediate(() => (turn = true));
    };
    expect(await select(root, { include })).toEqual([]);
    expect(turn).toBe(true);
  });
});
