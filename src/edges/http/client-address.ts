import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import proxyaddr from 'proxy-addr';

/**
 * The address a request comes from, as the 429 lock counts it. With TRUST_PROXY = 0 (the
 * default) it is the TCP peer. With TRUST_PROXY = N, N proxies in front of Berth are trusted, each
 * appending the address it received the request from to X-Forwarded-For: reading the chain
 * `X-Forwarded-For entries…, TCP peer` from the right, the peer and the N - 1 entries before it are
 * those proxies, and the entry before them is the client (Express's "trust proxy" hop count, by
 * its own library). Entries further left were written by the client itself and are ignored, so a
 * client cannot choose its address. A chain shorter than that, or an entry that is not an IP
 * address, falls back to the last address a trusted proxy vouches for.
 */
export function clientAddress(req: IncomingMessage, trustProxy: number): string {
  const peer = req.socket.remoteAddress ?? 'unknown';
  if (trustProxy === 0) return peer;
  // [TCP peer, …, client]: the trusted hops, then the first address they vouch for.
  const chain = proxyaddr.all(req, (_address, hop) => hop < trustProxy);
  return chain.reverse().find((address) => isIP(address) !== 0) ?? peer;
}
