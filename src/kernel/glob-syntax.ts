// The syntax of sync-rule globs (`include`): parses a pattern into a tree that glob.ts compiles.
//
// picomatch's syntax with `dot: true`, less what no linear-time matcher can do:
// - `*`: any characters but `/` (dot files too). `?`: one character but `/`.
// - `[abc]`, `[a-z]`, `[!a]` and `[^a]` (negated), POSIX classes (`[[:alpha:]]`); `]` first is a
//   member, `\` escapes. A class never matches `/`. A class of plain characters (`[id]`) also
//   matches its own text, as with picomatch, so `app/[id]/**` reaches a folder named `[id]`.
// - `**` alone in a segment: any number of segments (`**/x` matches `x`; `a/**` matches `a`, but
//   after a `*` it needs its slash: `src/*/**` is what is inside src's folders). Inside braces or
//   a group it is any characters, `/` included; elsewhere (`a**`, `***`) it is `*`.
// - `{a,b}`: alternatives, nested or not; `{a..e}`: a range of single characters. Braces without
//   a comma are literal (`{a}`); other ranges (`{1..10}`) are refused.
// - `@(a|b)` and `(a|b)`: one of; `?(…)` at most one, `*(…)` any number, `+(…)` at least one.
//   `!(…)` (anything but) is refused: it has no linear-time matcher. An unclosed `(` is literal.
// - `\x` matches `x`.
// Refused (GlobSyntaxError): an unclosed `[` or `{`, a trailing `\`, a backward range (`[z-a]`),
// an unknown POSIX class, `!(…)`, a range of more than single characters.

export class GlobSyntaxError extends Error {}

export type Node =
  | { kind: 'char'; code: number }
  /** `?` */
  | { kind: 'one' }
  /** `*` */
  | { kind: 'star' }
  /** `**` as any characters, `/` included */
  | { kind: 'anything' }
  | { kind: 'class'; ranges: number[]; negated: boolean }
  | { kind: 'seq'; items: Node[] }
  | { kind: 'alt'; options: Node[] }
  | { kind: 'repeat'; body: Node; min: 0 | 1; many: boolean };

/** A class that also matches its own text: no character of glob or range syntax inside. */
const PLAIN_CLASS = /^\[[^\\!^\-*+?.${}()|[\]]+\]$/;

/** POSIX classes, as picomatch has them: each pair of characters is the first and last of a range. */
const POSIX_CLASSES: Record<string, string> = {
  alnum: 'azAZ09',
  alpha: 'azAZ',
  ascii: '\x00\x7f',
  blank: '  \t\t',
  cntrl: '\x00\x1f\x7f\x7f',
  digit: '09',
  graph: '!~',
  lower: 'az',
  print: ' ~',
  punct: '!/:@[`{~',
  space: '  \t\r',
  upper: 'AZ',
  word: 'AZaz09__',
  xdigit: 'AFaf09',
};

/** The tree of `pattern`; throws GlobSyntaxError. */
export function parseGlob(pattern: string): Node {
  return new Parser(pattern).parse();
}

/** Recursive descent over the pattern, after one pass that pairs its brackets. */
class Parser {
  /** For each `{` and `(` that has its closer, the closer's index; -1 elsewhere. */
  private readonly closer: Int32Array;

  constructor(private readonly p: string) {
    this.closer = new Int32Array(p.length).fill(-1);
    const open: number[] = [];
    for (let i = 0; i < p.length; i++) {
      const c = p[i];
      if (c === '\\') {
        if (i + 1 >= p.length) throw new GlobSyntaxError('ends with "\\"');
        i++;
      } else if (c === '[') {
        i = this.classEnd(i);
      } else if (c === '{' || c === '(') {
        open.push(i);
      } else if (c === '}' || c === ')') {
        const want = c === '}' ? '{' : '(';
        const at = open.findLastIndex((o) => p[o] === want);
        if (at < 0) continue; // a stray closer is literal
        const inner = open.splice(at);
        const unclosed = inner.find((o) => p[o] === '{' && o !== inner[0]);
        if (unclosed !== undefined) throw new GlobSyntaxError(`unclosed "{" at ${unclosed}`);
        this.closer[inner[0]] = i;
      }
    }
    const unclosed = open.find((o) => p[o] === '{');
    if (unclosed !== undefined) throw new GlobSyntaxError(`unclosed "{" at ${unclosed}`);
  }

