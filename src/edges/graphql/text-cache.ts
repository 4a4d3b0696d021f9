// Caches keyed by a client's document text (yoga's parser cache, the POST path's compiled
// documents). What a parsed document costs grows with its text — tens of times the text, with
// graphql-js's tokens and locations — so counting entries alone lets a few large documents hold
// hundreds of MiB: these caches bound the text they keep, and the number of entries.

/** Most document text one cache keeps, in UTF-16 code units (about a thousand ordinary documents). */
export const MAX_CACHED_TEXT = 1024 * 1024;
/** Most documents one cache keeps. */
export const MAX_CACHED_DOCUMENTS = 1_000;

/** Least recently used first out, once the texts together pass `maxText` or there are more than `maxEntries`. */
export class TextCache<T> {
  private readonly entries = new Map<string, T>();
  private text = 0;

  constructor(
    private readonly maxText = MAX_CACHED_TEXT,
    private readonly maxEntries = MAX_CACHED_DOCUMENTS,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  get(key: string): T | undefined {
    const value = this.entries.get(key);
    if (value === undefined) return undefined;
    // Map order is insertion order: moved to the end, the most recently used.
    this.entries.delete(key);
    this.entries.set(key, value);
    return value;
  }

  set(key: string, value: T): void {
    // A text larger than the whole budget would only push everything else out.
    if (key.length > this.maxText) return;
    if (this.entries.delete(key)) this.text -= key.length;
    this.entries.set(key, value);
    this.text += key.length;
    for (const oldest of this.entries.keys()) {
      if (this.text <= this.maxText && this.entries.size <= this.maxEntries) break;
      this.entries.delete(oldest);
      this.text -= oldest.length;
    }
  }
}
