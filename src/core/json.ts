/**
 * JSON at the boundary (invariant 10): a payload is accepted only if it is plain JSON data,
 * so that what the journal keeps is exactly what the operation will receive after a restart.
 * Canonical JSON (sorted keys, no whitespace) is what request fingerprints hash.
 */
import * as nodeCrypto from 'node:crypto';
import { InvalidInput, PayloadTooLarge } from './errors.js';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * Most objects and arrays nested in one another that a payload (input, fingerprint, result) may
 * have. Real requests are a few levels deep; the bound keeps every walk of a payload (here, the
 * stores, `JSON.stringify`) far from the stack's end, so a hostile input is a typed error.
 */
export const JSON_DEPTH_MAX = 100;

/** Throws `InvalidInput` naming the path of the first value that is not plain JSON data. */
export function assertJson(value: unknown, what = 'payload'): asserts value is Json {
  if (value === undefined)
    throw new InvalidInput(`${what} is undefined; pass null or an object`, '$');
  // The common case, valid data, is checked without building a path per value; only a value
  // that fails is walked again to name where.
  if (!isJson(value, null, 1)) {
    walk(value, '$', new Set(), what, 1);
    throw new InvalidInput(`${what} is not plain JSON data`, '$');
  }
}

/**
 * Is the value plain JSON data (the rules of `walk`)? `ancestors` holds the objects above it, a
 * linked list: payloads are shallow, and a Set per payload cost more than the check itself.
 */
function isJson(value: unknown, ancestors: Ancestor | null, depth: number): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object':
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (depth > JSON_DEPTH_MAX) return false;
  for (let a = ancestors; a !== null; a = a.up) if (a.obj === value) return false;
  const here: Ancestor = { obj: value, up: ancestors };
  if (Array.isArray(value)) {
    // forEach, as `walk` does: holes are skipped (JSON writes them as null).
    let ok = true;
    value.forEach((item) => {
      if (ok && !isJson(item, here, depth + 1)) ok = false;
    });
    return ok;
  }
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== Object.prototype && proto !== null) return false;
  for (const k in value) {
    if (!Object.hasOwn(value, k)) continue;
    const v = (value as Record<string, unknown>)[k];
    if (v !== undefined && !isJson(v, here, depth + 1)) return false;
  }
  return true;
}

interface Ancestor {
  obj: object;
  up: Ancestor | null;
}

function walk(value: unknown, path: string, seen: Set<object>, what: string, depth: number): void {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value))
        throw new InvalidInput(`${what} has a non-finite number (${value}) at ${path}`, path);
      return;
    case 'bigint':
      throw new InvalidInput(
        `${what} has a BigInt at ${path}; JSON has no BigInt: pass it as a string`,
        path,
      );
    case 'function':
      throw new InvalidInput(
        `${what} has a function at ${path}; only JSON data can be journaled`,
        path,
      );
    case 'symbol':
      throw new InvalidInput(`${what} has a symbol at ${path}`, path);
    case 'undefined':
      throw new InvalidInput(`${what} has undefined at ${path}; omit the field or use null`, path);
    case 'object':
      break;
  }
  if (value === null) return;
  if (depth > JSON_DEPTH_MAX)
    throw new InvalidInput(
      `${what} is nested deeper than ${JSON_DEPTH_MAX} levels of objects and arrays at ${path.slice(0, 200)}${path.length > 200 ? '…' : ''} (JSON_DEPTH_MAX)`,
      path,
    );
  const obj = value;
  if (seen.has(obj)) throw new InvalidInput(`${what} has a cycle at ${path}`, path);
  seen.add(obj);
  if (Array.isArray(obj)) {
    obj.forEach((item, i) => walk(item, `${path}[${i}]`, seen, what, depth + 1));
  } else {
    const proto = Object.getPrototypeOf(obj) as unknown;
    if (proto !== Object.prototype && proto !== null) {
      const kind = (obj as { constructor?: { name?: string } }).constructor?.name ?? 'object';
      throw new InvalidInput(
        `${what} has a ${kind} at ${path}; only plain objects, arrays, strings, finite numbers, booleans and null are accepted` +
          (kind === 'Date' ? ' (pass the date as an ISO string)' : ''),
        path,
      );
    }
    for (const [k, v] of Object.entries(obj)) {
      // A property explicitly set to undefined is dropped by JSON; accept it the same way.
      if (v !== undefined) walk(v, `${path}.${k}`, seen, what, depth + 1);
    }
  }
  seen.delete(obj);
}

/** Canonical JSON: object keys sorted by code unit, no whitespace. */
export function canonicalJson(value: unknown, what = 'payload'): string {
  assertJson(value, what);
  return canonical(value);
}

/**
 * Canonical JSON of a value already known to be JSON data. Written as a loop over strings: the
 * fingerprint of every enqueued job goes through here.
 */
function canonical(value: Json): string {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'number':
      // Finite (checked): String writes it exactly as JSON.stringify does, -0 as 0 too.
      return String(value);
    case 'boolean':
      return value ? 'true' : 'false';
  }
  if (value === null) return 'null';
  if (Array.isArray(value)) {
    // A hole is written as JSON.stringify writes it, null.
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      out += i in value ? canonical(value[i] as Json) : 'null';
    }
    return `${out}]`;
  }
  const keys = Object.keys(value);
  if (keys.length > 1) keys.sort();
  let out = '{';
  for (const k of keys) {
    const v = value[k];
    if (v === undefined) continue;
    if (out.length > 1) out += ',';
    out += JSON.stringify(k);
    out += ':';
    out += canonical(v);
  }
  return `${out}}`;
}

/**
 * SHA-256 of a string, hex. One-shot `crypto.hash` (Node 20.12+) is about 3x faster than a
 * `createHash` object for inputs this small; older Node 20 releases have only the latter.
 */
export const sha256Hex: (text: string) => string =
  typeof (nodeCrypto as { hash?: unknown }).hash === 'function'
    ? (text) => nodeCrypto.hash('sha256', text, 'hex')
    : (text) => nodeCrypto.createHash('sha256').update(text).digest('hex');

/** SHA-256 of canonical JSON, hex. */
export function fingerprintOf(value: unknown, what = 'payload'): string {
  return sha256Hex(canonicalJson(value, what));
}

/**
 * Checks a payload and writes it as canonical JSON (sorted keys, no whitespace), the form the
 * journal keeps: its fingerprint is then the SHA-256 of the stored text itself (`sha256Hex`),
 * and what the operation receives after a restart is exactly what was hashed. Also checks the
 * text against a byte limit.
 */
export function encodePayload(value: unknown, what: string, limitBytes: number): string {
  assertJson(value, what);
  const text = canonical(value);
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > limitBytes) throw new PayloadTooLarge(what, bytes, limitBytes);
  return text;
}

/** Encodes a value that came back from user code (a result), replacing what JSON cannot hold. */
export function encodeResult(value: unknown): string | null {
  if (value === undefined) return null;
  try {
    assertJson(value, 'result');
    return JSON.stringify(value);
  } catch {
    // A result that is not plain JSON is still evidence: keep its best-effort rendering.
    try {
      return JSON.stringify({ unserializable: Object.prototype.toString.call(value) });
    } catch {
      return JSON.stringify({ unserializable: true });
    }
  }
}
