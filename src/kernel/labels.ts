// Validation of labels, project names and snapshot keys.
//
// Labels follow Kubernetes label syntax:
//   key   = [prefix "/"] name
//   prefix: a DNS subdomain, at most 253 characters: lower-case dot-separated parts of
//           `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, each at most 63 characters (e.g. `berth.dev`)
//   name:   1-63 characters, `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`
//   value:  0-63 characters, empty or the same shape as name
// and at most 64 labels per object. Values must be JSON strings (no numbers or booleans).
//
// Names (projects, and the templates, pools, shares and services of the catalog): 1-63
// characters, lower-case letters, digits, `.`, `_` and `-`, starting with a letter or a digit:
//   ^[a-z0-9][a-z0-9._-]{0,62}$
// so a name is always a safe single path segment (never `.`/`..`, never `*`, no `/`) and can sit in
// a URL path unescaped.
//
// Display names (token and API key names, artifact names, member emails): free text, but no
// control characters (ANSI escapes start with one), no format characters (bidi overrides can make
// `evil\u202Egnp.exe` read `evilexe.png`) other than the zero-width (non-)joiners that emoji and
// some scripts need, no line or paragraph separators, no private-use, unassigned or lone
// surrogate code points. Whatever shows a name (a terminal, a console) can show it as it is.
//
// Snapshot keys: 1-200 characters (code points) of printable text: no white space, no control,
// format, private-use, unassigned or lone-surrogate characters. Anything else, including `/`, `:`,
// `.`, `-`, `_` and non-ASCII letters, is allowed, so keys like `main/linux:x64` or
// `ci/feature-1.2` work. Keys are matched exactly or by prefix, case-sensitively.
import { ValidationError } from './errors';
import { show } from './show';

export const MAX_LABELS = 64;
const LABEL_NAME = /^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const DNS_LABEL = /^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$/;
const LABEL_RULES =
  'keys are [prefix/]name, name 1-63 characters of letters, digits, "-", "_" and "." starting and ending with a letter or digit';
const VALUE_RULES =
  'values are at most 63 characters of letters, digits, "-", "_" and "." starting and ending with a letter or digit, or empty';

/** Why `key` is not a valid label key, or null when it is. */
export function labelKeyProblem(key: string): string | null {
  if (key.length === 0) return 'empty key';
  const slash = key.lastIndexOf('/');
  let name = key;
  if (slash >= 0) {
    const prefix = key.slice(0, slash);
    name = key.slice(slash + 1);
    if (prefix.length === 0) return 'empty prefix before "/"';
    if (prefix.length > 253) return 'prefix longer than 253 characters';
    if (!prefix.split('.').every((part) => DNS_LABEL.test(part))) {
      return 'prefix must be a lower-case DNS subdomain such as example.com';
    }
  }
  if (name.length === 0) return 'empty name';
  if (name.length > 63) return 'name longer than 63 characters';
  if (!LABEL_NAME.test(name)) return LABEL_RULES;
  return null;
}

/** Why `value` is not a valid label value, or null when it is. */
export function labelValueProblem(value: string): string | null {
  if (value.length === 0) return null;
  if (value.length > 63) return 'longer than 63 characters';
  if (!LABEL_NAME.test(value)) return VALUE_RULES;
  return null;
}

/**
 * Checks a labels object (string keys to string values) and returns a copy with the keys sorted.
 * Throws a ValidationError naming the offending key.
 */
export function validateLabels(value: unknown, field = 'labels'): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new ValidationError(`${field}: must be an object of string keys to string values`, field);
  }
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length > MAX_LABELS) {
    throw new ValidationError(`${field}: at most ${MAX_LABELS} labels (got ${entries.length})`, field);
  }
  const out: [string, string][] = [];
  for (const [key, v] of entries) {
    checkLabel(key, v, field);
    out.push([key, v as string]);
  }
  return sortedObject(out);
}

function checkLabel(key: string, v: unknown, field: string): void {
  const keyProblem = labelKeyProblem(key);
  if (keyProblem) {
    throw new ValidationError(`${field}: key ${show(key)} is not valid: ${keyProblem}`, `${field}.${key}`);
  }
  if (typeof v !== 'string') {
    throw new ValidationError(`${field}: the value of ${show(key)} must be a string`, `${field}.${key}`);
  }
  const valueProblem = labelValueProblem(v);
  if (valueProblem) {
    throw new ValidationError(`${field}: the value ${show(v)} of ${show(key)} is not valid: ${valueProblem}`, `${field}.${key}`);
  }
}

