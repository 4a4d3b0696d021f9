// Signed, expiring bearer links (artifact download links, preview URLs): an HS256 JWT naming its
// subject and audience, valid until a time; nothing is stored. Each kind keeps its own key and
// audience, so a token of one is never accepted as the other.
import { type JWTPayload, errors as jose, jwtVerify, SignJWT } from 'jose';

/** A token of `audience` for `subject` with `claims`, issued at `now` (ms) and valid until `until` (ms, whole seconds kept). */
export async function signToken(
  key: Uint8Array,
  token: { audience: string; subject: string; claims: Record<string, unknown>; now: number; until: number },
): Promise<{ token: string; expires: Date }> {
  const expSeconds = Math.floor(token.until / 1000);
  const signed = await new SignJWT(token.claims)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(token.subject)
    .setAudience(token.audience)
    .setIssuedAt(Math.floor(token.now / 1000))
    .setExpirationTime(expSeconds)
    .sign(key);
  return { token: signed, expires: new Date(expSeconds * 1000) };
}

/**
 * The payload of a token of `audience` signed with `key`, as of `now`: `expired` for one genuinely
 * issued here whose time is past (the signature is checked first), `invalid` for anything else.
 */
export async function verifyToken(
  key: Uint8Array,
  token: string,
  audience: string,
  now: Date,
): Promise<(JWTPayload & { sub: string; exp: number }) | 'expired' | 'invalid'> {
  try {
    const { payload } = await jwtVerify(token, key, { algorithms: ['HS256'], audience, currentDate: now, requiredClaims: ['sub', 'exp'] });
    return payload as JWTPayload & { sub: string; exp: number };
  } catch (error) {
    return error instanceof jose.JWTExpired ? 'expired' : 'invalid';
  }
}
