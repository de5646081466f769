// Lint gate: type-aware rules for promise misuse, plus import boundaries that encode the layer picture in
// docs/architecture.md. test/lint/boundaries.test.ts lints forbidden imports and checks that every shipped file gets
// every ban of its folder.
import tseslint from 'typescript-eslint';

// One ban: import paths (gitignore-style groups, or one regex) and the reason shown when an import matches.
const ban = (paths, message) => ({ ...(typeof paths === 'string' ? { regex: paths } : { group: paths }), message });

const DEV = ban(
  ['**/dev/*', '**/dev'],
  'dev/ is local-only and not part of the build: inject what the app needs instead',
);
const FUNCTIONS = ban(
  ['**/functions/*'],
  'shared/ must not import functions/: entry points are injected, not imported upward',
);
const ROOT = ban(
  ['**/app/*'],
  'only functions/ and tools import the composition root (shared/app): it is injected into the layers below',
);
const OPS = ban(['**/ops/*'], 'ops/ sits above jobs/ and transfer/ (it calls them); nothing below imports it');
const ENGINES = ban(
  ['**/engines/*/*', '**/engines/registry*'],
  'the domain depends on contracts, never on a concrete engine or the registry: the composition root picks the engine',
);
const RUNNERS = ban(
  ['**/jobs/processor*', '**/jobs/producer*', '**/jobs/executor*', '**/jobs/completer*', '**/jobs/maintenance*'],
  'engines implement the domain contracts (shared/jobs/contract.ts); they do not run them',
);
// shared/config/settings.ts reads the engine registry (the job store engines, their control settings), so below the
// composition root it is a type: a value import would reach every engine descriptor.
const SETTINGS = ban(
  ['**/config/settings*'],
  'shared/config/settings.ts reads the engine registry: below the composition root, import its Settings type only',
);

// Each file gets ONE no-restricted-imports block: in a flat config a later block matching the same file replaces
// an earlier block's options for the rule instead of adding to them. So every block lists all the bans of its
// folder (shared/ ones included), and the more specific folders are ignored by the broader blocks.
const boundary = (files, bans, { ignores = [], typeImportsAllowed } = {}) => ({
  files,
  ...(ignores.length ? { ignores } : {}),
  rules: {
    '@typescript-eslint/no-restricted-imports': [
      'error',
      {
        patterns: [
          ...bans.map((b) => (b === SETTINGS ? { ...b, allowTypeImports: true } : b)),
          // typescript-eslint skips every check of a type import that matches a pattern with allowTypeImports, so
          // the "types only" pattern is a regex that leaves out the banned folders.
          ...(typeImportsAllowed ? [{ ...typeImportsAllowed, allowTypeImports: true }] : []),
        ],
      },
    ],
  },
});

// One configuration model (docs/architecture.md, "Configuration"): the composition root reads the environment in one
// module and hands it down, as parsed Settings or as an explicit env argument to a per-feature schema. Every spelling
// of a read is caught: process.env, globalThis.process.env, `const { env } = process`, `import { env } from 'node:process'`.
const ENV_READ_MESSAGE =
  'process.env is read only by shared/app/environment.ts (the composition root): take Settings or the env as an argument, and declare a new setting in Settings or a per-feature schema listed in shared/app/settingsIndex.ts (a handler: appSetting from shared/handlerApi.ts)';
const ENV_ROOT = 'shared/app/environment.ts';
// Shipped code (handlers/ included: a handler reads its own settings through shared/handlerApi.ts appSetting) and the
// client package (a library: it takes options); the tools around the app (dev/, scripts/, test/, bench/, tests
// anywhere) are composition roots of their own.
const noProcessEnv = {
  files: ['shared/**/*.ts', 'functions/**/*.ts', 'handlers/**/*.ts', 'packages/client/src/**/*.ts'],
  ignores: [ENV_ROOT, '**/*.test.ts'],
  rules: {
    'no-restricted-syntax': [
      'error',
      ...[
        "MemberExpression[object.name='process'][property.name='env']",
        "MemberExpression[object.property.name='process'][property.name='env']",
        "VariableDeclarator[init.name='process'] > ObjectPattern > Property[key.name='env']",
        "MemberExpression[object.name='process'][property.value='env']",
        "ImportDeclaration[source.value=/^(node:)?process$/] > ImportSpecifier[imported.name='env']",
        // import * as p / import p from 'node:process' would reach p.env: the global process is enough.
        'ImportDeclaration[source.value=/^(node:)?process$/] > ImportNamespaceSpecifier',
        'ImportDeclaration[source.value=/^(node:)?process$/] > ImportDefaultSpecifier',
      ].map((selector) => ({ selector, message: ENV_READ_MESSAGE })),
    ],
  },
};

