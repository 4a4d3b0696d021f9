/**
 * One process of subscribers for the fan-out benchmark: `count` clients of one transport, each
 * subscribed to every environment change of the organization with every field.
 *  - graphql-ws: graphql-ws's own client over `ws`, credentials in `connectionParams`;
 *  - sse: GraphQL over SSE, distinct connections mode (a POST per subscriber with
 *    `Accept: text/event-stream`, its own TCP connection), credentials in `Authorization`.
 * It records when each event (environment id + state) reaches each subscriber and the order in
 * which each subscriber saw them, and pushes `connected`, `alive` (every subscriber has had an
 * event) and `complete` (every subscriber here has had this event) so the parent can pace itself.
 */
import { request } from 'node:http';
import { type Client, createClient } from 'graphql-ws';
import { WebSocket } from 'ws';
import { push, serve, wallMs } from './common';

export type Transport = 'graphql-ws' | 'sse';

export interface SubscribersStart {
  url: string;
  token?: string;
  count: number;
  transport: Transport;
  query: string;
}

export interface SubscribersReport {
  /** Event keys in the order this process first saw them. */
  keys: string[];
  /** Distinct per-subscriber sequences of key indexes, with how many subscribers saw each. */
  sequences: [number[], number][];
  /** For each key index, the wall-clock time (ms) it reached each subscriber (first receipt). */
  receipts: number[][];
  errors: number;
  /** Messages received in all (including duplicates and warm-up events). */
  messages: number;
}

const keyIndex = new Map<string, number>();
const keys: string[] = [];
const receipts: number[][] = [];
let count = 0;
let aliveCount = 0;
let errors = 0;
let messages = 0;
const closers: (() => void)[] = [];
let closing = false;

function fail(message: string): void {
  if (closing) return;
  if (errors++ < 5) push('error', { message });
}

function describe(err: unknown): string {
  if (err instanceof Error) return err.message;
  const close = err as { code?: number; reason?: string };
  return close.code !== undefined ? `socket closed ${close.code} ${close.reason ?? ''}` : JSON.stringify(err);
}

/** One subscriber's bookkeeping: its sequence of keys and the keys it has already had. */
interface Payload {
  data?: { environments?: { id: string; state: string } } | null;
  errors?: readonly unknown[];
}

function subscriber(): { sequence: number[]; onPayload(payload: Payload): void } {
  const sequence: number[] = [];
  const seen = new Set<number>();
  return {
    sequence,
    onPayload(payload) {
      const at = wallMs();
      messages++;
      const env = payload.data?.environments;
      if (payload.errors?.length || !env) return fail(`event with errors: ${JSON.stringify(payload).slice(0, 300)}`);
      const key = `${env.id} ${env.state}`;
      let index = keyIndex.get(key);
      if (index === undefined) {
        index = keys.length;
        keyIndex.set(key, index);
        keys.push(key);
        receipts.push([]);
      }
      if (sequence.length === 0 && ++aliveCount === count) push('alive');
      sequence.push(index);
      if (seen.has(index)) return;
      seen.add(index);
      const times = receipts[index]!;
      times.push(at);
      if (times.length === count) push('complete', { key });
    },
  };
}

const sequences: number[][] = [];

function connectWs(p: SubscribersStart): Promise<void> {
  const sub = subscriber();
  sequences.push(sub.sequence);
  const client: Client = createClient({
    url: `${p.url.replace(/^http/, 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: p.token ? { authorization: `Bearer ${p.token}` } : {},
    lazy: false,
    retryAttempts: 0,
    onNonLazyError: (err) => fail(describe(err)),
  });
  closers.push(() => void client.dispose());
  return new Promise<void>((resolve, reject) => {
    client.on('connected', () => {
      client.subscribe(
        { query: p.query },
        {
          next: (value) => sub.onPayload(value as Payload),
          error: (err) => fail(describe(err)),
          complete: () => fail('subscription completed'),
        },
      );
      resolve();
    });
    client.on('closed', (event) => {
      reject(new Error(`closed before connecting: ${describe(event)}`));
      fail(`socket closed: ${describe(event)}`);
    });
  });
}

function connectSse(p: SubscribersStart): Promise<void> {
  const sub = subscriber();
  sequences.push(sub.sequence);
  return new Promise<void>((resolve, reject) => {
    const req = request(`${p.url}/graphql`, {
      method: 'POST',
      // Distinct connections mode: one TCP connection per subscription.
      agent: false,
      headers: {
        accept: 'text/event-stream',
        'content-type': 'application/json',
        ...(p.token ? { authorization: `Bearer ${p.token}` } : {}),
      },
    });
    closers.push(() => req.destroy());
    req.on('error', (err) => {
      reject(err);
      fail(`SSE request failed: ${err.message}`);
    });
    req.on('response', (res) => {
      if (res.statusCode !== 200) {
        reject(new Error(`SSE answered ${res.statusCode}`));
        return res.resume();
      }
      resolve();
      res.setEncoding('utf8');
      let buffer = '';
      res.on('data', (chunk: string) => {
        buffer += chunk;
        for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let event = 'message';
          const data: string[] = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) event = line.slice(6).trim();
            else if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
          }
          if (event === 'next' && data.length) sub.onPayload(JSON.parse(data.join('\n')) as Payload);
          else if (event === 'complete') fail('subscription completed');
        }
      });
      res.on('end', () => fail('SSE stream ended'));
    });
    req.end(JSON.stringify({ query: p.query }));
  });
}

serve({
  async start(p: SubscribersStart) {
    count = p.count;
    const started = performance.now();
    const connect = p.transport === 'sse' ? connectSse : connectWs;
    // Batches keep the connection burst (and its authentications) from timing out.
    for (let i = 0; i < p.count; i += 50) {
      await Promise.all(Array.from({ length: Math.min(50, p.count - i) }, () => connect(p)));
    }
    return { ms: performance.now() - started };
  },
  report(): SubscribersReport {
    const groups = new Map<string, [number[], number]>();
    for (const sequence of sequences) {
      const signature = sequence.join(',');
      const group = groups.get(signature);
      if (group) group[1]++;
      else groups.set(signature, [sequence, 1]);
    }
    return { keys, sequences: [...groups.values()], receipts, errors, messages };
  },
  close() {
    closing = true;
    for (const close of closers) close();
    setTimeout(() => process.exit(0), 200);
  },
});
