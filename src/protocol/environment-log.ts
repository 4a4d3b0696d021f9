// An environment's log as its node and the server share it (docs/environments.md, "Lifecycle
// commands and the environment's log"): how much of it is kept, how long a piece is, what Berth's
// own lines are called, and where a log is cut.

/**
 * The most text an environment's log keeps (UTF-8 bytes): its node sends no more of one start, and
 * the server stores no more; a line of Berth's says where it was cut.
 */
export const MAX_ENVIRONMENT_LOG = 1024 * 1024;
/** The most characters of one `env-log` piece (whole lines where they fit). */
export const ENV_LOG_PIECE = 8 * 1024;
/** The step of Berth's own lines in a log (a command that failed, a log cut short). */
export const BERTH_STEP = 'berth';

/** Berth's line where a log was cut at `maxBytes`. */
export const cutNote = (maxBytes: number): string =>
  `\n[the log is cut here: it keeps at most ${maxBytes >= 1024 * 1024 ? `${maxBytes / 1024 / 1024} MiB` : `${maxBytes / 1024} KiB`}]\n`;

/** The longest start of `text` of at most `bytes` bytes of UTF-8, never splitting a character. */
export function cutToBytes(text: string, bytes: number): string {
  if (bytes <= 0) return '';
  const encoded = Buffer.from(text);
  if (encoded.length <= bytes) return text;
  let end = bytes;
  // Back to the start of a character: continuation bytes are 10xxxxxx.
  while (end > 0 && (encoded[end]! & 0xc0) === 0x80) end--;
  return encoded.subarray(0, end).toString();
}
