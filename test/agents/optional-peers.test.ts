/**
 * `npm install reckon` without any agent framework: the frameworks are optional peers, so the
 * package and its CLI must load without them, and `reckon mcp` must say what to install.
 * The child processes run the built package with the frameworks made unresolvable.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

const HIDE = ['--import', './test/fixtures/no-frameworks.js'];

function node(args: string[]) {
  return spawnSync(process.execPath, [...HIDE, ...args], { encoding: 'utf8', timeout: 30_000 });
}

describe('reckon without the agent frameworks installed', () => {
  it('the hiding works: the frameworks are not found', () => {
    const r = node(['--input-type=module', '-e', "await import('ai')"]);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("Cannot find package 'ai'");
  });

  it('imports reckon and runs a job', () => {
    const r = node([
      '--input-type=module',
      '-e',
      `import { openQueue, defineOperation } from 'reckon';
       const op = defineOperation({ name: 'x', execute: async () => 1 });
       const q = await openQueue({ store: 'sqlite::memory:', operations: [op] });
       const w = q.worker({ operations: [op] }); await w.start();
       const out = await q.call(op, {}, { key: 'k', timeoutMs: 10000 });
       await w.stop(); await q.close();
       console.log(out.state);`,
    ]);
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('SUCCEEDED');
  });

  it('runs the CLI; reckon mcp names the package to install', () => {
    expect(node(['dist/cli/main.js', '--help']).status).toBe(0);
    const r = node([
      'dist/cli/main.js',
      'mcp',
      '--operations',
      'examples/chaos/operations.js',
      '--store',
      'sqlite::memory:',
    ]);
    expect(r.status).toBe(64);
    expect(r.stderr).toContain('npm install @modelcontextprotocol/sdk');
  });
});
