import { describe, expect, it } from 'vitest';
import {
  labelKeyProblem,
  labelValueProblem,
  MAX_LABELS,
  parseLabelPairs,
  validateLabels,
  validateName,
  validateProjectName,
  validateSnapshotKey,
} from '../src/kernel/labels';
// names.ts has no test file of its own; its few checks live here.
import { GENERATED_NAME, generateName, isId, NAME_WORDS, newId, randomBase32 } from '../src/kernel/names';
import { thrown } from './helpers/thrown';

const n63 = 'a'.repeat(63);
const n64 = 'a'.repeat(64);

describe('label keys', () => {
  const good = [
    'a',
    'A',
    '1',
    'team',
    'Team',
    'app.kubernetes.io/name',
    'example.com/a',
    'berth/tier',
    'a-b_c.d',
    'a1',
    'x.y',
    n63,
    `${'a'.repeat(63)}.com/${n63}`,
    `${['a'.repeat(63), 'b'.repeat(63), 'c'.repeat(63), 'd'.repeat(61)].join('.')}/x`, // 253-char prefix
    'constructor',
    'toString',
  ];
  it.each(good)('accepts %j', (key) => {
    expect(labelKeyProblem(key)).toBeNull();
    expect(validateLabels({ [key]: 'v' })).toEqual({ [key]: 'v' });
  });

  const bad = [
    '',
    n64,
    '-a',
    'a-',
    '_a',
    'a_',
    '.a',
    'a.',
    'a b',
    'a/b/c',
    '/a',
    'a/',
    'Example.com/a', // prefix must be lower case
    'ex_ample.com/a',
    '-ex.com/a',
    'ex..com/a',
    `${['a'.repeat(63), 'b'.repeat(63), 'c'.repeat(63), 'd'.repeat(62)].join('.')}/x`, // 254-char prefix
    `${'a'.repeat(64)}.com/x`,
    'café',
    'a:b',
    'a=b',
    '__proto__',
    'a\u0000',
    'ünicode',
  ];
  it.each(bad)('refuses %j naming the key', (key) => {
    expect(labelKeyProblem(key)).not.toBeNull();
    const err = thrown(() => validateLabels({ [key]: 'v' }));
    expect(err.message).toContain(`key ${JSON.stringify(key).slice(0, 60)}`); // long keys are cut at 100
    expect(err.message.startsWith('labels: ')).toBe(true);
    expect(err.field).toBe(`labels.${key}`);
  });
});

describe('label values', () => {
  const good = ['', 'v', 'V1', n63, 'a.b-c_d', '1.2.3', 'x'];
  it.each(good)('accepts %j', (value) => {
    expect(labelValueProblem(value)).toBeNull();
    expect(validateLabels({ k: value })).toEqual({ k: value });
  });

  const bad = [n64, '-v', 'v-', ' v', 'a b', 'a/b', 'é', '.', '_', 'a=b', 'a\n'];
  it.each(bad)('refuses %j naming the key', (value) => {
    expect(labelValueProblem(value)).not.toBeNull();
    const err = thrown(() => validateLabels({ team: value }));
    expect(err.message).toContain('"team"');
    expect(err.field).toBe('labels.team');
  });

  it.each([[1], [true], [null], [{}], [['a']]])('refuses the non-string value %j', (value) => {
    const err = thrown(() => validateLabels({ team: value }));
    expect(err.message).toBe('labels: the value of "team" must be a string');
  });
});

describe('validateLabels', () => {
  it('treats absent labels as empty', () => {
    expect(validateLabels(undefined)).toEqual({});
    expect(validateLabels(null)).toEqual({});
    expect(validateLabels({})).toEqual({});
  });

  it.each([['x'], [5], [true], [['a=b']]])('refuses %j, which is not an object', (value) => {
    expect(thrown(() => validateLabels(value, 'filter')).message).toMatch(/^filter: must be an object/);
  });

  it('returns a copy with sorted keys', () => {
    const input = { b: '2', a: '1', 'x.io/c': '3' };
    const out = validateLabels(input);
    expect(Object.keys(out)).toEqual(['a', 'b', 'x.io/c']);
    expect(out).not.toBe(input);
  });

  it('allows 64 labels and refuses 65', () => {
    const labels = Object.fromEntries(Array.from({ length: MAX_LABELS }, (_, i) => [`k${i}`, 'v']));
    expect(Object.keys(validateLabels(labels))).toHaveLength(64);
    expect(thrown(() => validateLabels({ ...labels, extra: 'v' })).message).toBe('labels: at most 64 labels (got 65)');
  });

  it('does not let a __proto__ key through from JSON', () => {
    const parsed = JSON.parse('{"__proto__": "x"}') as unknown;
    expect(() => validateLabels(parsed)).toThrow(/key "__proto__"/);
  });
});

