/**
 * The Host check of `reckon serve` (DNS rebinding): a web page whose own name resolves to
 * 127.0.0.1 can make the browser send requests to a loopback server, with its own name in the
 * `Host` header. Accepting only names we know (the bound address, localhost, an allow-list) and
 * IP literals (which no rebinding can produce) keeps such a page from reading the journal.
 */
import { isIP } from 'node:net';

export interface HostPolicy {
  /** The address the server listens on. */
  bound: string;
  /** More names to accept (`--allowed-hosts`); `*` accepts any. */
  allowed: readonly string[];
}

/** The host name of a `Host` header, lower case, without port or IPv6 brackets. */
export function hostName(header: string): string {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(1, h.indexOf(']') === -1 ? undefined : h.indexOf(']'));
  const colon = h.lastIndexOf(':');
  return colon === -1 ? h : h.slice(0, colon);
}

/** Is a request with this `Host` header (undefined: none, as HTTP/1.0 may send) allowed? */
export function hostAllowed(header: string | undefined, policy: HostPolicy): boolean {
  if (header === undefined) return true;
  if (policy.allowed.includes('*')) return true;
  const name = hostName(header);
  if (name === '') return false;
  if (isIP(name) !== 0) return true;
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  if (name === policy.bound.toLowerCase()) return true;
  return policy.allowed.some((a) => a.toLowerCase() === name);
}

/** `a.example, b.example` (flag or environment) as a list. */
export function parseAllowedHosts(text: string | undefined): string[] {
  return (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => (s === '*' ? s : hostName(s)));
}
