// Sync rules: which files of a share folder are sent (sandbox -> environment) or saved (snapshot).
//
// Selection, for a folder walked from `root`:
// 1. `noIgnore: true`: every regular file is selected.
// 2. Otherwise a file is left out when .gitignore files or DEFAULT_IGNORES exclude it, with git's
//    semantics: a .gitignore applies to its own folder and everything below it, patterns are
//    relative to that folder, deeper files take precedence over shallower ones, DEFAULT_IGNORES
//    come first (lowest precedence, like git's global excludes file, so a .gitignore can re-include
//    with `!node_modules/`), and nothing inside an excluded folder can be re-included by a
//    .gitignore (the folder is not even read, so .gitignore files inside it are ignored too).
//    Matching is case-sensitive, as git on Linux. Only .gitignore files are read (not
//    .git/info/exclude nor a global excludes file).
// 3. `include` (paths or globs relative to root: `*`, `?`, `[…]`, `**`, `{a,b}`, extglobs; dot
//    files match; syntax in glob-syntax.ts) are selected whatever 2 says, inside excluded folders
//    too. A pattern that matches a folder selects everything beneath it (`dist`,
//    `node_modules/.prisma`). Globs are not gitignore's: `*.log` matches only at the top; write
//    `**/*.log` for any depth. A glob that can reach anywhere (`**/x`) makes the walk descend into
//    every excluded folder, node_modules and .git included, to look for matches. Matching takes
//    linear time whatever the pattern (glob.ts), and a walk gives the event loop a turn every few
//    milliseconds of work, mid-match if need be.
// 4. `files` keys (destinations of extra files, relative to root) are selected like exact include
//    paths; their values (sources on the sandbox) are not read here.
// Symbolic links are never followed and never selected; neither are sockets, FIFOs or devices
// (never opened: `special` names them).
// Files come out sorted by path in code-unit order (`a.txt` before `a/b`), so a walk is
// deterministic.
import { type FileHandle, lstat, open, readdir } from 'node:fs/promises';
import path from 'node:path';
import ignore, { type Ignore } from 'ignore';
import { ValidationError } from './errors';
import { type Answer, Glob, GlobSyntaxError, type Meter, type Paused } from './glob';
import { at, FOLDER_FLAGS, type Kind, kindOf, openFolder, openRegular } from './no-follow';
import { show } from './show';

/**
 * Applied unless `noIgnore`, in .gitignore syntax. Deliberately short: only what is never
 * source and never portable between machines.
 * - `.git`, `.hg`, `.svn`: version-control metadata (`.git` is a file in worktrees and
 *   submodules, hence no trailing slash).
 * - `node_modules/`: installed JavaScript packages, platform-specific and rebuilt by the
 *   package manager.
 * - `__pycache__/`: Python byte-code caches.
 * - `.DS_Store`, `Thumbs.db`: macOS and Windows folder metadata.
 * Not included, because they are real source folders in some projects or are usually
 * git-ignored already: `target`, `build`, `dist`, `vendor`, `.venv`, `.env`.
 */
export const DEFAULT_IGNORES: readonly string[] = Object.freeze([
  '.git',
  '.hg',
  '.svn',
  'node_modules/',
  '__pycache__/',
  '.DS_Store',
  'Thumbs.db',
]);

export const MAX_INCLUDE_PATTERNS = 100;
export const MAX_PATTERN_LENGTH = 1024;
export const MAX_PATH_LENGTH = 4096;
/** What of a .gitignore file is read. */
const MAX_GITIGNORE = 1024 * 1024;

/** Matching work (glob.ts steps: a few milliseconds of it) a walk does between two turns it gives the event loop. */
const SLICE_STEPS = 1 << 18;
/** What handling one folder entry counts for, besides matching it. */
const ENTRY_STEPS = 256;

const CONTROL = /\p{Cc}/u;

/**
 * Checks `include`: an array of relative paths or globs. Each is normalised (`./` prefixes, `.`
 * segments, doubled and trailing `/` removed) and the normalised list returned, without
 * duplicates. Refused with a ValidationError naming the index: non-strings, empty patterns,
 * absolute paths, `..` segments, control characters, negation (`!x`), and what glob-syntax.ts
 * refuses (unclosed `[` or `{`, bad ranges such as `[z-a]`, a trailing `\`, `!(…)`). At most 100
 * patterns of 1024 characters each.
 */
