/**
 * The load generator of the read benchmark, in a process of its own so it never shares a server's
 * event loop: autocannon, keep-alive connections, exact latencies of every 2xx response
 * (autocannon's own histogram keeps whole milliseconds only).
 */
import autocannon from 'autocannon';
import { percentile, push, serve } from './common';

export interface LoadOptions {
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  connections: number;
  seconds: number;
}

export interface LoadResult {
  ok: number;
  seconds: number;
  failed: number;
  p50: number;
  p99: number;
  /** The first non-2xx status seen, to tell a broken target from a slow one. */
  firstFailure?: number;
}

serve({
  run(opts: LoadOptions) {
    return new Promise<LoadResult>((resolve, reject) => {
      const latencies: number[] = [];
      let failed = 0;
      let firstFailure: number | undefined;
      const instance = autocannon(
        {
          url: opts.url,
          method: opts.method,
          headers: opts.headers,
          body: opts.body,
          connections: opts.connections,
          duration: opts.seconds,
        },
        (err, result) => {
          if (err) return reject(err);
          const sorted = Float64Array.from(latencies).sort();
          resolve({
            ok: latencies.length,
            seconds: result.duration,
            failed: failed + result.errors + result.timeouts,
            p50: percentile(sorted, 50),
            p99: percentile(sorted, 99),
            firstFailure,
          });
        },
      );
      instance.on('start', () => push('started'));
      instance.on('response', (_client, status, _bytes, ms) => {
        if (status >= 200 && status < 300) latencies.push(ms);
        else {
          failed++;
          firstFailure ??= status;
        }
      });
    });
  },
});
