/**
 * The HTTP refusal classes of src/core/errors.ts, made by one factory: each keeps its own class
 * (name, `instanceof`), its status and code, and is an `HttpRefusal` and a `ReckonError`; the
 * problem+json answers built from them are pinned in test/server-app.test.ts.
 */
import { describe, expect, it } from 'vitest';
import {
  AuthenticationRequired,
  CrossSiteRequest,
  HostNotAllowed,
  HttpRefusal,
  NotPermitted,
  ReckonError,
  RequestTooLarge,
  TooManyRequests,
} from '../src/core/errors.js';

const KINDS = [
  [AuthenticationRequired, 401, 'UNAUTHORIZED'],
  [NotPermitted, 403, 'FORBIDDEN'],
  [CrossSiteRequest, 403, 'CROSS_SITE_REQUEST'],
  [RequestTooLarge, 413, 'REQUEST_TOO_LARGE'],
  [HostNotAllowed, 421, 'HOST_NOT_ALLOWED'],
] as const;

describe('HTTP refusals', () => {
  it.each(KINDS)('%o: its own class, status and code', (Kind, status, code) => {
    const err = new Kind('what to do');
    expect(err).toBeInstanceOf(Kind);
    expect(err).toBeInstanceOf(HttpRefusal);
    expect(err).toBeInstanceOf(ReckonError);
    expect(err).toBeInstanceOf(Error);
    expect(err).toMatchObject({ name: Kind.name, status, code, message: 'what to do' });
    expect(Kind.name).not.toBe('');
    for (const [Other] of KINDS) if (Other !== Kind) expect(err).not.toBeInstanceOf(Other);
  });

  it('TooManyRequests carries its Retry-After', () => {
    const err = new TooManyRequests('slow down', 1500);
    expect(err).toBeInstanceOf(HttpRefusal);
    expect(err).toMatchObject({
      name: 'TooManyRequests',
      status: 429,
      code: 'TOO_MANY_REQUESTS',
      message: 'slow down',
      retryAfterMs: 1500,
    });
  });
});