export function validateInclude(patterns: unknown, field = 'include'): string[] {
  return compileInclude(patterns, field).map((glob) => glob.source);
}

/** validateInclude's patterns, compiled; their matches add their work up in `meter`. */
function compileInclude(patterns: unknown, field: string, meter?: Meter): Glob[] {
  if (patterns === undefined || patterns === null) return [];
  if (!Array.isArray(patterns)) {
    throw new ValidationError(`${field}: must be an array of paths or globs`, field);
  }
  if (patterns.length > MAX_INCLUDE_PATTERNS) {
    throw new ValidationError(`${field}: at most ${MAX_INCLUDE_PATTERNS} patterns (got ${patterns.length})`, field);
  }
  const out = new Map<string, Glob>();
  patterns.forEach((raw: unknown, index) => {
    const at = `${field}[${index}]`;
    const glob = compilePattern(raw, meter);
    if (typeof glob === 'string') {
      const shown = typeof raw === 'string' ? ` ${show(raw)}` : '';
      throw new ValidationError(`${at}:${shown} ${glob}`, at);
    }
    if (!out.has(glob.source)) out.set(glob.source, glob);
  });
  return [...out.values()];
}

/** The glob of one normalised include pattern, or what is wrong with it. */
function compilePattern(raw: unknown, meter?: Meter): Glob | string {
  if (typeof raw !== 'string') return 'must be a string';
  if (raw.length === 0) return 'must not be empty';
  if (raw.length > MAX_PATTERN_LENGTH) return `is longer than ${MAX_PATTERN_LENGTH} characters`;
  if (CONTROL.test(raw)) return 'must not contain control characters';
  if (isAbsolute(raw)) return 'must be relative to the share folder, not absolute';
  if (raw.startsWith('!')) return 'negated patterns are not supported (escape a leading "!" as "\\!")';
  const segments = raw.split('/').filter((s) => s !== '' && s !== '.');
  if (segments.includes('..')) return 'must not contain ".." segments';
  const pattern = segments.join('/');
  if (pattern === '') return 'must name something inside the share folder (use noIgnore to send everything)';
  try {
    return new Glob(pattern, meter);
  } catch (err) {
    if (err instanceof GlobSyntaxError) return `is not a valid glob (${err.message})`;
    throw err;
  }
}

/**
 * Checks a relative path (a share's folder on the sandbox, an extra file's destination or source)
 * and returns its normalised POSIX form (`./a//b/` -> `a/b`, `a/../b` -> `b`). Refused: empty,
 * absolute (`/x`, `C:\x`, `C:/x`), escaping the folder with `..`, containing NUL or other control
 * characters, containing `\` (only `/` separates), longer than 4096 characters. A path that
 * normalises to the folder itself (`.`, `./`, `a/..`) is refused unless `allowRoot`, and then
 * comes back as `.`.
 */
export function validateRelativePath(value: string, field: string, opts: { allowRoot?: boolean } = {}): string {
  if (typeof value !== 'string') throw new ValidationError(`${field}: must be a string`, field);
  if (value.length === 0) throw new ValidationError(`${field}: must not be empty`, field);
  if (value.length > MAX_PATH_LENGTH) {
    throw new ValidationError(`${field}: is longer than ${MAX_PATH_LENGTH} characters`, field);
  }
  if (CONTROL.test(value)) {
    throw new ValidationError(`${field}: ${show(value)} must not contain NUL or control characters`, field);
  }
  if (value.includes('\\')) {
    throw new ValidationError(`${field}: ${show(value)} must use "/" as the separator, not "\\"`, field);
  }
  if (isAbsolute(value)) {
    throw new ValidationError(`${field}: ${show(value)} must be a relative path, not absolute`, field);
  }
  let normal = path.posix.normalize(value);
  if (normal.length > 1 && normal.endsWith('/')) normal = normal.slice(0, -1);
  if (normal === '..' || normal.startsWith('../')) {
    throw new ValidationError(`${field}: ${show(value)} must not escape its folder with ".."`, field);
  }
  if (normal === '.' && !opts.allowRoot) {
    throw new ValidationError(`${field}: ${show(value)} must name something inside its folder`, field);
  }
  return normal;
}

