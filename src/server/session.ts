/**
 * Browser sessions: a person signs in once with a token (POST <base>/login) and gets a cookie
 * that names the token and when the session ends, signed with the server's key (HMAC-SHA-256).
 * Nothing is stored per session; the token itself is looked up on every request, so revoking it
 * ends its sessions at once. The cookie is HttpOnly, SameSite=Strict, Secure over https, and
 * expires after `sessionTtlMs`. The form (CSRF) token of a session is another HMAC of the
 * cookie, so a page of another site can neither read nor forge it.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const SESSION_COOKIE = 'reckon_session';

export interface SessionClaims {
  tokenId: string;
  /** Ms since the epoch. */
  expiresAt: number;
}

export class SessionKeys {
  private readonly key: Buffer;
  /** `secret`: keeps sessions valid across restarts and replicas; default a random key per process. */
  constructor(secret?: string | Uint8Array) {
    this.key = secret === undefined ? randomBytes(32) : Buffer.from(secret);
  }

  private mac(purpose: string, text: string): string {
    return createHmac('sha256', this.key).update(`${purpose}\n${text}`).digest('base64url');
  }

  seal(claims: SessionClaims): string {
    const body = Buffer.from(`${claims.tokenId}|${claims.expiresAt}`).toString('base64url');
    return `${body}.${this.mac('session', body)}`;
  }

  /** The claims of a cookie value this server signed and that has not expired at `now`. */
  open(value: string | undefined, now: number): SessionClaims | null {
    if (!value) return null;
    const dot = value.indexOf('.');
    if (dot < 1) return null;
    const body = value.slice(0, dot);
    if (!sameText(value.slice(dot + 1), this.mac('session', body))) return null;
    const [tokenId, expires] = Buffer.from(body, 'base64url').toString('utf8').split('|');
    const expiresAt = Number(expires);
    if (!tokenId || !Number.isFinite(expiresAt) || expiresAt <= now) return null;
    return { tokenId, expiresAt };
  }

  /** The form token bound to one session cookie. */
  csrfToken(cookieValue: string): string {
    return this.mac('csrf', cookieValue);
  }
}

/** Constant-time comparison of two strings. */
export function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
