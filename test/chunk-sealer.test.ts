import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { openSlot, releaseSlot, SlotHash, sealSlot, slotData, slotSealed, takeSlot } from '../src/platform/crypto/chunk-sealer';
import { openRaw, SEAL_OVERHEAD, SealError, sealRaw } from '../src/platform/crypto/seal';

const key = randomBytes(32);
const aad = Buffer.from('berth.test\0chunk 1');

/** A slot holding `plain` (capacity: its length). */
function slotOf(plain: Buffer): Buffer {
  const slot = takeSlot(plain.length);
  plain.copy(slotData(slot, plain.length));
  return slot;
}

describe('chunk sealer (sealing threads over shared slots)', () => {
  it('seals in place into the same layout as sealRaw, and opens what sealRaw sealed', async () => {
    const plain = randomBytes(1024 * 1024 + 7);
    const slot = slotOf(plain);
    await sealSlot(key, aad, slot, plain.length);
    const sealed = Buffer.from(slotSealed(slot, plain.length));
    expect(sealed.length).toBe(plain.length + SEAL_OVERHEAD);
    expect(sealed.subarray(12, 12 + plain.length).equals(plain)).toBe(false);
    expect(openRaw(key, sealed, aad).equals(plain)).toBe(true);

    const other = takeSlot(plain.length);
    sealRaw(key, plain, aad).copy(other);
    await openSlot(key, aad, other, plain.length);
    expect(slotData(other, plain.length).equals(plain)).toBe(true);
  });

  it('uses a fresh nonce for every seal', async () => {
    const plain = randomBytes(4096);
    const a = slotOf(plain);
    const b = slotOf(plain);
    await Promise.all([sealSlot(key, aad, a, plain.length), sealSlot(key, aad, b, plain.length)]);
    expect(slotSealed(a, plain.length).equals(slotSealed(b, plain.length))).toBe(false);
  });

  it('refuses a tampered chunk, another key and other associated data with SealError', async () => {
    const plain = randomBytes(64 * 1024);
    const sealed = sealRaw(key, plain, aad);
    const cases: [string, Buffer, Buffer, Buffer][] = [
      ['flipped byte', Buffer.from(sealed).fill(sealed[100]! ^ 1, 100, 101), key, aad],
      ['flipped tag', Buffer.from(sealed).fill(sealed.at(-1)! ^ 1, sealed.length - 1), key, aad],
      ['another key', sealed, randomBytes(32), aad],
      ['other associated data', sealed, key, Buffer.from('berth.test\0chunk 2')],
    ];
    for (const [, bytes, k, a] of cases) {
      const slot = takeSlot(plain.length);
      bytes.copy(slot);
      await expect(openSlot(k, a, slot, plain.length)).rejects.toBeInstanceOf(SealError);
    }
  });

  it('hashes slots in the order they are added, on one thread, as createHash does', async () => {
    const pieces = [randomBytes(3 * 1024 * 1024), randomBytes(1), Buffer.alloc(0), randomBytes(777_777)];
    const hash = new SlotHash();
    const updates = pieces.map((p) => hash.update(slotOf(p), p.length)); // not awaited one by one
    const digest = hash.digest();
    await Promise.all(updates);
    expect(await digest).toBe(createHash('sha256').update(Buffer.concat(pieces)).digest('hex'));
    expect(await new SlotHash().digest()).toBe(createHash('sha256').digest('hex'));
  });

  it('keeps many chunks apart when they are sealed and opened at once', async () => {
    const plains = Array.from({ length: 24 }, (_, i) => randomBytes(100_000 + i));
    const slots = plains.map(slotOf);
    const aadOf = (i: number) => Buffer.from(`chunk ${i}`);
    await Promise.all(slots.map((slot, i) => sealSlot(key, aadOf(i), slot, plains[i]!.length)));
    for (const [i, p] of plains.entries())
      expect(openRaw(key, Buffer.from(slotSealed(slots[i]!, p.length)), aadOf(i)).equals(p)).toBe(true);
    await Promise.all(slots.map((slot, i) => openSlot(key, aadOf(i), slot, plains[i]!.length)));
    for (const [i, p] of plains.entries()) expect(slotData(slots[i]!, p.length).equals(p)).toBe(true);
  });

  it('reuses given-back slots and checks what it is handed', async () => {
    const slot = takeSlot(1000);
    expect(slot.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(slot.length).toBe(1000 + SEAL_OVERHEAD);
    releaseSlot(slot);
    expect(takeSlot(1000)).toBe(slot);
    expect(() => sealSlot(key, aad, Buffer.alloc(1000 + SEAL_OVERHEAD), 1000)).toThrow(TypeError);
    expect(() => sealSlot(key, aad, slot, 1001)).toThrow(RangeError);
    const hash = new SlotHash();
    expect(() => hash.update(slot, -1)).toThrow(RangeError);
    await hash.digest();
  });
});