function isAbsolute(p: string): boolean {
  return p.startsWith('/') || /^[A-Za-z]:(?:[\\/]|$)/.test(p) || p.startsWith('\\\\');
}

export interface SyncRules {
  /** Validated include patterns (see validateInclude). */
  include: readonly string[];
  /** When true, neither .gitignore files nor DEFAULT_IGNORES apply. */
  noIgnore: boolean;
  /** Extra files: destination (relative to root) to source on the sandbox. Keys are selected. */
  files?: Record<string, string>;
}

export interface SelectedFile {
  /** POSIX path relative to root, e.g. `src/index.ts`. */
  path: string;
  /** Size in bytes. */
  size: number;
  /** Permission bits (`mode & 0o777`), e.g. 0o644 or 0o755. */
  mode: number;
  /** Last modification, in milliseconds since the epoch. */
  mtimeMs: number;
}

type WalkMode =
  /** Apply ignores; includes add to the selection. */
  | 'normal'
  /** Inside an excluded folder: select only what includes match. */
  | 'include-only'
  /** Inside a folder an include matched (or everything with noIgnore): select all. */
  | 'all';

/** Options of selectFiles. */
export interface SelectOptions {
  /**
   * Called for each special file (FIFO, socket, device) the rules would select were it a file:
   * it is never opened nor yielded, and the caller may say so.
   */
  special?(path: string, kind: Kind): void;
}

/**
 * The files of `root` that `rules` select, sorted by path (see the top of this file). Every folder
 * is opened through the one before without following a link (no-follow.ts): a folder the owner of
 * the tree swaps for a link meanwhile is not walked, and nothing but a regular file is opened.
 */
export async function* selectFiles(root: string, rules: SyncRules, opts: SelectOptions = {}): AsyncGenerator<SelectedFile> {
  const base = path.resolve(root);
  const meter: Meter = { steps: 0, pauseAt: SLICE_STEPS };
  const globs = compileInclude([...rules.include], 'include', meter);
  const exact = Object.keys(rules.files ?? {}).map((dest) => validateRelativePath(dest, `files[${JSON.stringify(dest)}]`));
  const matcher = new IncludeMatcher(globs, exact, meter);
  const folder = await open(base, FOLDER_FLAGS);
  try {
    if (rules.noIgnore) {
      yield* walk(folder, '', 'all', null, matcher, opts);
      return;
    }
    const defaults = ignore({ ignorecase: false }).add([...DEFAULT_IGNORES]);
    yield* walk(folder, '', 'normal', defaults, matcher, opts);
  } finally {
    await folder.close();
  }
}

async function* walk(
  folder: FileHandle,
  relDir: string,
  mode: WalkMode,
  rules: Ignore | null,
  includes: IncludeMatcher,
  opts: SelectOptions,
): AsyncGenerator<SelectedFile> {
  const entries = await readdir(`/proc/self/fd/${folder.fd}`, { withFileTypes: true });
  const items = entries
    .filter((e) => !e.isSymbolicLink())
    .map((e) => ({ name: e.name, dir: e.isDirectory(), kind: kindOf(e), key: e.isDirectory() ? `${e.name}/` : e.name }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));

  if (mode === 'normal' && rules && items.some((e) => e.name === '.gitignore' && e.kind === 'file')) {
    const text = await readText(at(folder.fd, '.gitignore'));
    if (text !== null) {
      rules = ignore({ ignorecase: false }).add(rules).add(rebaseGitignore(text, relDir));
    }
  }

  for (const item of items) {
    await includes.entry();
    const rel = relDir === '' ? item.name : `${relDir}/${item.name}`;
    const here = at(folder.fd, item.name);
    let next: WalkMode | null;
    if (mode === 'all') {
      next = 'all';
    } else if (await includes.matches(rel)) {
      next = 'all';
    } else if (mode === 'normal' && !rules!.ignores(item.dir ? `${rel}/` : rel)) {
      next = 'normal';
    } else {
      next = item.dir && (await includes.mayMatchUnder(rel)) ? 'include-only' : null;
    }
    if (next === null) continue;
    if (item.dir) {
      // A folder swapped for anything else since it was listed is not walked.
      const child = await openFolder(here);
      if (!child) continue;
      try {
        yield* walk(child, rel, next, next === 'normal' ? rules : null, includes, opts);
      } finally {
        await child.close();
      }
    } else {
      const st = await lstatOrNull(here);
      if (st?.isFile()) yield { path: rel, size: st.size, mode: st.mode & 0o777, mtimeMs: st.mtimeMs };
      else if (st && !st.isSymbolicLink() && !st.isDirectory()) opts.special?.(rel, kindOf(st));
    }
  }
}

