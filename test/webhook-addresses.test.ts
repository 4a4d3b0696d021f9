// Which addresses a webhook may be sent to: the IPv6 ways of writing an IPv4 address are judged as
// that address. Nothing here connects anywhere: names resolve through a stand-in resolver.
import { describe, expect, it } from 'vitest';
import { isInternalAddress, type Resolve, resolveTarget } from '../src/modules/webhooks/addresses';

const INTERNAL = [
  '127.0.0.1',
  '10.0.0.1',
  '0.0.0.0',
  '169.254.169.254',
  '::1',
  '::',
  'fd00::1',
  'fe80::1',
  // IPv4-compatible
  '::7f00:1',
  '::127.0.0.1',
  '::a00:1',
  '::192.168.1.1',
  // IPv4-mapped
  '::ffff:7f00:1',
  '::ffff:10.0.0.1',
  '::ffff:a9fe:a9fe',
  // NAT64, well-known prefix
  '64:ff9b::7f00:1',
  '64:ff9b::127.0.0.1',
  '64:ff9b::a00:1',
  '64:ff9b::a9fe:a9fe',
  // NAT64, local-use prefix: internal whatever it carries
  '64:ff9b:1::7f00:1',
  '64:ff9b:1::808:808',
  '64:ff9b:1:7f00:1::',
  // 6to4 and Teredo carry an IPv4 address too, elsewhere: refused as a whole
  '2002:7f00:1::1',
  '2001:0:7f00:1::1',
  'not an address',
];

const PUBLIC = ['8.8.8.8', '2606:4700::1111', '::808:808', '::ffff:8.8.8.8', '64:ff9b::808:808', '64:ff9b::8.8.8.8'];

describe('webhook addresses', () => {
  it('judges an IPv6 form of an IPv4 address as that IPv4 address', () => {
    for (const address of INTERNAL) expect(isInternalAddress(address), address).toBe(true);
    for (const address of PUBLIC) expect(isInternalAddress(address), address).toBe(false);
  });

  it('refuses a name when any address it resolves to is internal, and answers the first otherwise', async () => {
    const answers: Record<string, string[]> = {
      'compat.test': ['::7f00:1'],
      'mapped.test': ['::ffff:10.0.0.1'],
      'nat64.test': ['64:ff9b::7f00:1'],
      'local-nat64.test': ['64:ff9b:1::a00:1'],
      'mixed.test': ['2606:4700::1111', '::ffff:7f00:1'],
      'public.test': ['64:ff9b::808:808', '8.8.8.8'],
    };
    const resolve: Resolve = async (host) => (answers[host] ?? []).map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
    const strict = { webhookAllowPrivate: false };
    for (const host of ['compat.test', 'mapped.test', 'nat64.test', 'local-nat64.test', 'mixed.test']) {
      await expect(resolveTarget(strict, new URL(`https://${host}/hook`), resolve), host).rejects.toThrow(/internal address/);
    }
    await expect(resolveTarget(strict, new URL('https://nowhere.test/hook'), resolve)).rejects.toThrow(/does not resolve/);
    expect(await resolveTarget(strict, new URL('https://public.test/hook'), resolve)).toEqual({ address: '64:ff9b::808:808', family: 6 });
    expect(await resolveTarget({ webhookAllowPrivate: true }, new URL('https://compat.test/hook'), resolve)).toEqual({
      address: '::7f00:1',
      family: 6,
    });
  });

  it('refuses literal hosts in every spelling the URL parser accepts', async () => {
    const strict = { webhookAllowPrivate: false };
    for (const url of ['http://[::127.0.0.1]/', 'http://[::ffff:127.0.0.1]/', 'http://[64:ff9b::127.0.0.1]/', 'http://2130706433/']) {
      await expect(resolveTarget(strict, new URL(url)), url).rejects.toThrow(/internal address/);
    }
  });
});
