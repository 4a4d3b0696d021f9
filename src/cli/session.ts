// The caller's end of an interactive command (docs/agents.md, "Sessions"): `berth exec` with
// piped input or -i/-t, `berth shell` and `berth session attach`. Input from this process's stdin
// (its end included); with a terminal, raw mode here and the size (and each resize) passed on, so
// Ctrl-C and the like reach the command through its own terminal. A terminal session whose
// connection drops is attached to again by itself (the command runs on meanwhile, for the
// server's SESSION_GRACE); what was already shown is not shown twice.
import WebSocket from 'ws';
import { ApiError, type BerthClient, errorFromText, reachError } from './client';
import { CommandError } from './errors';

const PROTOCOL = 'berth.exec.v1';
/** Input waiting to be sent past this much, stdin is not read. */
const HIGH_WATER = 1024 * 1024;
/** Waits between attempts to attach again: doubling from the first, at most the second; given up after the third. */
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 5000;
const RETRY_FOR_MS = 5 * 60_000;

export interface SessionRequest {
  environment: string;
  /** Undefined: the template's shell. */
  command?: string[];
  tty: boolean;
  /** Send this process's stdin to the command (else its input ends at once). */
  stdin: boolean;
  /** Attach to this running session instead of starting a command. */
  session?: string;
  /** Attach again by itself after a drop (default: on a terminal). */
  reattach?: boolean;
}

/** How one connection ended: the command's exit code, or a drop to attach again after (`opened`: it had been attached). */
type Ending = { exitCode: number } | { dropped: string; opened: boolean };

