// An environment's log (docs/environments.md, "Lifecycle commands and the environment's log"): what
// its lifecycle commands printed, which its node sends over its control channel as it comes
// (`env-log`, the built-in node's too), kept in EnvironmentLog rows, at most MAX_ENVIRONMENT_LOG of
// text each environment (a line of Berth's says where it was cut). Read whole (GET
// /v1/environments/{id}/log, Environment.log) or followed (subscription environmentLog), as text:
// each command's lines under a header naming it, with the time it printed them.
import type { Actor, Deps } from '../../app/context';
import { Channel } from '../../kernel/channel';
import { isEnded, ON_NODE } from '../../kernel/environment-states';
import { ForbiddenError, ValidationError } from '../../kernel/errors';
import { lockFor } from '../../platform/db';
import { topics } from '../../platform/events';
import { BERTH_STEP, cutNote, cutToBytes, MAX_ENVIRONMENT_LOG } from '../../protocol/environment-log';
import { joinEnvironmentFeed } from './feed';
import { findEnvironment } from './service';

/** How long an ended environment's log is kept after its end. */
export const LOG_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;
/**
 * The most pieces an environment's log keeps: its text is bounded, and so is the number of rows
 * holding it (a node sending empty or tiny pieces fills no more than this).
 */
export const MAX_LOG_PIECES = 20_000;
/** Rows read at once (the first read of a long log goes in several parts). */
const PAGE = 500;

/** A piece as a node sends it: the command it is of, its text, and when (the node's clock). */
export interface LogPieceInput {
  environment: string;
  step: string;
  text: string;
  at?: string;
}

interface LogRow {
  id: bigint;
  step: string;
  text: string;
  at: Date;
}

/**
 * Stores a piece of an environment's log its node sent. A node writes only the logs of the
 * environments placed on it (ForbiddenError otherwise); a piece of one no longer on its node (it
 * ended) is dropped, as is what goes past MAX_ENVIRONMENT_LOG. Pieces of one environment are
 * stored one at a time, so their ids are in the order they were stored; the environment's row is
 * held while one is, so a subscriber that saw it end has seen every piece.
 */
export async function appendEnvironmentLog(deps: Deps, nodeId: string, piece: LogPieceInput): Promise<void> {
  const now = deps.clock.now();
  const sent = piece.at ? new Date(piece.at) : now;
  // The node's clock, unless it runs ahead of the server's.
  const at = sent.getTime() < now.getTime() ? sent : now;
  const stored = await deps.prisma.$transaction(async (tx) => {
    const [env] = await tx.$queryRaw<{ nodeId: string | null; state: string }[]>`
      SELECT "nodeId", state FROM "Environment" WHERE id = ${piece.environment} FOR SHARE`;
    if (!env || env.nodeId !== nodeId) throw new ForbiddenError('a node writes only the logs of the environments currently on it');
    if (!(ON_NODE as readonly string[]).includes(env.state)) return false;
    await lockFor(tx, `berth:environment-log:${piece.environment}`);
    // octet_length reads a stored value's size without reading the value.
    const [{ used, pieces }] = await tx.$queryRaw<{ used: bigint | null; pieces: bigint }[]>`
      SELECT sum(octet_length(text)) AS used, count(*) AS pieces FROM "EnvironmentLog" WHERE "environmentId" = ${piece.environment}`;
    const before = Number(used ?? 0);
    // Past a bound only once it was cut (the note itself goes past it).
    if (before > MAX_ENVIRONMENT_LOG || Number(pieces) >= MAX_LOG_PIECES) return false;
    const rows: { step: string; text: string }[] = [];
    if (Number(pieces) === MAX_LOG_PIECES - 1)
      rows.push({ step: BERTH_STEP, text: `\n[the log is cut here: it keeps at most ${MAX_LOG_PIECES} pieces]\n` });
    else if (before + Buffer.byteLength(piece.text) <= MAX_ENVIRONMENT_LOG) rows.push(piece);
    else {
      const fits = cutToBytes(piece.text, MAX_ENVIRONMENT_LOG - before);
      if (fits) rows.push({ step: piece.step, text: fits });
      rows.push({ step: BERTH_STEP, text: cutNote(MAX_ENVIRONMENT_LOG) });
    }
    for (const row of rows)
      await tx.environmentLog.create({ data: { environmentId: piece.environment, step: row.step, text: row.text, at } });
    return true;
  });
  if (stored) await deps.events.publish(topics.environmentLog(piece.environment), {});
}

/** Where rendering left off: the step of the last piece, and whether its text ended a line. */
interface RenderState {
  step: string | null;
  lineStart: boolean;
}

