// Sync-rule globs (`include`, syntax in glob-syntax.ts), matched in linear time.
//
// A backtracking regular expression engine (picomatch's) took exponential time for `*a*a*a*b`
// against a long file name. Here a pattern compiles once to an NFA (Thompson's construction: at
// most 2 states per pattern character, braces and groups as branches, never expanded) and a match
// follows the set of live NFA states one path character at a time. Sets met before are cached as
// DFA states with their transitions, so the usual patterns cost one table look-up per character;
// a new transition costs at most 4 steps per NFA state. A match thus costs at most
// (path length + 1) × (4 × states + 1) steps whatever the pattern, and the cache is bounded.
import { type Node, parseGlob } from './glob-syntax';

export { GlobSyntaxError } from './glob-syntax';

/** Where matches add up their work, in steps (see the top of this file), and when they pause. */
export interface Meter {
  steps: number;
  pauseAt: number;
}

/** A match's answer, or the match paused for its caller to give the event loop a turn. */
export type Answer = boolean | Paused;
export interface Paused {
  /** Goes on with the match. The glob must not run another match before (one at a time). */
  resume(): Answer;
}

const SLASH = 0x2f;

// NFA states. STAR and ANYTHING loop on themselves and also lead on to the next state.
const CHAR = 0;
const ONE = 1;
const STAR = 2;
const ANYTHING = 3;
const CLASS = 4;
const SPLIT = 5;
const JUMP = 6;
const MATCH = 7;

/** At most this many DFA states are cached per glob, with their NFA states (at most CACHE_WORDS in all, or one set). */
const CACHE_STATES = 256;
const CACHE_WORDS = 1 << 15;
/** At most this many transitions on other characters than ASCII are cached per glob. */
const CACHE_OTHER = 4096;

/** One compiled pattern. It also matches the path spelled exactly like it (picomatch did). */
export class Glob {
  private readonly op: Uint8Array;
  private readonly arg: Int32Array;
  private readonly alt: Int32Array;
  private readonly classes: { ranges: number[]; negated: boolean }[] = [];
  /** Scratch for a new transition: the generation that reached each NFA state, a work stack, the set reached. */
  private readonly mark: Int32Array;
  private readonly stack: Int32Array;
  private readonly found: Int32Array;
  private gen = 0;
  /** The DFA cache. State s holds the NFA states pool[begin[s]] to pool[end[s] - 1]. */
  private pool = new Int32Array(256);
  private used = 0;
  private readonly begin: number[] = [];
  private readonly end: number[] = [];
  private readonly accepting: boolean[] = [];
  /** The last DFA state made for each hash of NFA states (another set with that hash makes a duplicate, which is harmless). */
  private readonly ids = new Map<number, number>();
  /** Transitions on ASCII characters, at state × 128 + character: the next state + 1, 0 when not known yet. */
  private ascii = new Int32Array(0);
  private readonly other = new Map<number, number>();
  private start = -1;

  /** Compiles `source`; throws GlobSyntaxError. Matches add their steps to `meter`. */
  constructor(
    readonly source: string,
    readonly meter: Meter = { steps: 0, pauseAt: Number.POSITIVE_INFINITY },
  ) {
    const ops: number[] = [];
    const args: number[] = [];
    const alts: number[] = [];
    const emit = (o: number, a = 0, b = 0): number => {
      ops.push(o);
      args.push(a);
      alts.push(b);
      return ops.length - 1;
    };
    const compile = (node: Node): void => {
      switch (node.kind) {
        case 'char':
          emit(CHAR, node.code);
          return;
        case 'one':
          emit(ONE);
          return;
        case 'star':
          emit(STAR);
          return;
        case 'anything':
          emit(ANYTHING);
          return;
        case 'class':
          emit(CLASS, this.classes.push(node) - 1);
          return;
        case 'seq':
          for (const item of node.items) compile(item);
          return;
        case 'alt': {
          const jumps: number[] = [];
          for (const option of node.options.slice(0, -1)) {
            const split = emit(SPLIT, ops.length + 1);
            compile(option);
            jumps.push(emit(JUMP));
            alts[split] = ops.length;
          }
          compile(node.options.at(-1)!);
          for (const j of jumps) args[j] = ops.length;
          return;
        }
        case 'repeat': {
          const start = ops.length;
          if (node.min === 1) {
            compile(node.body);
            emit(SPLIT, start, ops.length + 1);
            return;
          }
          const split = emit(SPLIT, start + 1);
          compile(node.body);
          if (node.many) emit(JUMP, start);
          alts[split] = ops.length;
          return;
        }
      }
    };
    compile(parseGlob(source));
    emit(MATCH);
    this.op = Uint8Array.from(ops);
    this.arg = Int32Array.from(args);
    this.alt = Int32Array.from(alts);
    this.mark = new Int32Array(ops.length);
    this.stack = new Int32Array(3 * ops.length + 1);
    this.found = new Int32Array(ops.length);
  }

  /** NFA states (see the top of this file for what a match costs). */
  get size(): number {
    return this.op.length;
  }

  /** Whether `path` matches, or Paused when `meter.steps` reached `meter.pauseAt` first. */
  matches(path: string): Answer {
    if (path === this.source) return true;
    return this.run(path, 0, -1, false);
  }

