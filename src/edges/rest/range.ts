// HTTP Range requests (RFC 9110 §14) for downloads: one byte range per request.

/** An inclusive byte range to send with 206, 'unsatisfiable' for 416, or undefined: send it all. */
export type RangeRequest = { start: number; end: number } | 'unsatisfiable' | undefined;

/**
 * Reads a Range header against a representation of `size` bytes. Supported: `bytes=a-b`,
 * `bytes=a-` and `bytes=-n` (the last n bytes). Another unit or several ranges are ignored (the
 * whole body is sent, which RFC 9110 allows); a malformed or unsatisfiable byte range is 416.
 */
export function parseRange(header: string | undefined, size: number): RangeRequest {
  if (header === undefined) return undefined;
  const m = /^\s*bytes\s*=\s*(.*?)\s*$/i.exec(header);
  if (!m) return undefined;
  if (m[1]!.includes(',')) return undefined;
  const spec = m[1]!;
  const bounded = /^(\d+)-(\d*)$/.exec(spec);
  if (bounded) {
    const start = Number(bounded[1]);
    const end = bounded[2] ? Number(bounded[2]) : size - 1;
    if (end < start || start >= size) return 'unsatisfiable';
    return { start, end: Math.min(end, size - 1) };
  }
  const suffix = /^-(\d+)$/.exec(spec);
  if (suffix) {
    const n = Number(suffix[1]);
    if (n === 0) return 'unsatisfiable';
    // A suffix of an empty body is the whole (empty) body: there is no byte range to name.
    if (size === 0) return undefined;
    return { start: Math.max(0, size - n), end: size - 1 };
  }
  return 'unsatisfiable';
}

/** Whether an If-None-Match header matches `etag` (weak comparison, as RFC 9110 asks for GET). */
export function etagMatches(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  const bare = (tag: string) => tag.trim().replace(/^W\//, '');
  return header.split(',').some((tag) => tag.trim() === '*' || bare(tag) === bare(etag));
}

/** `attachment` with the file's base name, ASCII fallback plus RFC 8187 UTF-8 form. */
export function contentDisposition(name: string): string {
  const base = name.split('/').filter(Boolean).pop() ?? 'download';
  const ascii = base.replace(/[^\x20-\x7e]|["\\%]/g, '_');
  const encoded = encodeURIComponent(base).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encoded}`;
}
