/**
 * Structured JSON logs through pino. Payloads and results are never logged by the runtime;
 * fields that look like secrets are redacted wherever they appear in what is logged.
 */
import { pino, type DestinationStream } from 'pino';
import type { Logger } from '../core/operation.js';

const SECRET_KEYS = [
  'password',
  'passwd',
  'secret',
  'token',
  'apiKey',
  'api_key',
  'authorization',
  'cookie',
  'accessToken',
  'refreshToken',
  'privateKey',
  'cardNumber',
];

export const REDACT_PATHS = SECRET_KEYS.flatMap((k) => [k, `*.${k}`, `*.*.${k}`]);

export interface LoggerOptions {
  level?: 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'silent';
  name?: string;
  destination?: DestinationStream;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  return pino(
    {
      name: options.name ?? 'reckon',
      level: options.level ?? 'info',
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    options.destination ?? pino.destination({ dest: 2, sync: false }),
  );
}