const SPECIFIC = [
  'shared/engines/**',
  'shared/jobs/**',
  'shared/transfer/**',
  'shared/ops/**',
  'shared/telemetry/**',
  'shared/config/**',
];
const DOMAIN_BANS = [DEV, FUNCTIONS, ROOT, OPS, ENGINES, SETTINGS];

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
  noProcessEnv,
  // functions/: thin entry points over the composition root.
  boundary(['functions/**/*.ts'], [DEV]),
  // handlers/ (users' jobs, shipped) see the app through one module, shared/handlerApi.ts, so moving a module behind
  // it never breaks a handler (docs/jobs.md); their tests add the test kit (test/kit.ts). One group each, so the
  // exceptions (!) apply to the patterns before them.
  boundary(
    ['handlers/**/*.ts'],
    [
      ban(
        ['**/shared/*', '**/shared/**', '!**/shared/handlerApi*', '**/dev/*', '**/dev', '**/functions/*', '**/test/*'],
        "handlers import the app only through '../shared/handlerApi.js' (docs/jobs.md)",
      ),
    ],
    { ignores: ['handlers/**/*.test.ts'] },
  ),
  boundary(
    ['handlers/**/*.test.ts'],
    [
      ban(
        [
          '**/shared/*',
          '**/shared/**',
          '!**/shared/handlerApi*',
          '**/dev/*',
          '**/dev',
          '**/functions/*',
          '**/test/*',
          '**/test/**',
          '!**/test/kit*',
        ],
        "handler tests import the app through '../shared/handlerApi.js' and the test kit '../test/kit.js'",
      ),
    ],
  ),
  // The composition root (shared/app) and shared/ files outside the folders below.
  boundary(['shared/**/*.ts'], [DEV, FUNCTIONS], { ignores: SPECIFIC }),
  // Engines implement the domain's contracts; the domain (jobs, transfer) and the ops API never import an engine.
  boundary(['shared/engines/**/*.ts'], [DEV, FUNCTIONS, ROOT, OPS, RUNNERS, SETTINGS]),
  boundary(['shared/jobs/**/*.ts', 'shared/transfer/**/*.ts'], DOMAIN_BANS, {
    ignores: ['shared/jobs/contract.ts', 'shared/transfer/types.ts'],
  }),
  // The domain constants telemetry imports: types only (of anything the domain may import), so telemetry stays a leaf.
  boundary(
    ['shared/jobs/contract.ts', 'shared/transfer/types.ts'],
    [
      ...DOMAIN_BANS,
      ban(['**'], 'the domain constants telemetry imports must import nothing at run time (types only)'),
    ],
    {
      typeImportsAllowed: { regex: String.raw`^(?!.*/(app|ops|dev|functions|engines|config)/)` },
    },
  ),
  boundary(['shared/ops/**/*.ts'], [DEV, FUNCTIONS, ROOT, ENGINES, SETTINGS]),
  // shared/config: settings.ts reads the registry and LIMITS (shared/jobs/validate.ts); nothing else of the app.
  boundary(
    ['shared/config/**/*.ts'],
    [DEV, FUNCTIONS, ROOT, OPS, ban(['**/engines/*/*'], 'config reads engines through the registry only')],
  ),
  // Telemetry is a leaf every layer may use: besides itself it reads only the domain's closed sets (the job and
  // transfer enums), and those two modules import nothing at run time, so no layer reaches another through it.
  boundary(
    ['shared/telemetry/**/*.ts'],
    [
      ban(
        // One group, so the two exceptions (!) apply to the patterns before them.
        [
          '**/app/*',
          '**/ops/*',
          '**/dev/*',
          '**/dev',
          '**/functions/*',
          '**/engines/*',
          '**/engines/*/*',
          '**/config/*',
          '**/jobs/*',
          '!**/jobs/contract*',
          '**/transfer/*',
          '!**/transfer/types*',
        ],
        'telemetry is a leaf: it may import only the domain constants in shared/jobs/contract.ts and shared/transfer/types.ts',
      ),
    ],
  ),
  // The client package is built and published on its own (packages/client): its sources import only each other, zod
  // and Node. Keel imports its rules (shared/jobs/validate.ts, typedEnqueue.ts), never the other way round.
  boundary(
    ['packages/client/src/**/*.ts'],
    [
      ban(
        ['../*', '../**', '@azure/functions', '@azure/functions/*'],
        'packages/client is published standalone: import only its own modules (./x.js), zod and Node built-ins',
      ),
    ],
  ),
);
