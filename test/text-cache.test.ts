import { describe, expect, it } from 'vitest';
import { TextCache } from '../src/edges/graphql/text-cache';

// The caches of parsed documents (yoga's parser cache, the POST path's compiled documents) are
// bounded by the text they keep: a few large documents must not hold the server's memory.
describe('TextCache', () => {
  it('keeps at most its budget of text, the least recently used leaving first', () => {
    const cache = new TextCache<number>(10, 100);
    cache.set('aaaa', 1);
    cache.set('bbbb', 2);
    expect(cache.get('aaaa')).toBe(1);
    cache.set('cccc', 3);
    expect(cache.get('bbbb')).toBeUndefined();
    expect(cache.get('aaaa')).toBe(1);
    expect(cache.get('cccc')).toBe(3);
    // One large text pushes out as many as it needs.
    cache.set('dddddddd', 4);
    expect(cache.size).toBe(1);
    expect(cache.get('dddddddd')).toBe(4);
  });

  it('keeps at most its number of entries', () => {
    const cache = new TextCache<number>(1_000, 2);
    cache.set('a', 1);
    cache.set('b', 2);
    cache.set('c', 3);
    expect([cache.get('a'), cache.get('b'), cache.get('c')]).toEqual([undefined, 2, 3]);
  });

  it('keeps no text larger than its whole budget, and counts a text set again once', () => {
    const cache = new TextCache<number>(10, 100);
    cache.set('aaaa', 1);
    cache.set('x'.repeat(11), 2);
    expect(cache.get('x'.repeat(11))).toBeUndefined();
    expect(cache.get('aaaa')).toBe(1);
    for (let i = 0; i < 5; i++) cache.set('bbbb', i);
    expect(cache.get('aaaa')).toBe(1);
    expect(cache.get('bbbb')).toBe(4);
  });
});
