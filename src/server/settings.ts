/**
 * Every limit of the HTTP server, named with its unit last and validated once.
 */
import { InvalidInput } from '../core/errors.js';

export interface ServerSettings {
  /** Largest request body (bytes), refused with 413 before it is parsed. 1 MiB + room: an enqueue batch. */
  bodyBytesMax: number;
  /** Deepest nesting of objects and arrays in a JSON body, checked before parsing (413). */
  jsonDepthMax: number;
  /** Requests one principal (token, or address when anonymous) may make per window (429 beyond). */
  rateLimitMax: number;
  rateLimitWindowMs: number;
  /** How long a browser session lasts after sign-in. */
  sessionTtlMs: number;
  /** Longest wait a `call` may ask for over HTTP (a proxy in between may cut it shorter). */
  callWaitMsMax: number;
}

export const SERVER_DEFAULTS: ServerSettings = {
  bodyBytesMax: 2 * 1024 * 1024,
  jsonDepthMax: 64,
  rateLimitMax: 600,
  rateLimitWindowMs: 60_000,
  sessionTtlMs: 8 * 3_600_000,
  callWaitMsMax: 300_000,
};

export function serverSettings(input: Partial<ServerSettings> = {}): ServerSettings {
  const s: ServerSettings = { ...SERVER_DEFAULTS };
  for (const [name, value] of Object.entries(input) as [keyof ServerSettings, unknown][]) {
    if (value === undefined) continue;
    if (!(name in SERVER_DEFAULTS)) throw new InvalidInput(`unknown server setting ${name}`);
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 2 ** 31)
      throw new InvalidInput(`${name} must be an integer from 1 to ${2 ** 31}`);
    s[name] = value;
  }
  return s;
}