/**
 * Parses repeatable `key=value` parameters (`?label=team=infra&label=tier=ci`) into a labels
 * object, with the same rules as validateLabels. The first `=` separates key and value; an empty
 * value (`key=`) is allowed, a missing `=` is not; a key given twice is refused.
 */
export function parseLabelPairs(pairs: readonly string[], field = 'label'): Record<string, string> {
  if (pairs.length > MAX_LABELS) {
    throw new ValidationError(`${field}: at most ${MAX_LABELS} labels (got ${pairs.length})`, field);
  }
  const seen = new Map<string, string>();
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq < 0) {
      throw new ValidationError(`${field}: ${show(pair)} must have the form key=value`, field);
    }
    const key = pair.slice(0, eq);
    const v = pair.slice(eq + 1);
    checkLabel(key, v, field);
    if (seen.has(key)) {
      throw new ValidationError(`${field}: key ${show(key)} is given more than once`, `${field}.${key}`);
    }
    seen.set(key, v);
  }
  return sortedObject([...seen]);
}

/** The shape of project, template, pool, share and service names. */
export const NAME_PATTERN = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const NAME_RULES = '1-63 characters of lower-case letters, digits, ".", "_" and "-", starting with a letter or digit';

/** Checks a name (see NAME_PATTERN) and returns it; the message names `field`. */
export function validateName(value: unknown, field: string): string {
  if (typeof value !== 'string') throw new ValidationError(`${field}: must be a string`, field);
  if (!NAME_PATTERN.test(value)) {
    throw new ValidationError(`${field}: ${show(value)} is not a valid name (${NAME_RULES})`, field);
  }
  return value;
}

/** Checks a project name (see NAME_PATTERN) and returns it. */
export function validateProjectName(value: unknown, field = 'project'): string {
  return validateName(value, field);
}

const DISPLAY_FORBIDDEN = /[\p{Cc}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]|(?![\u200C\u200D])\p{Cf}/u;

/** Why `value` cannot be a display name, or null when it can. */
export function displayNameProblem(value: string): string | null {
  const bad = DISPLAY_FORBIDDEN.exec(value);
  if (!bad) return null;
  const cp = bad[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
  return `contains U+${cp}; names may not contain control, format (such as bidi overrides) or separator characters`;
}

/** Checks a display name's characters and returns it; the message names `field`. */
export function validateDisplayName(value: string, field: string): string {
  const problem = displayNameProblem(value);
  if (problem) throw new ValidationError(`${field}: ${problem}`, field);
  return value;
}

export const MAX_SNAPSHOT_KEY_LENGTH = 200;
/** Snapshot keys one environment may restore from (tried in order). */
export const MAX_RESTORE_KEYS = 32;
// \p{C}: control, format, surrogate, private-use and unassigned; \p{Z}: every kind of space;
// \s adds the ASCII white space that Unicode files under Cc.
const SNAPSHOT_KEY_FORBIDDEN = /[\p{C}\p{Z}\s]/u;

/** Checks a snapshot key (see the top of this file) and returns it. */
export function validateSnapshotKey(value: unknown, field = 'snapshot'): string {
  if (typeof value !== 'string') throw new ValidationError(`${field}: must be a string`, field);
  const length = [...value].length;
  if (length === 0) throw new ValidationError(`${field}: must not be empty`, field);
  if (length > MAX_SNAPSHOT_KEY_LENGTH) {
    throw new ValidationError(`${field}: at most ${MAX_SNAPSHOT_KEY_LENGTH} characters (got ${length})`, field);
  }
  const bad = SNAPSHOT_KEY_FORBIDDEN.exec(value);
  if (bad) {
    const cp = bad[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
    throw new ValidationError(`${field}: ${show(value)} contains U+${cp} at ${bad.index}; keys are printable text without spaces`, field);
  }
  return value;
}

/** Checks the `restore` list of an environment: at most MAX_RESTORE_KEYS snapshot keys. */
export function validateRestoreKeys(keys: readonly unknown[], field = 'restore'): string[] {
  if (keys.length > MAX_RESTORE_KEYS) {
    throw new ValidationError(`${field}: at most ${MAX_RESTORE_KEYS} keys (got ${keys.length})`, field);
  }
  return keys.map((key, i) => validateSnapshotKey(key, `${field}[${i}]`));
}

function sortedObject(entries: [string, string][]): Record<string, string> {
  entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(entries);
}
