// Identifiers from configuration cannot be bind parameters, so they are validated against a strict pattern
// here AND quoted by the engine-specific quoters below (and checked against the recorded schema elsewhere).

export const IDENTIFIER_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

export function isIdentifier(s: string): boolean {
  return IDENTIFIER_PATTERN.test(s);
}

export function assertIdentifier(s: string, what: string): string {
  if (!isIdentifier(s)) throw new Error(`${what}: "${s}" is not a plain identifier (${IDENTIFIER_PATTERN})`);
  return s;
}

export interface QualifiedName {
  schema: string | null;
  name: string;
}

export function parseQualified(s: string, what: string): QualifiedName {
  const parts = s.split('.');
  if (parts.length === 1) return { schema: null, name: assertIdentifier(parts[0]!, what) };
  if (parts.length === 2) return { schema: assertIdentifier(parts[0]!, what), name: assertIdentifier(parts[1]!, what) };
  throw new Error(`${what}: "${s}" must be table or schema.table`);
}

function q(id: string, open: string, close: string): string {
  assertIdentifier(id, 'identifier');
  return `${open}${id}${close}`;
}

export const quotePg = (id: string) => q(id, '"', '"');
export const quoteMssql = (id: string) => q(id, '[', ']');
export const quoteOracle = (id: string) => q(id, '"', '"');

export function qualifiedPg(n: QualifiedName): string {
  return n.schema ? `${quotePg(n.schema)}.${quotePg(n.name)}` : quotePg(n.name);
}
export function qualifiedMssql(n: QualifiedName): string {
  return n.schema ? `${quoteMssql(n.schema)}.${quoteMssql(n.name)}` : quoteMssql(n.name);
}
export function qualifiedOracle(n: QualifiedName): string {
  return n.schema ? `${quoteOracle(n.schema)}.${quoteOracle(n.name)}` : quoteOracle(n.name);
}
