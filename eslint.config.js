// Lint gate: type-aware rules for promise misuse, plus import boundaries that encode the layer picture in
// docs/architecture.md (functions → app composition → jobs/transfer/ops → engines → sql).
import tseslint from 'typescript-eslint';

const layer = (from, banned, message, allowTypeImports = false) => ({
  files: from,
  rules: {
    '@typescript-eslint/no-restricted-imports': [
      'error',
      { patterns: banned.map((group) => ({ group: [group], message, allowTypeImports })) },
    ],
  },
});

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'packages/*/dist/**',
      'node_modules/**',
      '.tools/**',
      '.tmp/**',
      '.data/**',
      'tools/**/bin/**',
      'tools/**/obj/**',
    ],
  },
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      parserOptions: {
        // console/vite.config.ts is in no tsconfig (Vite loads it itself).
        projectService: { allowDefaultProject: ['console/vite.config.ts'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
  { files: ['**/*.js', '**/*.mjs'], ...tseslint.configs.disableTypeChecked },
  // dev/ (local host, embedded PostgreSQL, Azurite, demo) sits beside the app and may import anything; nothing
  // that ships may import it.
  layer(
    ['shared/**/*.ts', 'functions/**/*.ts'],
    ['**/dev/*', '**/dev'],
    'dev/ is local-only and not part of the build: inject what the app needs instead',
  ),
  layer(
    ['shared/**/*.ts'],
    ['**/functions/*', '**/dev/*'],
    'shared/ must not import functions/ or dev/: entry points are injected, not imported upward',
  ),
  layer(
    ['shared/engines/**/*.ts'],
    ['**/app/*', '**/ops/*', '**/dev/*', '**/functions/*', '**/jobs/processor*', '**/jobs/maintenance*'],
    'engines sit below jobs/transfer/ops and the composition root: they implement contracts, they do not run them',
    // An engine may implement a contract the processor declares (WakeupSource): types only.
    true,
  ),
  layer(
    ['shared/jobs/**/*.ts', 'shared/transfer/**/*.ts'],
    ['**/app/*', '**/ops/*', '**/dev/*', '**/functions/*', '**/engines/*/*', '**/engines/registry*'],
    'jobs/ and transfer/ depend on contracts, never on a concrete engine or the composition root',
  ),
  // Telemetry is a leaf every layer may use: besides itself it reads only the domain's closed sets (the job and
  // transfer enums), and those two modules import nothing at run time, so no layer reaches another through it.
  {
    files: ['shared/telemetry/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              // One group, so the two exceptions (!) apply to the patterns before them.
              group: [
                '**/app/*',
                '**/ops/*',
                '**/dev/*',
                '**/functions/*',
                '**/engines/*',
                '**/engines/*/*',
                '**/config/*',
                '**/jobs/*',
                '!**/jobs/contract*',
                '**/transfer/*',
                '!**/transfer/types*',
              ],
              message:
                'telemetry is a leaf: it may import only the domain constants in shared/jobs/contract.ts and shared/transfer/types.ts',
            },
          ],
        },
      ],
    },
  },
  layer(
    ['shared/jobs/contract.ts', 'shared/transfer/types.ts'],
    ['**'],
    'the domain constants telemetry imports must import nothing at run time (types only), so telemetry stays a leaf',
    true,
  ),
  layer(
    ['shared/ops/**/*.ts'],
    ['**/app/*', '**/dev/*', '**/functions/*', '**/engines/*/*', '**/engines/registry*'],
    'the ops API depends on its OpsContext (shared/ops/context.ts), not on the composition root or an engine',
  ),
  // The client package is built and published on its own (packages/client): its sources import only each other, zod
  // and Node. Keel imports its rules (shared/jobs/validate.ts, typedEnqueue.ts), never the other way round.
  layer(
    ['packages/client/src/**/*.ts'],
    ['../*', '../**', '@azure/functions', '@azure/functions/*'],
    'packages/client is published standalone: import only its own modules (./x.js), zod and Node built-ins',
  ),
  // Handlers (users' jobs) see the app through one module, shared/handlerApi.ts, so moving a module behind it never
  // breaks a handler; their tests add the test kit (test/kit.ts). One group each, so the exceptions (!) apply.
  {
    files: ['handlers/**/*.ts'],
    ignores: ['handlers/**/*.test.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/shared/*',
                '**/shared/**',
                '!**/shared/handlerApi*',
                '**/dev/*',
                '**/functions/*',
                '**/test/*',
              ],
              message: "handlers import the app only through '../shared/handlerApi.js' (docs/jobs.md)",
            },
          ],
        },
      ],
    },
  },
  {
    files: ['handlers/**/*.test.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/shared/*',
                '**/shared/**',
                '!**/shared/handlerApi*',
                '**/dev/*',
                '**/functions/*',
                '**/test/*',
                '**/test/**',
                '!**/test/kit*',
              ],
              message:
                "handler tests import the app through '../shared/handlerApi.js' and the test kit '../test/kit.js'",
            },
          ],
        },
      ],
    },
  },
);
