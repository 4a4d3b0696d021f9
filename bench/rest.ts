// The REST calls the benchmarks make of the Berth they started: JSON in and out with the
// benchmark's bearer token; an answer of 300 or more is thrown with its status and body.
import type { BerthProc } from '../test/helpers/processes';

/** A call of `berth`'s REST API with `token`. */
export function restCalls(token: string) {
  return async <T>(berth: BerthProc, method: string, path: string, body?: unknown): Promise<T> => {
    const res = await fetch(`${berth.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as T;
  };
}
