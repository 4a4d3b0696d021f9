import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';

/**
 * The address a request comes from, as the 429 lock counts it. With TRUST_PROXY = 0 (the
 * default) it is the TCP peer. With TRUST_PROXY = N, N proxies are trusted in front of Berth, each
 * appending the address it received the request from to X-Forwarded-For: reading the chain
 * `X-Forwarded-For entries…, TCP peer` from the right, the peer and the N - 1 entries before it are
 * trusted proxies, and the entry before those is the client. Entries further left were written by
 * the client itself and are ignored, so a client cannot choose its address. A chain shorter than
 * that, or an entry that is not an IP address, falls back to the leftmost trustworthy address.
 */
export function clientAddress(req: IncomingMessage, trustProxy: number): string {
  const peer = req.socket.remoteAddress ?? 'unknown';
  if (trustProxy === 0) return peer;
  const header = req.headers['x-forwarded-for'];
  const forwarded = (Array.isArray(header) ? header.join(',') : (header ?? ''))
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean);
  const chain = [...forwarded, peer];
  let address = peer;
  for (let hop = 1; hop <= trustProxy && hop < chain.length; hop++) {
    const candidate = chain[chain.length - 1 - hop]!;
    if (!isIP(candidate)) break;
    address = candidate;
  }
  return address;
}
