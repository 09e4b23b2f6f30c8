// @ts-check
import js from '@eslint/js';
import { existsSync } from 'node:fs';
import tseslint from 'typescript-eslint';

// The bench's peer adapters import pg-boss, graphile-worker, BullMQ and DBOS, which only bench/'s
// own install provides (npm run bench installs it): without it (CI) they are left out, not misread.
const benchPeers = existsSync(`${import.meta.dirname}/bench/node_modules/pg-boss`)
  ? []
  : [
      'bench/systems/pgboss.ts',
      'bench/systems/graphile.ts',
      'bench/systems/bullmq.ts',
      'bench/systems/dbos.ts',
    ];

export default tseslint.config(
  { ignores: ['dist/**', '**/node_modules/**', 'coverage/**', ...benchPeers] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // A floating promise in a queue is a lost completion or a lost lease renewal.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_' },
      ],
    },
  },
  {
    // SQLite prepares a statement again on every run when its LIMIT is a bare bound parameter
    // (see LIMIT_PARAM in sqlite/statements.ts): ≈ 20 µs a claim, half the claim latency.
    files: ['src/store/sqlite/**/*.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: 'TemplateElement[value.raw=/LIMIT \\?/i], Literal[value=/LIMIT \\?/i]',
          message:
            'SQLite re-prepares a statement with a bare bound LIMIT on every run: use LIMIT_PARAM (LIMIT +?).',
        },
      ],
    },
  },
  { files: ['**/*.js'], ...tseslint.configs.disableTypeChecked },
);
