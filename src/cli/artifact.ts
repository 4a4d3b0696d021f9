// The user's artifact commands (docs/cli.md):
//   berth artifact push FILE [--project P] [--retention 7d] [--link 24h] [--name N] [--label k=v]…
//   berth artifact pull ID -o FILE
// Both stream: the file is never held in memory whole (artifacts go up to 2 GiB). A progress bar
// is drawn on stderr when it is a terminal. A pull writes to a temporary file beside the target
// and renames it only once every byte arrived and matched the artifact's SHA-256, so a failed or
// interrupted download never leaves a partial file under the final name.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { rename, stat, unlink } from 'node:fs/promises';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { basename, dirname, join } from 'node:path';
import { Transform, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';
import { BerthClient, type ConnectionOptions, errorFromText, networkDetail, reachError, withConnection } from './client';
import { CommandError } from './errors';
import { age, bytes, table } from './format';
import type { Answer } from './http';
import { durationOption, labelList } from './options';

/** The interface's limit on an artifact's size (2 GiB). */
const SPEC_MAX_BYTES = 2 * 1024 ** 3;

interface Artifact {
  id: string;
  project: string;
  name: string;
  size: number;
  sha256: string;
  expires: string;
}

interface ListOptions extends ConnectionOptions {
  project?: string;
  name?: string;
  label?: string[];
  limit?: string;
  cursor?: string;
  json?: boolean;
}

interface Link {
  url: string;
  expires: string;
}

/** A progress bar on stderr when it is a terminal; nothing otherwise (and cli-progress is not loaded). */
async function progress(label: string, total: number | undefined): Promise<{ add(n: number): void; stop(): void }> {
  if (!process.stderr.isTTY) return { add() {}, stop() {} };
  const { SingleBar } = await import('cli-progress');
  const started = Date.now();
  let done = 0;
  const bar = new SingleBar(
    {
      stream: process.stderr,
      format: total === undefined ? `${label} {done} {speed}` : `${label} [{bar}] {percentage}% {done}/{all} {speed}`,
      hideCursor: true,
      barsize: 30,
      fps: 10,
    },
    undefined,
  );
  const payload = () => {
    const seconds = (Date.now() - started) / 1000;
    return { done: bytes(done), all: bytes(total ?? 0), speed: seconds > 0 ? `${bytes(Math.round(done / seconds))}/s` : '' };
  };
  bar.start(total ?? 0, 0, payload());
  return {
    add(n) {
      done += n;
      bar.update(total === undefined ? 0 : done, payload());
    },
    stop() {
      bar.stop();
    },
  };
}

/** A pass-through that hashes and counts what flows through it. */
function meter(onBytes: (n: number) => void) {
  const hash = createHash('sha256');
  const stream = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      hash.update(chunk);
      onBytes(chunk.length);
      callback(null, chunk);
    },
  });
  return { stream, digest: () => hash.digest('hex') };
}

interface PushOptions extends ConnectionOptions {
  project?: string;
  retention?: string;
  link?: string;
  name?: string;
  label?: string[];
  json?: boolean;
}

/**
 * Streams FILE as the body of `POST /v1/artifacts` with its Content-Length, so the server refuses
 * an oversized file before reading it, and hashes it on the way to check the stored SHA-256.
 * node:http (rather than fetch) lets an early refusal (413 while the body is still being sent) be
 * read as the server's answer instead of a broken pipe.
 */