  parse(): Node {
    return this.seq(0, this.p.length, true);
  }

  /** The pattern between `s` and `e`; `top` when that is the whole pattern. */
  private seq(s: number, e: number, top: boolean): Node {
    const { p } = this;
    const items: Node[] = [];
    let i = s;
    while (i < e) {
      const c = p[i];
      if ('*?+@!'.includes(c) && this.opensGroup(i)) {
        const group = this.closer[i + 1];
        if (c === '!') throw new GlobSyntaxError(`"!(…)" at ${i} is not supported`);
        const body = this.alternatives(i + 2, group, '|');
        items.push(c === '@' ? body : { kind: 'repeat', body, min: c === '+' ? 1 : 0, many: c !== '?' });
        i = group + 1;
      } else if (c === '(' && this.closer[i] >= 0) {
        items.push(this.alternatives(i + 1, this.closer[i], '|'));
        i = this.closer[i] + 1;
      } else if (c === '{' && this.closer[i] >= 0) {
        items.push(this.brace(i));
        i = this.closer[i] + 1;
      } else if (c === '[') {
        const end = this.classEnd(i);
        items.push(this.bracket(i, end));
        i = end + 1;
      } else if (c === '*') {
        let j = this.starsEnd(i, e);
        const alone = this.alone(i, j, s, e);
        // `**/**` is `**`
        while (alone && top && j < e && this.alone(j + 1, this.starsEnd(j + 1, e), s, e)) j = this.starsEnd(j + 1, e);
        if (!alone) {
          items.push({ kind: 'star' });
        } else if (!top || (i === s && j === e)) {
          items.push({ kind: 'anything' });
        } else if (j < e) {
          items.push(optional({ kind: 'anything' }, char('/')));
          j++; // the slash after it
        } else if (items.at(-2)?.kind === 'star') {
          // After a `*`, `/**` needs its slash: `src/*/**` is what is in src's folders, as with picomatch.
          items.push({ kind: 'anything' });
        } else {
          // `a/**` matches `a` too: the slash before it goes with the segments.
          items.splice(-1, 1, optional(char('/'), { kind: 'anything' }));
        }
        i = j;
      } else if (c === '?') {
        items.push({ kind: 'one' });
        i++;
      } else if (c === '\\') {
        items.push(char(p[i + 1]));
        i += 2;
      } else {
        items.push(char(c));
        i++;
      }
    }
    return items.length === 1 ? items[0] : { kind: 'seq', items };
  }

  /** The end of the run of `*` at `i` (a `*(` is not in it). */
  private starsEnd(i: number, e: number): number {
    let j = i;
    while (j < e && this.p[j] === '*' && !this.opensGroup(j)) j++;
    return j;
  }

  /** Whether the stars from `i` to `j` are a `**` alone between slashes (or the ends of `s`..`e`). */
  private alone(i: number, j: number, s: number, e: number): boolean {
    return j - i === 2 && (i === s || this.p[i - 1] === '/') && (j === e || this.p[j] === '/');
  }

  /** Whether the character at `i` is an extglob's (`*(`, `@(`, …): followed by a closed `(`. */
  private opensGroup(i: number): boolean {
    return this.p[i + 1] === '(' && this.closer[i + 1] >= 0;
  }

  /** Between `s` and `e`, alternatives split at `sep` outside nested brackets. */
  private alternatives(s: number, e: number, sep: string): Node {
    const options: Node[] = [];
    let from = s;
    for (const at of this.separators(s, e, sep)) {
      options.push(this.seq(from, at, false));
      from = at + 1;
    }
    options.push(this.seq(from, e, false));
    return options.length === 1 ? options[0] : { kind: 'alt', options };
  }

