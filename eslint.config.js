// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**'] },
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
    // (see LIMIT_PARAM in sqlite-store.ts): ≈ 20 µs a claim, half the claim latency.
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
