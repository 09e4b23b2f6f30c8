/**
 * Inside src/runtime, imports point one way (issue #22): no module reaches itself through its
 * imports, type-only imports included (a type cycle is still a cycle a reader has to untangle).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const RUNTIME = resolve(import.meta.dirname, '../src/runtime');

function importsOf(file: string): string[] {
  const text = readFileSync(join(RUNTIME, file), 'utf8');
  return [...text.matchAll(/\bfrom\s+'\.\/([^']+)\.js'/g)].map((m) => `${m[1]!}.ts`);
}

/** A cycle as a path `a.ts -> b.ts -> a.ts`, or null. */
function findCycle(graph: Map<string, string[]>): string | null {
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (node: string): string | null => {
    if (state.get(node) === 'done') return null;
    if (state.get(node) === 'open') return [...path.slice(path.indexOf(node)), node].join(' -> ');
    state.set(node, 'open');
    path.push(node);
    for (const next of graph.get(node) ?? []) {
      const found = visit(next);
      if (found) return found;
    }
    path.pop();
    state.set(node, 'done');
    return null;
  };
  for (const node of graph.keys()) {
    const found = visit(node);
    if (found) return found;
  }
  return null;
}

describe('src/runtime imports', () => {
  it('form no cycle', () => {
    const files = readdirSync(RUNTIME).filter((f) => f.endsWith('.ts'));
    const graph = new Map(files.map((f) => [f, importsOf(f)]));
    expect(graph.get('worker.ts')!.length).toBeGreaterThan(2);
    expect(findCycle(graph)).toBeNull();
  });

  it('the check finds a cycle when there is one', () => {
    const graph = new Map([
      ['a.ts', ['b.ts']],
      ['b.ts', ['c.ts']],
      ['c.ts', ['a.ts']],
    ]);
    expect(findCycle(graph)).toBe('a.ts -> b.ts -> c.ts -> a.ts');
  });
});