async function push(client: BerthClient, file: string, options: PushOptions): Promise<{ artifact: Artifact; link?: Link }> {
  let size: number;
  try {
    const info = await stat(file);
    if (!info.isFile()) throw new CommandError(`${file} is not a regular file`);
    size = info.size;
  } catch (error) {
    if (error instanceof CommandError) throw error;
    throw new CommandError(`cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  }
  const url = client.url('/v1/artifacts', {
    name: options.name ?? basename(file),
    project: options.project,
    retention: options.retention,
    link: options.link,
    label: options.label,
  });
  const bar = await progress(`push ${basename(file)}`, size);
  let sentBytes = 0;
  const measured = meter((n) => {
    sentBytes += n;
    bar.add(n);
  });
  const req = (url.protocol === 'https:' ? https : http).request(url, {
    method: 'POST',
    headers: { authorization: client.authorization, 'content-type': 'application/octet-stream', 'content-length': String(size) },
  });
  let connected = false;
  req.once('socket', (socket) => {
    if (!socket.connecting) connected = true;
    else socket.once('connect', () => (connected = true));
  });
  const answered = new Promise<IncomingMessage>((resolve, reject) => {
    req.once('response', resolve);
    req.once('error', reject);
  });
  let sendError: unknown;
  const sent = pipeline(createReadStream(file), measured.stream, req).catch((error: unknown) => {
    sendError = error;
  });
  let res: IncomingMessage;
  try {
    res = await answered;
  } catch (error) {
    bar.stop();
    await sent;
    const local = sendError as NodeJS.ErrnoException | undefined;
    if (local?.syscall === 'read' || local?.path) throw new CommandError(`cannot read ${file}: ${local.code ?? local.message}`);
    if (!connected) throw reachError(client.base, error);
    // An early refusal (413) races the body: the server closes the connection, and its answer
    // may be lost to the broken pipe.
    const hint = size > SPEC_MAX_BYTES ? `; artifacts are limited to ${SPEC_MAX_BYTES} bytes` : '';
    throw new CommandError(
      `the upload of ${file} broke off after ${sentBytes} of ${size} bytes (${networkDetail(error)}); nothing was stored${hint}`,
    );
  }
  const chunks: Buffer[] = [];
  try {
    for await (const chunk of res) chunks.push(chunk as Buffer);
  } catch {
    // the connection closed mid-answer: what arrived (or the status line) says enough
  }
  const text = Buffer.concat(chunks).toString('utf8');
  bar.stop();
  if (!res.statusCode || res.statusCode < 200 || res.statusCode >= 300) {
    req.destroy();
    throw errorFromText(res.statusCode ?? 0, res.statusMessage ?? '', text);
  }
  await sent;
  if (sendError) throw new CommandError(`the upload of ${file} failed: ${String(sendError)}`);
  let answer: { artifact: Artifact; link?: Link };
  try {
    answer = JSON.parse(text);
  } catch {
    throw new CommandError(`the server's answer to the upload of ${file} is not JSON (status ${res.statusCode})`);
  }
  const sha256 = measured.digest();
  if (answer.artifact.sha256 !== sha256) {
    throw new CommandError(`the server stored ${answer.artifact.id} with SHA-256 ${answer.artifact.sha256}, but ${file} has ${sha256}`);
  }
  return answer;
}

/** The file name a download suggests (Content-Disposition), reduced to a safe base name. */
function suggestedName(res: Answer, id: string): string {
  const header = res.headers.get('content-disposition') ?? '';
  const star = /filename\*=UTF-8''([^;]+)/i.exec(header)?.[1];
  const plain = /filename="([^"]*)"/i.exec(header)?.[1];
  let name: string | undefined;
  try {
    name = star ? decodeURIComponent(star) : plain;
  } catch {
    name = plain;
  }
  const safe = basename((name ?? '').replace(/\\/g, '/'));
  return safe && safe !== '.' && safe !== '..' ? safe : id;
}

/**
 * Downloads an artifact into `output` (or stdout for `-`): into a temporary file in the same
 * folder first, renamed once complete and matching the ETag's SHA-256; removed on any failure,
 * Ctrl-C included.
 */
async function pull(client: BerthClient, id: string, output: string): Promise<{ file: string; size: number; sha256: string }> {
  const abort = new AbortController();
  const interrupted = () => abort.abort();
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  let temp: string | undefined;
  try {
    const res = await client.fetch(`/v1/artifacts/${encodeURIComponent(id)}/content`, { signal: abort.signal });
    const length = res.headers.get('content-length');
    const total = length === null ? undefined : Number(length);
    const expected = /^"([0-9a-f]{64})"$/.exec(res.headers.get('etag') ?? '')?.[1];
    let target = output;
    let sink: Writable = process.stdout;
    if (output !== '-') {
      let info = await stat(output).catch(() => undefined);
      if (info?.isDirectory()) {
        target = join(output, suggestedName(res, id));
        info = await stat(target).catch(() => undefined);
      }
      if (info && !info.isFile()) {
        // A device or pipe (/dev/null, a FIFO): written in place, never replaced by a rename.
        sink = createWriteStream(target);
      } else {
        temp = join(dirname(target), `.${basename(target)}.${randomBytes(6).toString('hex')}.part`);
        sink = createWriteStream(temp, { flags: 'wx' });
      }
    }
    const bar = await progress(`pull ${basename(target)}`, total);
    let received = 0;
    const measured = meter((n) => {
      received += n;
      bar.add(n);
    });
    try {
      await pipeline(res.body, measured.stream, sink, {
        end: sink !== process.stdout,
        signal: abort.signal,
      });
    } catch (error) {
      if (abort.signal.aborted) throw new CommandError(temp ? 'interrupted: nothing was saved' : 'interrupted');
      if ((error as NodeJS.ErrnoException).syscall)
        throw new CommandError(`cannot write ${target}: ${(error as NodeJS.ErrnoException).code}`);
      const of = total === undefined ? '' : ` of ${total}`;
      throw new CommandError(
        `the download of ${id} broke off after ${received}${of} bytes (${networkDetail(error)})${temp ? '; nothing was saved' : ''}`,
      );
    } finally {
      bar.stop();
    }
    const sha256 = measured.digest();
    if (expected && sha256 !== expected)
      throw new CommandError(`the download of ${id} is damaged: SHA-256 ${sha256}, expected ${expected}`);
    const size = received;
    if (total !== undefined && received !== total)
      throw new CommandError(`the download of ${id} ended after ${received} of ${total} bytes`);
    if (temp) {
      await rename(temp, target);
      temp = undefined;
    }
    return { file: target, size, sha256 };
  } finally {
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
    if (temp) await unlink(temp).catch(() => undefined);
  }
}