/** Runs the session to its end: resolves with the command's exit code. */
export async function runSession(client: BerthClient, request: SessionRequest): Promise<number> {
  const out = process.stdout;
  const stdin = process.stdin;
  const reattach = request.reattach ?? request.tty;
  let sessionId = request.session;
  // Output bytes shown so far: a replay after a drop starts earlier, and that much of it is skipped.
  let shown = 0;
  let skip = 0;
  let ws: WebSocket | undefined;
  let interrupted = false;
  let attachedOnce = false;

  const onResize = () => {
    if (ws?.readyState === ws?.OPEN) ws?.send(JSON.stringify({ type: 'resize', rows: out.rows, cols: out.columns }));
  };
  // Without a terminal, Ctrl-C here ends the session, which kills the whole command (recorded 137).
  const onInterrupt = () => {
    interrupted = true;
    ws?.close(1000, 'interrupted');
  };
  const onInput = (chunk: Buffer) => {
    if (ws?.readyState !== ws?.OPEN) return;
    ws!.send(chunk, { binary: true });
    if (ws!.bufferedAmount > HIGH_WATER) {
      stdin.pause();
      const socket = ws!;
      const drained = setInterval(() => {
        if (socket.bufferedAmount > HIGH_WATER / 2 && socket.readyState === socket.OPEN) return;
        clearInterval(drained);
        stdin.resume();
      }, 10);
    }
  };
  let inputEnded = !request.stdin;
  let eofSent = false;
  const onInputEnd = () => {
    inputEnded = true;
    if (eofSent || ws?.readyState !== ws?.OPEN) return;
    ws?.send(JSON.stringify({ type: 'eof' }));
    eofSent = true;
  };

  const connect = (): Promise<Ending> => {
    const url = new URL(
      sessionId
        ? `${client.base}/v1/environments/${encodeURIComponent(request.environment)}/sessions/${encodeURIComponent(sessionId)}`
        : `${client.base}/v1/environments/${encodeURIComponent(request.environment)}/exec`,
    );
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    if (!sessionId) {
      for (const arg of request.command ?? []) url.searchParams.append('command', arg);
      if (request.tty) {
        url.searchParams.set('tty', '1');
        url.searchParams.set('rows', String(out.rows || 24));
        url.searchParams.set('cols', String(out.columns || 80));
      }
    }
    const socket = new WebSocket(url, PROTOCOL, { headers: { authorization: `Bearer ${client.token}` }, perMessageDeflate: false });
    ws = socket;
    return new Promise<Ending>((resolve, reject) => {
      let exitCode: number | undefined;
      let opened = false;
      socket.on('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => reject(errorFromText(res.statusCode ?? 0, res.statusMessage ?? '', body)));
      });
      socket.on('error', (error) => {
        // Not reachable at all: a drop when attaching again, else the error.
        if (!opened && attachedOnce && reattach) resolve({ dropped: error.message, opened: false });
        else if (!opened) reject(reachError(client.base, error));
      });
      socket.on('open', () => {
        opened = true;
        if (!attachedOnce) started();
        attachedOnce = true;
        // Input typed while the connection was away waited in stdin.
        if (request.stdin) stdin.resume();
        // The terminal may have changed size while the connection was away.
        if (request.tty && sessionId) onResize();
        if (inputEnded) onInputEnd();
      });
      socket.on('message', (data: Buffer, binary: boolean) => {
        if (binary) {
          let payload = data.subarray(1);
          if (skip > 0) {
            const dropped = Math.min(skip, payload.length);
            skip -= dropped;
            payload = payload.subarray(dropped);
            if (payload.length === 0) return;
          }
          shown += payload.length;
          const target = data[0] === 2 ? process.stderr : out;
          // A slow terminal or pipe here slows the command down (the server's flow control).
          if (!target.write(payload)) {
            socket.pause();
            target.once('drain', () => socket.resume());
          }
          return;
        }
        const message = JSON.parse(data.toString()) as {
          type: string;
          exitCode?: number;
          error?: string;
          session?: string;
          offset?: number;
        };
        if (message.type === 'session') {
          sessionId = message.session;
          // Attached again: the replay starts at `offset` of the whole output; what was shown is skipped.
          skip = Math.max(0, shown - (message.offset ?? shown));
        } else if (message.type === 'exit') exitCode = message.exitCode;
        else if (message.type === 'error') reject(new CommandError(message.error ?? 'the session failed'));
      });
      socket.on('close', (code, reason) => {
        stdin.pause();
        if (exitCode !== undefined) return resolve({ exitCode });
        if (interrupted) return resolve({ exitCode: 130 });
        const why = reason.toString() || `closed with ${code}`;
        // Closed by the server for a reason a new connection would not change.
        if (code === 4401 || code === 4400 || code === 1011 || !opened || !sessionId || !reattach)
          return reject(new CommandError(`the session ended before the command did: ${why}`));
        resolve({ dropped: why, opened: true });
      });
    });
  };

  const started = () => {
    process.on('SIGINT', onInterrupt);
    if (request.tty && stdin.isTTY) stdin.setRawMode(true);
    if (request.tty) out.on('resize', onResize);
    if (request.stdin) {
      stdin.on('data', onInput);
      stdin.on('end', onInputEnd);
      stdin.resume();
    }
  };
  const cleanup = () => {
    if (request.tty && stdin.isTTY) stdin.setRawMode(false);
    out.off('resize', onResize);
    process.off('SIGINT', onInterrupt);
    stdin.off('data', onInput);
    stdin.off('end', onInputEnd);
    stdin.pause();
    stdin.destroy();
  };

  try {
    let ending = await connect();
    let since = 0;
    let wait = RETRY_FIRST_MS;
    while ('dropped' in ending) {
      if (ending.opened) {
        process.stderr.write(`\r\nberth: the connection dropped (${ending.dropped}); attaching to session ${sessionId} again…\r\n`);
        since = Date.now();
        wait = RETRY_FIRST_MS;
      } else if (Date.now() - since > RETRY_FOR_MS) {
        throw new CommandError(`could not attach to session ${sessionId} again: ${ending.dropped}`);
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
      wait = Math.min(RETRY_MAX_MS, wait * 2);
      try {
        ending = await connect();
      } catch (error) {
        // The session ended meanwhile (its grace ran out, or someone ended it): say so.
        if (error instanceof ApiError && error.status === 404)
          throw new CommandError(`session ${sessionId} ended while the connection was away`);
        // A server restarting answers 502/503 for a moment: tried again.
        if (!(error instanceof ApiError && error.status >= 500)) throw error;
        ending = { dropped: error.message, opened: false };
      }
    }
    return ending.exitCode;
  } finally {
    cleanup();
  }
}
