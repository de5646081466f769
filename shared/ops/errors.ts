// The ops API's error shapes: every failure is JSON with a stable `error` code; validation errors name the field.
import type { HttpResponseInit } from '@azure/functions';

export type OpsErrorCode =
  | 'invalid_request'
  | 'invalid_json'
  | 'unsupported_media_type'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'payload_too_large'
  | 'unavailable'
  | 'internal_error';

const STATUS: Record<OpsErrorCode, number> = {
  invalid_request: 400,
  invalid_json: 400,
  unsupported_media_type: 415,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  payload_too_large: 413,
  unavailable: 503,
  internal_error: 500,
};

export class OpsError extends Error {
  readonly status: number;
  constructor(
    readonly code: OpsErrorCode,
    message: string,
    readonly field?: string,
    readonly extra?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'OpsError';
    this.status = STATUS[code];
  }
}

export function invalid(field: string, message: string): OpsError {
  return new OpsError('invalid_request', message, field);
}

export function notFound(what: string): OpsError {
  return new OpsError('not_found', `${what} not found`);
}

export function conflict(message: string, extra?: Record<string, unknown>): OpsError {
  return new OpsError('conflict', message, undefined, extra);
}

export const JSON_HEADERS = { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' };

export function json(status: number, body: unknown, headers: Record<string, string> = {}): HttpResponseInit {
  return { status, jsonBody: body, headers: { ...JSON_HEADERS, ...headers } };
}

export function errorResponse(err: OpsError): HttpResponseInit {
  const body: Record<string, unknown> = { error: err.code, message: err.message };
  if (err.field !== undefined) body.field = err.field;
  if (err.extra) Object.assign(body, err.extra);
  return json(
    err.status,
    body,
    err.code === 'method_not_allowed' && err.extra?.allow ? { allow: String(err.extra.allow) } : {},
  );
}