export function registerArtifactCommands(program: Command): void {
  const artifact = program.command('artifact').description('artifacts: store files and fetch them back');

  withConnection(
    artifact
      .command('push <file>')
      .description('upload a file (up to 2 GiB) as an artifact; prints its id, then its signed link with --link')
      .option('--project <name>', 'the project whose key seals it (default: default)')
      .option('--retention <duration>', 'how long to keep it, e.g. 12h or 7d (default 7d, at most 30d)', durationOption)
      .option('--link <duration>', 'also make a signed download link lasting this long, e.g. 24h', durationOption)
      .option('--name <name>', "the name to store it under (default: the file's name)")
      .option('--label <key=value>', 'a label (repeatable)', labelList)
      .option('--json', 'print {artifact, link} as JSON'),
  ).action(async (file: string, options: PushOptions) => {
    const client = new BerthClient(options);
    const { artifact: stored, link } = await push(client, file, options);
    if (options.json) {
      console.log(JSON.stringify(link ? { artifact: stored, link } : { artifact: stored }, null, 2));
      return;
    }
    if (process.stderr.isTTY) {
      console.error(`stored ${stored.name} (${bytes(stored.size)}) in project ${stored.project} until ${stored.expires}`);
    }
    console.log(stored.id);
    if (link) console.log(link.url);
  });

  withConnection(
    artifact
      .command('ls')
      .description("list the organization's artifacts, newest first")
      .option('--project <name>', 'only this project')
      .option('--name <name>', 'only artifacts with exactly this name')
      .option('--label <key=value>', 'only with this label (repeatable; all must match)', labelList)
      .option('--limit <n>', 'at most this many (default 50, at most 500)')
      .option('--cursor <next>', 'the page after the one that printed this cursor')
      .option('--json', 'print {artifacts, next} as JSON'),
  ).action(async (options: ListOptions) => {
    const { project, name, label, limit, cursor } = options;
    const page = await new BerthClient(options).json<{ artifacts: (Artifact & { created: string })[]; next?: string }>(
      'GET',
      '/v1/artifacts',
      undefined,
      { project, name, label, limit, cursor },
    );
    if (options.json) return void console.log(JSON.stringify(page, null, 2));
    const now = Date.now();
    const rows = page.artifacts.map((a) => [a.id, a.name, a.project, bytes(a.size), age(now - Date.parse(a.created)), a.expires]);
    if (rows.length === 0) console.error('no artifacts');
    else console.log(table(['ID', 'NAME', 'PROJECT', 'SIZE', 'AGE', 'EXPIRES'], rows));
    if (page.next) console.error(`more: berth artifact ls --cursor ${page.next}`);
  });

  withConnection(
    artifact
      .command('pull <id>')
      .description("download an artifact; -o names the file, a folder (the artifact's name in it) or - for stdout")
      .requiredOption('-o, --output <file>', 'where to save it'),
  ).action(async (id: string, options: ConnectionOptions & { output: string }) => {
    const { file, size } = await pull(new BerthClient(options), id, options.output);
    if (file !== '-' && process.stderr.isTTY) console.error(`saved ${file} (${bytes(size)})`);
  });
}
