// The caller's end of an interactive command (docs/agents.md, "Sessions"): `berth exec` with
// piped input or -i/-t, and `berth shell`. Input from this process's stdin (its end included);
// with a terminal, raw mode here and the size (and each resize) passed on, so Ctrl-C and the
// like reach the command through its own terminal.
import WebSocket from 'ws';
import { type BerthClient, errorFromText, reachError } from './client';
import { CommandError } from './errors';

const PROTOCOL = 'berth.exec.v1';
/** Input waiting to be sent past this much, stdin is not read. */
const HIGH_WATER = 1024 * 1024;

export interface SessionRequest {
  environment: string;
  /** Undefined: the template's shell. */
  command?: string[];
  tty: boolean;
  /** Send this process's stdin to the command (else its input ends at once). */
  stdin: boolean;
}

/** Runs the session to its end: resolves with the command's exit code. */
export function runSession(client: BerthClient, request: SessionRequest): Promise<number> {
  const url = new URL(`${client.base}/v1/environments/${encodeURIComponent(request.environment)}/exec`);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  for (const arg of request.command ?? []) url.searchParams.append('command', arg);
  const out = process.stdout;
  if (request.tty) {
    url.searchParams.set('tty', '1');
    url.searchParams.set('rows', String(out.rows || 24));
    url.searchParams.set('cols', String(out.columns || 80));
  }
  const ws = new WebSocket(url, PROTOCOL, { headers: { authorization: `Bearer ${client.token}` }, perMessageDeflate: false });
  const stdin = process.stdin;
  return new Promise<number>((resolve, reject) => {
    let settled = false;
    let exitCode: number | undefined;
    const cleanup = () => {
      if (request.tty && stdin.isTTY) stdin.setRawMode(false);
      out.off('resize', onResize);
      process.off('SIGINT', onInterrupt);
      stdin.off('data', onInput);
      stdin.off('end', onInputEnd);
      stdin.pause();
      stdin.destroy();
    };
    const finish = (error: Error | undefined, code?: number) => {
      if (settled) return;
      settled = true;
      cleanup();
      if (error) reject(error);
      else resolve(code ?? 0);
    };
    const onResize = () => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: 'resize', rows: out.rows, cols: out.columns }));
    };
    // Without a terminal, Ctrl-C here ends the session, which kills the whole command (recorded 130).
    const onInterrupt = () => {
      ws.close(1000, 'interrupted');
      finish(undefined, 130);
    };
    const onInput = (chunk: Buffer) => {
      ws.send(chunk, { binary: true });
      if (ws.bufferedAmount > HIGH_WATER) {
        stdin.pause();
        const drained = setInterval(() => {
          if (ws.bufferedAmount > HIGH_WATER / 2 && ws.readyState === ws.OPEN) return;
          clearInterval(drained);
          stdin.resume();
        }, 10);
      }
    };
    const onInputEnd = () => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: 'eof' }));
    };
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => finish(errorFromText(res.statusCode ?? 0, res.statusMessage ?? '', body)));
    });
    ws.on('error', (error) => finish(reachError(client.base, error)));
    ws.on('open', () => {
      process.on('SIGINT', onInterrupt);
      if (request.tty && stdin.isTTY) stdin.setRawMode(true);
      if (request.tty) out.on('resize', onResize);
      if (request.stdin) {
        stdin.on('data', onInput);
        stdin.on('end', onInputEnd);
        stdin.resume();
      } else {
        onInputEnd();
      }
    });
    ws.on('message', (data: Buffer, binary: boolean) => {
      if (binary) {
        const target = data[0] === 2 ? process.stderr : out;
        // A slow terminal or pipe here slows the command down (the server's flow control).
        if (!target.write(data.subarray(1))) {
          ws.pause();
          target.once('drain', () => ws.resume());
        }
        return;
      }
      const message = JSON.parse(data.toString()) as { type: string; exitCode?: number; error?: string };
      if (message.type === 'exit') exitCode = message.exitCode;
      else if (message.type === 'error') finish(new CommandError(message.error ?? 'the session failed'));
    });
    ws.on('close', (code, reason) => {
      if (exitCode !== undefined) return finish(undefined, exitCode);
      const why = reason.toString() || `closed with ${code}`;
      finish(new CommandError(`the session ended before the command did: ${why}`));
    });
  });
}
