/**
 * Cross-process wake-ups for the SQLite store: the NOTIFY that SQLite lacks.
 *
 * Every process whose workers subscribe listens on a Unix socket in a directory that belongs to
 * the database file (under the temp directory, named by a hash of the file's real path). A
 * process that commits new due work writes one byte to each socket it finds there. The byte
 * carries nothing: it only says "claim now" (a worker's claim still asks the database), so a
 * lost or extra byte changes nothing but latency. Subscribers also poll `PRAGMA data_version`,
 * which catches every commit of every process, socket or not.
 *
 * A socket left behind by a killed process refuses connections; the first publisher to meet it
 * removes the file. Publishers look for new sockets at most once a second, when they publish.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, realpathSync, rmdirSync, unlinkSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/** How often a publisher looks for sockets of processes that started since. */
const RESCAN_MS = 1_000;
const SUFFIX = '.sock';
const BYTE = Buffer.from([1]);

/**
 * The wake-up directory of a database file, or undefined where Unix sockets are not available
 * (Windows): there, subscribers rely on polling alone.
 */
export function wakeDirectory(dbPath: string): string | undefined {
  if (process.platform === 'win32') return undefined;
  let real: string;
  try {
    real = realpathSync(dbPath);
  } catch {
    real = resolve(dbPath);
  }
  // Socket paths are limited to ~100 bytes: a fixed-length name, not the database's path.
  const id = createHash('sha256').update(real).digest('hex').slice(0, 24);
  return join(tmpdir(), 'reckon-wake', id);
}

export class WakeChannel {
  private server: Server | undefined;
  private listening: Promise<void> | undefined;
  private ownName: string | undefined;
  private readonly subscribers = new Set<() => void>();
  private readonly peers = new Map<string, Socket>();
  /** Connections of other processes' publishers to our socket. */
  private readonly accepted = new Set<Socket>();
  private scannedAt = -Infinity;
  private closed = false;

  constructor(private readonly dir: string) {}

  /** Calls `onWork` when another process publishes; resolves once the socket listens. */
  async subscribe(onWork: () => void): Promise<() => void> {
    this.subscribers.add(onWork);
    await this.listen();
    return () => {
      this.subscribers.delete(onWork);
    };
  }

  private listen(): Promise<void> {
    this.listening ??= this.listenOnce().catch((err: NodeJS.ErrnoException) => {
      // The last subscriber of another process removed the empty directory in between.
      if (err.code === 'ENOENT') return this.listenOnce();
      throw err;
    });
    return this.listening;
  }

  private listenOnce(): Promise<void> {
    return new Promise<void>((done, fail) => {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      const name = `${process.pid}-${randomBytes(4).toString('hex')}${SUFFIX}`;
      const server = createServer((socket) => {
        this.accepted.add(socket);
        socket.on('data', () => {
          for (const s of this.subscribers) s();
        });
        socket.on('error', () => socket.destroy());
        socket.on('close', () => this.accepted.delete(socket));
        socket.unref();
      });
      server.once('error', fail);
      server.listen(join(this.dir, name), () => {
        server.off('error', fail);
        // A listening socket never ends the process.
        server.unref();
        this.server = server;
        this.ownName = name;
        done();
      });
    });
  }

  /** Tells the other processes' subscribers that new work is due. Never throws. */
  publish(): void {
    if (this.closed) return;
    const now = performance.now();
    if (now - this.scannedAt >= RESCAN_MS) {
      this.scannedAt = now;
      this.rescan();
    }
    // One byte waiting is enough: a subscriber that is slow to read gets no pile of them.
    for (const socket of this.peers.values())
      if (socket.writable && socket.writableLength === 0) socket.write(BYTE);
  }

  private rescan(): void {
    let names: string[];
    try {
      names = readdirSync(this.dir).filter((n) => n.endsWith(SUFFIX) && n !== this.ownName);
    } catch {
      return; // No directory yet: nobody listens.
    }
    for (const name of names) if (!this.peers.has(name)) this.connect(name);
  }

  private connect(name: string): void {
    const path = join(this.dir, name);
    const socket = createConnection(path);
    socket.unref();
    this.peers.set(name, socket);
    socket.on('error', (err: NodeJS.ErrnoException) => {
      // Nobody listens there: the process that did was killed and left its socket file.
      if (err.code === 'ECONNREFUSED') {
        try {
          unlinkSync(path);
          rmdirSync(this.dir); // if that was the last one
        } catch {
          /* another publisher removed it first, or others still listen */
        }
      }
      socket.destroy();
    });
    socket.on('close', () => {
      if (this.peers.get(name) === socket) this.peers.delete(name);
    });
    // Subscribers only read; whatever they might send is dropped.
    socket.resume();
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const socket of this.peers.values()) socket.destroy();
    this.peers.clear();
    for (const socket of this.accepted) socket.destroy();
    this.accepted.clear();
    this.subscribers.clear();
    const server = this.server;
    this.server = undefined;
    // Closing a listening Unix socket removes its file; the last one out removes the directory.
    if (!server) return;
    await new Promise<void>((done) => server.close(() => done()));
    try {
      rmdirSync(this.dir);
    } catch {
      /* other processes still listen there */
    }
  }
}
