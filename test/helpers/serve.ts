/**
 * A real `reckon serve` beside a test, and the HTTP receiver its jobs call: shared by
 * test/notify.test.ts and test/producer-python.test.ts, which both kill a process mid-request
 * and count what the receiver got per key.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CLI_MAIN, ROOT } from './cli.js';
import type { Cleanup } from './cleanup.js';

export interface Serve {
  child: ChildProcess;
  /** The address it listens at (from its start line), e.g. http://127.0.0.1:40123. */
  url: Promise<string>;
}

/** Starts `reckon serve <args>` from source on any free port; SIGKILLed at cleanup. */
export function startServe(args: string[], cleanup: Cleanup, env: NodeJS.ProcessEnv = {}): Serve {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', CLI_MAIN, 'serve', '--port', '0', ...args],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } },
  );
  cleanup(() => child.kill('SIGKILL'));
  child.stdout.resume();
  let err = '';
  const url = new Promise<string>((res, rej) => {
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      err += d;
      const m = /at (http:\/\/[^/\s]+)\//.exec(err);
      if (m) res(m[1]!);
    });
    child.once('exit', (code) => rej(new Error(`serve exited ${code}: ${err}`)));
  });
  url.catch(() => undefined); // a test that never asks for it may kill the server
  return { child, url };
}

export interface Receiver {
  /** Where it listens, ending in `path`. */
  url: string;
  /** Requests received per Idempotency-Key. */
  perKey: Map<string, number>;
  /** The JSON bodies received, in order. */
  bodies: Record<string, unknown>[];
  /** Resolves once the first request has arrived. */
  firstRequest: Promise<void>;
  /** Answers the requests held so far and every later one at once. */
  release(): void;
}

/**
 * An HTTP service on loopback that counts requests per Idempotency-Key and holds every answer
 * (200, `answer(body, key)` as JSON) until `release()`: a process killed while it waits has
 * sent its request and not had the answer.
 */
export function holdingReceiver(
  cleanup: Cleanup,
  path: string,
  answer: (body: Record<string, unknown>, key: string) => unknown,
): Promise<Receiver> {
  const perKey = new Map<string, number>();
  const bodies: Record<string, unknown>[] = [];
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let arrived!: () => void;
  const firstRequest = new Promise<void>((r) => (arrived = r));
  const server = createServer((req, res) => {
    const key = String(req.headers['idempotency-key']);
    perKey.set(key, (perKey.get(key) ?? 0) + 1);
    let text = '';
    req.setEncoding('utf8').on('data', (d: string) => (text += d));
    req.on('end', () => {
      const body = JSON.parse(text) as Record<string, unknown>;
      bodies.push(body);
      arrived();
      void released.then(() =>
        res
          .writeHead(200, { 'content-type': 'application/json' })
          .end(JSON.stringify(answer(body, key))),
      );
    });
  });
  cleanup(() => {
    server.closeAllConnections();
    return new Promise((r) => server.close(r));
  });
  return new Promise((res) =>
    server.listen(0, '127.0.0.1', () =>
      res({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`,
        perKey,
        bodies,
        firstRequest,
        release,
      }),
    ),
  );
}
