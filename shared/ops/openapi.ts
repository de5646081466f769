// The OpenAPI 3.1 document, generated from the route table and the same zod schemas that validate requests.
import { z } from 'zod';
import { OPS_PREFIX, type OpsRoute } from './router.js';
import type { OpsRole } from './auth.js';

type JsonSchema = Record<string, unknown> & { properties?: Record<string, JsonSchema>; required?: string[] };

function schemaOf(schema: z.ZodType, io: 'input' | 'output' = 'input'): JsonSchema {
  const js = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as JsonSchema;
  delete js.$schema;
  return js;
}

function parametersOf(schema: z.ZodType | undefined, where: 'path' | 'query'): unknown[] {
  if (!schema) return [];
  const js = schemaOf(schema);
  const required = new Set(js.required ?? []);
  return Object.entries(js.properties ?? {}).map(([name, p]) => {
    const { description, ...rest } = p;
    return {
      name,
      in: where,
      required: where === 'path' || required.has(name),
      ...(description ? { description } : {}),
      schema: rest,
    };
  });
}

const ROLE_TEXT: Record<OpsRole, string> = {
  reader: 'Needs the reader role (KEEL_OPS_READER_ROLE) or higher; a function key on /api/ops grants it by itself.',
  producer:
    'Needs the producer role (KEEL_OPS_PRODUCER_ROLE) or the operator role; a function key on /api/ops grants it by itself.',
  operator:
    'Needs the operator role (KEEL_OPS_OPERATOR_ROLE) in the App Service authentication principal, with or without a key.',
};

const ERROR_SCHEMA = {
  type: 'object',
  required: ['error', 'message'],
  properties: {
    error: {
      type: 'string',
      description:
        'stable error code: invalid_request, invalid_json, forbidden, not_found, conflict, payload_too_large, ...',
    },
    message: { type: 'string' },
    field: { type: 'string', description: 'the field at fault (400), e.g. "limit" or "jobs[2].type"' },
  },
};

export function openApiDocument(routes: OpsRoute<any, any, any>[]): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const p = OPS_PREFIX + r.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    const responses: Record<string, unknown> = {};
    for (const [code, description] of Object.entries(r.responses)) {
      const n = Number(code);
      responses[code] = {
        description,
        content: {
          'application/json': {
            schema:
              n >= 400
                ? { $ref: '#/components/schemas/Error' }
                : r.output
                  ? schemaOf(r.output, 'output')
                  : { type: 'object' },
          },
        },
      };
    }
    for (const [code, description] of [
      ['400', 'invalid request: the body names the field at fault'],
      ['401', 'missing or wrong function key'],
      ...(r.body
        ? [
            ['413', 'request body over KEEL_OPS_MAX_BODY_BYTES'],
            ['415', 'a request body that is not sent as application/json'],
          ]
        : []),
    ] as const) {
      responses[code] ??= {
        description,
        content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
      };
    }
    responses['403'] ??= {
      description: `the ${r.role} role (or a higher one) missing, or a cross-site write`,
      content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
    };
    paths[p] ??= {};
    paths[p]![r.method.toLowerCase()] = {
      operationId: r.operationId,
      summary: r.summary,
      tags: [r.tag],
      description: ROLE_TEXT[r.role],
      'x-keel-role': r.role,
      ...(r.role === 'operator' ? { 'x-keel-destructive': true } : {}),
      parameters: [...parametersOf(r.params, 'path'), ...parametersOf(r.query, 'query')],
      // An empty body is read as {}: the body is required only when {} is not a valid one.
      ...(r.body
        ? {
            requestBody: {
              required: !r.body.safeParse({}).success,
              content: { 'application/json': { schema: schemaOf(r.body) } },
            },
          }
        : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Keel ops API',
      version: '0.1.0',
      description:
        'Operate Keel jobs and transfers. Every route needs a function key and a role level (x-keel-role): reader, producer or operator (docs/operations.md).',
    },
    servers: [{ url: '/' }],
    security: [{ functionKeyHeader: [] }, { functionKeyQuery: [] }],
    components: {
      securitySchemes: {
        functionKeyHeader: { type: 'apiKey', in: 'header', name: 'x-functions-key' },
        functionKeyQuery: { type: 'apiKey', in: 'query', name: 'code' },
      },
      schemas: { Error: ERROR_SCHEMA },
    },
    paths,
  };
}