/**
 * Rewrites the lines of the .gitignore in folder `dir` (POSIX, relative to the walk's root) so
 * that they can be added to one `ignore` instance with the rules of the folders above:
 * a pattern with a slash other than a trailing one is anchored to `dir`, any other one matches at
 * any depth below `dir`.
 */
export function rebaseGitignore(text: string, dir: string): string[] {
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/);
  if (dir === '') return lines;
  const prefix = escapeGlob(dir);
  const out: string[] = [];
  for (const line of lines) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    const negated = line.startsWith('!');
    const body = negated ? line.slice(1) : line;
    // Trailing unescaped spaces and then one trailing slash do not make a pattern anchored.
    const core = body.replace(/(?<!\\) +$/, '').replace(/\/$/, '');
    if (core === '') continue;
    const anchored = core.includes('/');
    const rebased = anchored ? `${prefix}/${body.startsWith('/') ? body.slice(1) : body}` : `${prefix}/**/${body}`;
    out.push(negated ? `!${rebased}` : rebased);
  }
  return out;
}

function escapeGlob(literal: string): string {
  return literal.replace(/[\\*?[\]]/g, '\\$&').replace(/^[!#]/, '\\$&');
}

/**
 * Matches paths against include globs and exact paths; tells which folders to look into. Gives the
 * event loop a turn whenever the walk has done a slice of work (`meter`, shared with the globs),
 * in the middle of a match if need be.
 */
class IncludeMatcher {
  private readonly exactSet: ReadonlySet<string>;

  constructor(
    private readonly globs: readonly Glob[],
    private readonly exact: readonly string[],
    private readonly meter: Meter,
  ) {
    this.exactSet = new Set(exact);
  }

  async matches(p: string): Promise<boolean> {
    if (this.exactSet.has(p)) return true;
    for (const glob of this.globs) {
      const answer = glob.matches(p);
      if (typeof answer === 'boolean' ? answer : await this.finish(answer)) return true;
    }
    return false;
  }

  /** Whether something strictly below folder `dir` could match. */
  async mayMatchUnder(dir: string): Promise<boolean> {
    if (this.exact.some((e) => e.startsWith(`${dir}/`))) return true;
    for (const glob of this.globs) {
      const answer = glob.mayMatchBelow(dir);
      if (typeof answer === 'boolean' ? answer : await this.finish(answer)) return true;
    }
    return false;
  }

  /** Counts the handling of one folder entry. */
  async entry(): Promise<void> {
    this.meter.steps += ENTRY_STEPS;
    if (this.meter.steps >= this.meter.pauseAt) await this.breathe();
  }

  /** Resumes a paused match after each turn of the event loop until it answers. */
  private async finish(paused: Paused): Promise<boolean> {
    let answer: Answer = paused;
    while (typeof answer !== 'boolean') {
      await this.breathe();
      answer = answer.resume();
    }
    return answer;
  }

  private async breathe(): Promise<void> {
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.meter.pauseAt = this.meter.steps + SLICE_STEPS;
  }
}

/**
 * A .gitignore's text, its first MAX_GITIGNORE bytes (the folder's owner may make it huge); null
 * when it is gone or no longer a regular file (never a FIFO's wait).
 */
async function readText(file: string): Promise<string | null> {
  const opened = await openRegular(file);
  if (!opened) return null;
  try {
    const buffer = Buffer.alloc(Math.min(opened.stats.size, MAX_GITIGNORE));
    const { bytesRead } = await opened.handle.read(buffer, 0, buffer.length, 0);
    return buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await opened.handle.close();
  }
}

async function lstatOrNull(file: string) {
  try {
    return await lstat(file);
  } catch (err) {
    if (isCode(err, 'ENOENT', 'ENOTDIR')) return null;
    throw err;
  }
}

function isCode(err: unknown, ...codes: string[]): boolean {
  return typeof err === 'object' && err !== null && codes.includes((err as { code?: string }).code ?? '');
}