  private separators(s: number, e: number, sep: string): number[] {
    const { p } = this;
    const out: number[] = [];
    for (let i = s; i < e; i++) {
      if (p[i] === '\\') i++;
      else if (p[i] === '[') i = this.classEnd(i);
      else if (this.closer[i] >= 0) i = this.closer[i];
      else if (p[i] === sep) out.push(i);
    }
    return out;
  }

  /** `{…}` at `i`: alternatives, a range of single characters, or literal braces. */
  private brace(i: number): Node {
    const { p } = this;
    const e = this.closer[i];
    if (this.separators(i + 1, e, ',').length > 0) return this.alternatives(i + 1, e, ',');
    const body = p.slice(i + 1, e);
    if (body.includes('..')) {
      const range = /^(.)\.\.(.)$/s.exec(body);
      if (!range) throw new GlobSyntaxError(`"{${body}}" at ${i}: only ranges of single characters ({a..e}) are supported`);
      return { kind: 'class', ranges: codeRange(range[1], range[2], i), negated: false };
    }
    return { kind: 'seq', items: [char('{'), this.seq(i + 1, e, false), char('}')] };
  }

  /** Index of the `]` closing the class that opens at `i`. */
  private classEnd(i: number): number {
    const { p } = this;
    let j = i + 1;
    if (p[j] === '!' || p[j] === '^') j++;
    if (p[j] === ']') j++;
    for (; j < p.length; j++) {
      if (p[j] === '\\') j++;
      else if (p[j] === '[' && p[j + 1] === ':') {
        const end = p.indexOf(':]', j + 2);
        if (end >= 0) j = end + 1;
      } else if (p[j] === ']') return j;
    }
    throw new GlobSyntaxError(`unclosed "[" at ${i}`);
  }

  /** The class from `[` at `i` to `]` at `end`. */
  private bracket(i: number, end: number): Node {
    const { p } = this;
    let j = i + 1;
    const negated = p[j] === '!' || p[j] === '^';
    if (negated) j++;
    const ranges: number[] = [];
    while (j < end) {
      if (p[j] === '[' && p[j + 1] === ':') {
        const close = p.indexOf(':]', j + 2);
        if (close >= 0 && close < end) {
          const name = p.slice(j + 2, close);
          if (!Object.hasOwn(POSIX_CLASSES, name)) throw new GlobSyntaxError(`unknown class "[:${name}:]" at ${j}`);
          const members = POSIX_CLASSES[name];
          for (let k = 0; k < members.length; k += 2) ranges.push(members.charCodeAt(k), members.charCodeAt(k + 1));
          j = close + 2;
          continue;
        }
      }
      const [lo, afterLo] = this.member(j);
      if (p[afterLo] === '-' && afterLo + 1 < end) {
        const [hi, afterHi] = this.member(afterLo + 1);
        ranges.push(...codeRange(lo, hi, j));
        j = afterHi;
      } else {
        ranges.push(lo.charCodeAt(0), lo.charCodeAt(0));
        j = afterLo;
      }
    }
    const cls: Node = { kind: 'class', ranges, negated };
    const text = p.slice(i, end + 1);
    // picomatch let a class of plain characters match its own text too.
    if (!PLAIN_CLASS.test(text)) return cls;
    return { kind: 'alt', options: [cls, { kind: 'seq', items: text.split('').map(char) }] };
  }

  /** The class member at `j` (`\` escapes) and the index after it. */
  private member(j: number): [string, number] {
    return this.p[j] === '\\' ? [this.p[j + 1], j + 2] : [this.p[j], j + 1];
  }
}

function char(c: string): Node {
  return { kind: 'char', code: c.charCodeAt(0) };
}

/** `first` then `second`, or nothing. */
function optional(first: Node, second: Node): Node {
  return { kind: 'repeat', body: { kind: 'seq', items: [first, second] }, min: 0, many: false };
}

function codeRange(lo: string, hi: string, at: number): [number, number] {
  const a = lo.charCodeAt(0);
  const b = hi.charCodeAt(0);
  if (a > b) throw new GlobSyntaxError(`range "${lo}-${hi}" at ${at} is backwards`);
  return [a, b];
}