/**
 * Pieces as text: a header line (`==> postCreateCommand (2026-11-29T22:40:01.123Z)`) wherever the
 * step changes from the piece before, then the pieces' text.
 */
function render(rows: LogRow[], state: RenderState): string {
  let text = '';
  for (const row of rows) {
    if (row.step !== state.step) {
      if (!state.lineStart) text += '\n';
      text += `==> ${row.step} (${row.at.toISOString()})\n`;
      state.step = row.step;
      state.lineStart = true;
    }
    if (row.text) {
      text += row.text;
      state.lineStart = row.text.endsWith('\n');
    }
  }
  return text;
}

const readRows = (deps: Deps, environmentId: string, after: bigint, take = PAGE): Promise<LogRow[]> =>
  deps.prisma.environmentLog.findMany({
    where: { environmentId, id: { gt: after } },
    orderBy: { id: 'asc' },
    take,
    select: { id: true, step: true, text: true, at: true },
  });

/** The log of an environment the caller may read, as text (GET /v1/environments/{id}/log). */
export async function readEnvironmentLog(deps: Deps, actor: Actor, idOrName: string): Promise<string> {
  const env = await findEnvironment(deps, actor, idOrName);
  return environmentLogText(deps, env.id);
}

/** The whole log of the environment, as text (Environment.log: the environment was read with the caller's access). */
export async function environmentLogText(deps: Deps, environmentId: string): Promise<string> {
  const rows = await readRows(deps, environmentId, 0n, MAX_LOG_PIECES + 1);
  return render(rows, { step: null, lineStart: true });
}

/** A part of a followed log: its text from where the last part ended, and the cursor to follow on from after it. */
export interface LogPart {
  text: string;
  cursor: string;
}

/**
 * The environment's log followed: first what it holds (after `after`, a cursor of an earlier part:
 * only what came since), always as a first part, empty when it holds nothing (a follower then
 * knows it follows); then each new piece as it is stored, on any instance. Ends once the
 * environment has ended and every piece stored before its end was sent.
 */
export async function watchEnvironmentLog(
  deps: Deps,
  actor: Actor,
  idOrName: string,
  after?: string | null,
): Promise<AsyncIterable<LogPart>> {
  if (after != null && !/^\d{1,19}$/.test(after)) throw new ValidationError('after: must be the cursor of a part of the log', 'after');
  const env = await findEnvironment(deps, actor, idOrName);
  let last = after == null ? 0n : BigInt(after);
  const state: RenderState = { step: null, lineStart: true };
  let ended = false;
  let closed = false;
  let stopPieces: () => void = () => undefined;
  let leaveFeed: () => void = () => undefined;
  const channel = new Channel<LogPart>(() => {
    closed = true;
    stopPieces();
    leaveFeed();
  });
  // One read at a time; a wake-up during one reads again after it.
  let reading: Promise<void> | undefined;
  let again = false;
  let first = true;
  const read = (): void => {
    if (reading) {
      again = true;
      return;
    }
    reading = (async () => {
      do {
        again = false;
        for (let rows = await readRows(deps, env.id, last); rows.length > 0 || first; rows = await readRows(deps, env.id, last)) {
          first = false;
          if (rows.length > 0) last = rows.at(-1)!.id;
          channel.push({ text: render(rows, state), cursor: String(last) });
          if (rows.length < PAGE) break;
        }
      } while (again);
      if (ended) channel.end();
    })()
      .catch(() => channel.end())
      .finally(() => {
        reading = undefined;
      });
  };
  stopPieces = deps.events.listen(topics.environmentLog(env.id), read);
  const leave = await joinEnvironmentFeed(deps, env.orgId, (events) => {
    if (!events.some((e) => e.environmentId === env.id && isEnded(e.environment.state))) return;
    ended = true;
    read();
  });
  leaveFeed = leave;
  if (closed) leave();
  // Read after joining the feed: an end committed before is seen here, one after by the feed.
  const now = await deps.prisma.environment.findUnique({ where: { id: env.id }, select: { state: true } });
  if (!now || isEnded(now.state)) ended = true;
  read();
  return channel;
}

/** Deletes the logs of environments that ended more than LOG_RETENTION_MS ago. */
export async function pruneEnvironmentLogs(deps: Deps): Promise<void> {
  const before = new Date(deps.clock.now().getTime() - LOG_RETENTION_MS);
  await deps.prisma.$executeRaw`
    DELETE FROM "EnvironmentLog" l USING "Environment" e
     WHERE e.id = l."environmentId" AND e.stopped IS NOT NULL AND e.stopped < ${before}`;
}
