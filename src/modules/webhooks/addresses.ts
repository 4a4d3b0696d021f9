// Which addresses a webhook endpoint may have: checked when it is registered and again before
// every delivery (src/modules/webhooks/service.ts), by the same rule.
import { lookup as dnsLookup } from 'node:dns/promises';
import ipaddr from 'ipaddr.js';
import type { Config } from '../../app/config';
import { ValidationError } from '../../kernel/errors';

export interface Target {
  address: string;
  family: number;
}

/** Every address a host name resolves to. */
export type Resolve = (host: string) => Promise<Target[]>;

const resolveByDns: Resolve = (host) => dnsLookup(host, { all: true, verbatim: true });

/** Refused: the URL's host is, or resolves to, an address inside (loopback, private, link-local…). */
class InternalAddressError extends ValidationError {
  constructor(host: string, address: string) {
    super(`url: ${host} resolves to ${address}, an internal address (set WEBHOOK_ALLOW_PRIVATE=1 to allow)`, 'url');
  }
}

const v4 = (high: number, low: number) => ipaddr.fromByteArray([high >> 8, high & 0xff, low >> 8, low & 0xff]) as ipaddr.IPv4;

/**
 * The IPv4 address an IPv6 address stands for, where the IPv6 one is only a way to write it:
 * IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d, deprecated but still routed by some
 * stacks) and NAT64's well-known prefix (64:ff9b::a.b.c.d, RFC 6052). Read from the parts:
 * ipaddr.js takes `::a.b.c.d` for a mapped address and leaves `::7f00:1` alone.
 */
function embeddedIPv4(address: ipaddr.IPv6): ipaddr.IPv4 | undefined {
  const [a, b, c, d, e, f, g, h] = address.parts as [number, number, number, number, number, number, number, number];
  if (a === 0 && b === 0 && c === 0 && d === 0 && e === 0 && (f === 0 || f === 0xffff)) return v4(g, h);
  if (a === 0x64 && b === 0xff9b && c === 0 && d === 0 && e === 0 && f === 0) return v4(g, h);
  return undefined;
}

/**
 * Whether a webhook may not be sent to `text`: anything but ipaddr.js's `unicast` range (loopback,
 * private, link-local, CGNAT, unspecified, multicast, reserved, unique-local, 6to4, Teredo…). An
 * IPv6 form of an IPv4 address is judged as that IPv4 address; NAT64's local-use prefix
 * (64:ff9b:1::/48, RFC 8215) is internal as a whole, as its translator's network is.
 */
export function isInternalAddress(text: string): boolean {
  if (!ipaddr.isValid(text)) return true;
  const address = ipaddr.parse(text);
  const judged = address.kind() === 'ipv6' ? (embeddedIPv4(address as ipaddr.IPv6) ?? address) : address;
  return judged.range() !== 'unicast';
}

/**
 * The address to connect to for `url`: every address its host resolves to must be public
 * (isInternalAddress) unless WEBHOOK_ALLOW_PRIVATE=1. The request then connects to this address,
 * not to a second lookup that DNS could answer otherwise.
 */
export async function resolveTarget(
  config: Pick<Config, 'webhookAllowPrivate'>,
  url: URL,
  resolve: Resolve = resolveByDns,
): Promise<Target> {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  let addresses: Target[];
  if (ipaddr.isValid(host)) {
    addresses = [{ address: host, family: host.includes(':') ? 6 : 4 }];
  } else {
    try {
      addresses = await resolve(host);
    } catch {
      throw new ValidationError(`url: ${host} does not resolve`, 'url');
    }
  }
  if (addresses.length === 0) throw new ValidationError(`url: ${host} does not resolve`, 'url');
  if (!config.webhookAllowPrivate) {
    for (const { address } of addresses) {
      if (isInternalAddress(address)) throw new InternalAddressError(host, address);
    }
  }
  return addresses[0]!;
}