describe('parseLabelPairs', () => {
  it('parses repeatable key=value pairs', () => {
    expect(parseLabelPairs([])).toEqual({});
    expect(parseLabelPairs(['team=infra', 'tier=ci', 'berth.dev/owner=ann', 'empty='])).toEqual({
      team: 'infra',
      tier: 'ci',
      'berth.dev/owner': 'ann',
      empty: '',
    });
  });

  const bad: [string[], RegExp][] = [
    [['team'], /must have the form key=value/],
    [['=x'], /key "" is not valid/],
    [['team=a=b'], /the value "a=b" of "team"/],
    [['team=a b'], /the value "a b" of "team"/],
    [['bad key=x'], /key "bad key"/],
    [['team=a', 'team=b'], /key "team" is given more than once/],
    [['team=a', 'team=a'], /given more than once/],
  ];
  it.each(bad)('refuses %j', (pairs, message) => {
    expect(() => parseLabelPairs(pairs)).toThrow(message);
  });

  it('uses the given field name and caps the count', () => {
    expect(() => parseLabelPairs(['x'], 'labels')).toThrow(/^labels: /);
    const many = Array.from({ length: 65 }, (_, i) => `k${i}=v`);
    expect(() => parseLabelPairs(many)).toThrow(/at most 64 labels/);
  });
});

describe('project names', () => {
  const good = ['default', 'a', '0', 'my-project', 'my_project', 'my.project', 'a-', 'team1', 'a'.repeat(63)];
  it.each(good)('accepts %j', (name) => {
    expect(validateProjectName(name)).toBe(name);
  });

  const bad: unknown[] = ['', 'A', 'MyProject', '-a', '_a', '.a', '.', '..', 'a/b', 'a b', '*', 'a'.repeat(64), 'é', 5, null];
  it.each(bad)('refuses %j', (name) => {
    const err = thrown(() => validateProjectName(name));
    expect(err.field).toBe('project');
    expect(err.message.startsWith('project: ')).toBe(true);
  });

  it('names the given field', () => {
    expect(() => validateName('Bad', 'templates[0].name')).toThrow(/^templates\[0\]\.name: "Bad" is not a valid name/);
  });
});

describe('snapshot keys', () => {
  const good = [
    'main',
    'a',
    'ci/feature-1.2',
    'main/linux:x64',
    'deps:v1/2024-05-01T10:00:00Z',
    'a_b.c-d',
    'k'.repeat(200),
    'é'.repeat(200), // characters, not bytes
    'naïve/日本',
    '😀',
    '~!@#$%^&*()[]{}<>?|+=\'"`,;',
  ];
  it.each(good)('accepts %j', (key) => {
    expect(validateSnapshotKey(key)).toBe(key);
  });

  const bad: unknown[] = [
    '',
    'k'.repeat(201),
    'a b',
    ' a',
    'a ',
    'a\tb',
    'a\nb',
    'a\rb',
    'a\u0000b',
    'a\u007fb',
    'a\u0085b',
    'a\u00a0b', // no-break space
    'a\u2003b', // em space
    'a\u200bb', // zero-width space (format)
    'a\ufeffb',
    'a\ud800b', // lone surrogate
    'a\ue000b', // private use
    5,
    null,
  ];
  it.each(bad)('refuses %j', (key) => {
    const err = thrown(() => validateSnapshotKey(key, 'restore[0]'));
    expect(err.field).toBe('restore[0]');
    expect(err.message.startsWith('restore[0]: ')).toBe(true);
  });
});

describe('names and ids', () => {
  it('has two lists of about 60 distinct lower-case words', () => {
    for (const list of [NAME_WORDS.adjectives, NAME_WORDS.nouns]) {
      expect(list.length).toBeGreaterThanOrEqual(60);
      expect(new Set(list).size).toBe(list.length);
      for (const word of list) expect(word).toMatch(/^[a-z]+$/);
    }
  });

  it('generates adjective-noun-NNNN names', () => {
    const names = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const name = generateName();
      expect(name).toMatch(GENERATED_NAME);
      const [adjective, noun, digits] = name.split('-');
      expect(NAME_WORDS.adjectives).toContain(adjective);
      expect(NAME_WORDS.nouns).toContain(noun);
      expect(Number(digits)).toBeGreaterThanOrEqual(1000);
      expect(Number(digits)).toBeLessThanOrEqual(9999);
      names.add(name);
    }
    expect(names.size).toBeGreaterThan(1990); // 36.9M possibilities
  });

  it('makes prefixed ids of 20 base32 characters', () => {
    const ids = new Set<string>();
    for (const prefix of ['env', 'sb', 'art', 'snap', 'tok', 'key', 'org', 'usr', 'x1']) {
      for (let i = 0; i < 200; i++) {
        const id = newId(prefix);
        expect(id).toMatch(new RegExp(`^${prefix}_[a-z2-7]{20}$`));
        expect(isId(id, prefix)).toBe(true);
        ids.add(id);
      }
    }
    expect(ids.size).toBe(9 * 200);
    expect(isId('env_abc')).toBe(false);
    expect(isId('brave-otter-4821')).toBe(false);
    expect(isId(newId('env'), 'sb')).toBe(false);
  });

  it('uses every base32 character', () => {
    const seen = new Set(randomBase32(5000));
    expect([...seen].sort().join('')).toBe('234567abcdefghijklmnopqrstuvwxyz');
    expect(randomBase32(1)).toHaveLength(1);
    expect(randomBase32(7)).toHaveLength(7);
  });

  it('refuses bad prefixes', () => {
    expect(() => newId('')).toThrow();
    expect(() => newId('Env')).toThrow();
    expect(() => newId('env_')).toThrow();
  });
});
