/**
 * Every system the bench knows, by the name --systems takes, each loaded only when a run asks
 * for it (a memory child must not carry the others' libraries). The peers live in bench/'s own
 * package (bench/package.json), not in reckon's, and are installed (npm ci --prefix bench) the
 * first time a run asks for one: a reckon-only run needs only the repository's own install.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { BenchSystem } from './system.js';

const RECKON: Record<string, 'sqlite' | 'postgres'> = {
  'reckon-sqlite': 'sqlite',
  'reckon-pg': 'postgres',
};

/** Peer name → its module in this folder, which default-exports a factory. */
const PEERS: Record<string, string> = {
  'pg-boss': 'pgboss.js',
  'graphile-worker': 'graphile.js',
  bullmq: 'bullmq.js',
  dbos: 'dbos.js',
};

export const SYSTEM_NAMES: readonly string[] = [...Object.keys(RECKON), ...Object.keys(PEERS)];

const BENCH_DIR = fileURLToPath(new URL('..', import.meta.url));

/** npm could not install bench/'s package; npm has said why on stderr. */
export class PeerInstallError extends Error {}

/**
 * Installs bench/'s own dependencies when they are missing or do not match its lock file (npm
 * writes node_modules/.package-lock.json on every install).
 */
export function ensurePeersInstalled(log: (m: string) => void): void {
  const installed = `${BENCH_DIR}node_modules/.package-lock.json`;
  const lock = `${BENCH_DIR}package-lock.json`;
  if (existsSync(installed) && sameLock(installed, lock)) return;
  log('bench: installing the peers (npm ci --prefix bench), once');
  const args = ['ci', '--prefix', BENCH_DIR, '--no-audit', '--no-fund', '--loglevel=error'];
  try {
    execFileSync('npm', args, { stdio: ['ignore', 'inherit', 'inherit'] });
  } catch (err) {
    throw new PeerInstallError(
      'could not install the peers (npm ci --prefix bench failed, above); ' +
        'a reckon-only run needs none: --systems reckon-sqlite,reckon-pg',
      { cause: err },
    );
  }
}

/** Whether every package the lock file requires is installed at the version it names. */
function sameLock(installedPath: string, lockPath: string): boolean {
  type Lock = { packages: Record<string, { version?: string; optional?: boolean }> };
  const installed = (JSON.parse(readFileSync(installedPath, 'utf8')) as Lock).packages;
  const locked = (JSON.parse(readFileSync(lockPath, 'utf8')) as Lock).packages;
  return Object.entries(locked).every(
    ([path, p]) => path === '' || p.optional === true || installed[path]?.version === p.version,
  );
}

/** The factories of the named systems (names already checked against SYSTEM_NAMES). */
export async function loadSystems(
  names: readonly string[],
  log: (m: string) => void,
): Promise<Record<string, () => BenchSystem>> {
  const out: Record<string, () => BenchSystem> = {};
  const peers = names.filter((n) => PEERS[n]);
  if (peers.length > 0) ensurePeersInstalled(log);
  for (const name of names) {
    const file = PEERS[name];
    const store = RECKON[name];
    if (store) {
      const { ReckonSystem } = await import('./reckon.js');
      out[name] = () => new ReckonSystem(store);
    } else if (file) {
      // A computed specifier: the root typecheck (CI, where bench/ is not installed) does not
      // follow it into the peers' packages; bench/tsconfig.json checks those files.
      const mod = (await import(`./${file}`)) as { default: () => BenchSystem };
      out[name] = mod.default;
    } else throw new Error(`unknown system ${name}`);
  }
  return out;
}