  /** Whether something strictly below folder `dir` could match (it may still not, but never the reverse), or Paused. */
  mayMatchBelow(dir: string): Answer {
    if (this.source.startsWith(`${dir}/`)) return true;
    return this.run(`${dir}/`, 0, -1, true);
  }

  /**
   * Follows `text` from index `from` in DFA state `s` (-1: the start), and tells whether its end
   * state accepts (`below`: has a state other than MATCH). Stops early in a state with no NFA
   * state. Pauses only before a new transition: a known one costs one step.
   */
  private run(text: string, from: number, s: number, below: boolean): Answer {
    const { meter } = this;
    if (s < 0) {
      if (this.start < 0) this.start = this.follow(-1, 0);
      s = this.start;
    }
    let i = from;
    for (; i < text.length && this.end[s] > this.begin[s]; i++) {
      const c = text.charCodeAt(i);
      const known = c < 128 ? this.ascii[s * 128 + c] : (this.other.get(s * 0x10000 + c) ?? 0);
      if (known > 0) {
        s = known - 1;
        continue;
      }
      if (meter.steps >= meter.pauseAt) {
        meter.steps += i - from;
        const at = i;
        const state = s;
        return { resume: () => this.run(text, at, state, below) };
      }
      s = this.follow(s, c);
    }
    meter.steps += i - from;
    return below ? this.end[s] - this.begin[s] > (this.accepting[s] ? 1 : 0) : this.accepting[s];
  }

  /** The state after `c` from `s` (from nothing to the start state when `s` is -1), through the NFA; cached. */
  private follow(s: number, c: number): number {
    const { op, arg, alt, classes, mark, stack, found, pool } = this;
    if (this.gen === 0x7fffffff) {
      mark.fill(0);
      this.gen = 0;
    }
    const gen = ++this.gen;
    let top = 0;
    let work = 0;
    if (s < 0) stack[top++] = 0;
    for (let i = s < 0 ? 0 : this.begin[s]; i < (s < 0 ? 0 : this.end[s]); i++) {
      const pc = pool[i];
      work++;
      switch (op[pc]) {
        case CHAR:
          if (c === arg[pc]) stack[top++] = pc + 1;
          break;
        case ONE:
          if (c !== SLASH) stack[top++] = pc + 1;
          break;
        case STAR:
          if (c !== SLASH) stack[top++] = pc;
          break;
        case ANYTHING:
          stack[top++] = pc;
          break;
        case CLASS:
          if (c !== SLASH && inClass(classes[arg[pc]], c)) stack[top++] = pc + 1;
          break;
      }
    }
    // What those lead to without reading a character: the set reached, and a hash of it that does
    // not depend on the order.
    let size = 0;
    let hash = 0;
    while (top > 0) {
      const pc = stack[--top];
      if (mark[pc] === gen) continue;
      mark[pc] = gen;
      work++;
      if (op[pc] === SPLIT) {
        stack[top++] = alt[pc];
        stack[top++] = arg[pc];
        continue;
      }
      if (op[pc] === JUMP) {
        stack[top++] = arg[pc];
        continue;
      }
      if (op[pc] === STAR || op[pc] === ANYTHING) stack[top++] = pc + 1;
      found[size++] = pc;
      hash = (hash + Math.imul(pc + 1, 0x9e3779b1)) | 0;
    }
    let next = this.ids.get(hash) ?? -1;
    if (next >= 0 && this.end[next] - this.begin[next] === size) {
      let i = this.begin[next];
      while (i < this.end[next] && mark[pool[i]] === gen) i++;
      work += i - this.begin[next];
      if (i < this.end[next]) next = -1;
    } else {
      next = -1;
    }
    if (next < 0) {
      if (this.begin.length === CACHE_STATES || this.used + size > Math.max(CACHE_WORDS, op.length)) {
        this.clear();
        s = -1; // its transitions went with the cache
      }
      if (this.pool.length < this.used + size) {
        const grown = new Int32Array(Math.max(2 * this.pool.length, this.used + size));
        grown.set(this.pool);
        this.pool = grown;
      }
      this.pool.set(found.subarray(0, size), this.used);
      next = this.begin.push(this.used) - 1;
      this.used += size;
      this.end.push(this.used);
      this.accepting.push(mark[op.length - 1] === gen);
      this.ids.set(hash, next);
      if (this.ascii.length <= next * 128) {
        const grown = new Int32Array(Math.min(2 * (next + 1), CACHE_STATES) * 128);
        grown.set(this.ascii);
        this.ascii = grown;
      }
      work += size;
    }
    if (s >= 0) {
      if (c < 128) this.ascii[s * 128 + c] = next + 1;
      else if (this.other.size < CACHE_OTHER) this.other.set(s * 0x10000 + c, next + 1);
    }
    this.meter.steps += work;
    return next;
  }

  private clear(): void {
    this.used = 0;
    this.begin.length = 0;
    this.end.length = 0;
    this.accepting.length = 0;
    this.ids.clear();
    this.ascii.fill(0);
    this.other.clear();
    this.start = -1;
  }
}

function inClass(cls: { ranges: number[]; negated: boolean }, c: number): boolean {
  const { ranges } = cls;
  for (let i = 0; i < ranges.length; i += 2) {
    if (c >= ranges[i] && c <= ranges[i + 1]) return !cls.negated;
  }
  return cls.negated;
}
