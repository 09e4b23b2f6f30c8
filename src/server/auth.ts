/**
 * Authentication: a request's credentials (a bearer token, or a session cookie) made into the
 * `Principal` every route reads from the context. Tokens are stored as SHA-256 hashes; the
 * `--token` of `reckon serve` is compared in constant time and acts as an admin.
 */
import { createHash, randomBytes } from 'node:crypto';
import { AuthenticationRequired } from '../core/errors.js';
import type { Store, TokenRecord } from '../store/store.js';
import { isRole, type Principal } from './principal.js';
import { sameText, type SessionClaims } from './session.js';

/** The token id sessions and decisions record for the single `--token` of `reckon serve`. */
export const SERVE_TOKEN_ID = 'serve-token';

/** A new token: 32 random bytes (256 bits), so a plain SHA-256 is a safe way to store it. */
export function newToken(): string {
  return `rk_${randomBytes(32).toString('base64url')}`;
}

export function tokenHash(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export interface Authenticator {
  /** The principal of a bearer token; AuthenticationRequired when it is unknown, revoked or expired. */
  bearer(token: string): Promise<Principal>;
  /** The principal of a valid session cookie's claims, or null when its token is gone. */
  session(claims: SessionClaims): Promise<Principal | null>;
}

export function authenticator(p: {
  store: Store;
  /** The single admin token of `reckon serve --token`. */
  serveToken?: string | undefined;
  now: () => number;
}): Authenticator {
  const serveAdmin = (via: Principal['via']): Principal => ({
    name: 'admin',
    role: 'admin',
    tokenId: SERVE_TOKEN_ID,
    via,
  });
  return {
    async bearer(token) {
      if (p.serveToken !== undefined && sameText(token, p.serveToken)) return serveAdmin('bearer');
      const record = token.length > 0 ? await p.store.tokenFind({ hash: tokenHash(token) }) : null;
      const principal = record ? live(record, p.now(), 'bearer') : null;
      if (!principal)
        throw new AuthenticationRequired(
          'the bearer token is not known to this server, or was revoked or has expired ' +
            '(reckon tokens list shows the live ones)',
        );
      return principal;
    },
    async session(claims) {
      if (claims.tokenId === SERVE_TOKEN_ID)
        return p.serveToken !== undefined ? serveAdmin('session') : null;
      const record = await p.store.tokenFind({ id: claims.tokenId });
      return record ? live(record, p.now(), 'session') : null;
    },
  };
}

/** The principal of a stored token, if it is neither revoked nor expired at `now`. */
function live(t: TokenRecord, now: number, via: Principal['via']): Principal | null {
  if (t.revokedAt !== null) return null;
  if (t.expiresAt !== null && t.expiresAt <= now) return null;
  if (!isRole(t.role)) return null;
  return {
    name: t.name,
    role: t.role,
    tokenId: t.id,
    ...(t.operations ? { operations: t.operations } : {}),
    ...(t.grants.length ? { grants: t.grants } : {}),
    via,
  };
}
