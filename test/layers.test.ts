/**
 * Dependencies point one way (docs/design.md, "Architecture"): a module of src/ imports only
 * its own folder and the layers below it; the runtime reaches the stores through the Store
 * interface only, and core does no I/O. src/index.ts, the package's entry, counts as the
 * highest layer it imports. `npm run check:deps` runs this file alone.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = resolve(import.meta.dirname, '../src');

/** Bottom to top. The CLI sits above the testkit: `reckon demo` and `reckon chaos` run it. */
const LAYERS = ['core', 'store', 'runtime', 'observe', 'server', 'agents', 'testkit', 'cli'];
const ENTRY = 'index.ts';

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? sourceFiles(join(dir, e.name))
      : e.name.endsWith('.ts')
        ? [join(dir, e.name)]
        : [],
  );
}

/** Relative specifiers of static imports, re-exports and dynamic imports, resolved to src paths. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specs = [...text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^import\s+)'(\.{1,2}\/[^']+)'/gm)];
  return specs.map((m) => relative(SRC, resolve(dirname(file), m[1]!.replace(/\.js$/, '.ts'))));
}

/** The layer of a path relative to src/: its top folder, or the entry. */
function layerOf(path: string): string {
  return path.includes(sep) ? path.split(sep)[0]! : path;
}

const files = sourceFiles(SRC).map((f) => relative(SRC, f));
const imports = new Map(files.map((f) => [f, importsOf(join(SRC, f))]));

function rank(layer: string): number {
  if (layer === ENTRY) return Math.max(...(imports.get(ENTRY) ?? []).map((p) => rank(layerOf(p))));
  const r = LAYERS.indexOf(layer);
  if (r < 0) throw new Error(`src/${layer} is in no layer: add it to LAYERS in this test`);
  return r;
}

describe('layers', () => {
  it('finds the modules and their imports', () => {
    expect(files).toContain(join('core', 'states.ts'));
    expect(imports.get(ENTRY)!.length).toBeGreaterThan(3);
  });

  it('no module imports a layer above its own', () => {
    const upward: string[] = [];
    for (const [file, targets] of imports) {
      const from = layerOf(file);
      for (const target of targets) {
        const to = layerOf(target);
        if (to === from || file === ENTRY) continue;
        if (rank(to) > rank(from)) upward.push(`src/${file} imports src/${target}`);
      }
    }
    expect(upward).toEqual([]);
  });

  it('the runtime knows the Store interface, never a concrete store', () => {
    const concrete = [...imports]
      .filter(([file]) => layerOf(file) === 'runtime')
      .flatMap(([file, targets]) =>
        targets
          .filter((t) => /^store[/\\](sqlite|postgres)[/\\]|^store[/\\]open\.ts$/.test(t))
          .map((t) => `src/${file} imports src/${t}`),
      );
    expect(concrete).toEqual([]);
  });

  it('core does no I/O: no file, network, process or database module', () => {
    const io =
      /^(node:)?(fs|fs\/promises|net|dgram|http|https|http2|child_process|worker_threads)$|^(pg|better-sqlite3)$/;
    const found = files
      .filter((f) => layerOf(f) === 'core')
      .flatMap((f) =>
        [...readFileSync(join(SRC, f), 'utf8').matchAll(/\bfrom\s+'([^'.][^']*)'/g)]
          .filter((m) => io.test(m[1]!))
          .map((m) => `src/${f} imports ${m[1]}`),
      );
    expect(found).toEqual([]);
  });

  it('the entry exports no command-line code', () => {
    const fromEntry = imports.get(ENTRY)!.map(layerOf);
    expect(fromEntry).not.toContain('cli');
    expect(fromEntry).not.toContain('testkit');
  });
});
