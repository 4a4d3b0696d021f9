// Generated names and opaque identifiers.
//
// Environment names read like `brave-otter-4821`: an adjective, a noun and four digits
// (1000-9999), from 64 adjectives x 64 nouns x 9000 numbers, about 36.9 million names. They are
// unique-ish only: the caller must still rely on a unique index and retry on a collision.
// Names can never be mistaken for ids: ids contain `_`, names never do.
//
// Ids are `<prefix>_<20 chars>`: 100 bits from the system CSPRNG in lower-case RFC 4648 base32
// (`a-z2-7`, no padding), e.g. `env_k3h2m7q4x9a2b5c6d7ef`.
import { randomBytes, randomInt } from 'node:crypto';

const ADJECTIVES = [
  'amber',
  'ample',
  'azure',
  'bold',
  'brave',
  'breezy',
  'bright',
  'brisk',
  'calm',
  'clever',
  'cosmic',
  'crisp',
  'dapper',
  'daring',
  'deft',
  'eager',
  'early',
  'fancy',
  'fearless',
  'fleet',
  'fond',
  'frosty',
  'gentle',
  'glad',
  'golden',
  'grand',
  'happy',
  'hardy',
  'hazel',
  'honest',
  'jolly',
  'keen',
  'kind',
  'lively',
  'lucid',
  'lucky',
  'mellow',
  'merry',
  'mighty',
  'misty',
  'nimble',
  'noble',
  'patient',
  'plucky',
  'polite',
  'proud',
  'quick',
  'quiet',
  'rapid',
  'ruby',
  'sandy',
  'sharp',
  'shiny',
  'silent',
  'sleek',
  'smooth',
  'snowy',
  'solid',
  'sturdy',
  'sunny',
  'swift',
  'tidy',
  'vivid',
  'witty',
] as const;

const NOUNS = [
  'badger',
  'beacon',
  'bison',
  'canyon',
  'cedar',
  'comet',
  'condor',
  'coral',
  'crane',
  'delta',
  'dolphin',
  'eagle',
  'ember',
  'falcon',
  'fern',
  'finch',
  'fjord',
  'fox',
  'galaxy',
  'glacier',
  'harbor',
  'hawk',
  'heron',
  'island',
  'jaguar',
  'kestrel',
  'koala',
  'lagoon',
  'lark',
  'lemur',
  'lynx',
  'maple',
  'meadow',
  'meteor',
  'moose',
  'nebula',
  'ocelot',
  'orca',
  'osprey',
  'otter',
  'panda',
  'pebble',
  'pine',
  'planet',
  'puffin',
  'quartz',
  'raven',
  'reef',
  'river',
  'robin',
  'salmon',
  'sparrow',
  'summit',
  'tiger',
  'tundra',
  'valley',
  'walrus',
  'willow',
  'wombat',
  'yak',
  'zebra',
  'breeze',
  'cliff',
  'dune',
] as const;

/** Words in the lists, exposed for tests and for validating names. */
export const NAME_WORDS = { adjectives: ADJECTIVES, nouns: NOUNS } as const;

/** The shape of every generated name. */
export const GENERATED_NAME = /^[a-z]+-[a-z]+-[1-9][0-9]{3}$/;

/** A readable, unique-ish name such as `brave-otter-4821`. */
export function generateName(): string {
  const adjective = ADJECTIVES[randomInt(ADJECTIVES.length)];
  const noun = NOUNS[randomInt(NOUNS.length)];
  const number = randomInt(1000, 10000);
  return `${adjective}-${noun}-${number}`;
}

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const ID_RANDOM_CHARS = 20;
const PREFIX = /^[a-z][a-z0-9]*$/;

export type IdPrefix = 'env' | 'sb' | 'art' | 'snap' | 'tok' | 'key' | 'org' | 'usr';

/** `${prefix}_` followed by 20 characters of crypto-random lower-case base32 (100 bits). */
export function newId(prefix: IdPrefix | (string & {})): string {
  if (!PREFIX.test(prefix)) throw new Error(`newId: bad prefix ${JSON.stringify(prefix)}`);
  return `${prefix}_${randomBase32(ID_RANDOM_CHARS)}`;
}

/** `count` characters of crypto-random lower-case base32 (5 bits each). */
export function randomBase32(count: number): string {
  const bytes = randomBytes(Math.ceil((count * 5) / 8));
  let out = '';
  let buffer = 0;
  let bits = 0;
  for (const byte of bytes) {
    buffer = ((buffer << 8) | byte) & 0xffff;
    bits += 8;
    while (bits >= 5 && out.length < count) {
      out += BASE32[(buffer >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  // ceil(count*5/8) bytes always hold at least count*5 bits, so out is complete here.
  return out;
}

/** Whether `value` has the shape newId produces (for `prefix` when given). */
export function isId(value: string, prefix?: string): boolean {
  const m = /^([a-z][a-z0-9]*)_([a-z2-7]{20})$/.exec(value);
  return m !== null && (prefix === undefined || m[1] === prefix);
}
