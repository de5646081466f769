// What JSON.parse lets through and the ops API refuses: a body that is not UTF-8 (decoded with replacement characters
// it would reach the database as something the caller never sent) and an object with the same key twice (JSON.parse
// keeps the last, other parsers the first: {"dryRun": true, "dryRun": false} would mean a dry run to a proxy or a
// reviewer and run the purge here).

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The text of a UTF-8 body, or null when the bytes are not UTF-8. */
export function decodeUtf8(bytes: Uint8Array): string | null {
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
}

type Frame =
  | { kind: 'object'; path: string; keys: Set<string>; key: string | null }
  | { kind: 'array'; path: string; index: number };

function childPath(parent: Frame | undefined): string {
  if (!parent) return '';
  if (parent.kind === 'array') return `${parent.path}[${parent.index}]`;
  const key = parent.key ?? '';
  return parent.path ? `${parent.path}.${key}` : key;
}

/**
 * The first thing in `text` that JSON.parse would change without a word, with its field path in the API's style
 * ("jobs[0].type"), or null: a key that appears twice in one object (`duplicate`), or an integer that a double cannot
 * hold exactly (`inexact`: 12345678901234567890 parses to 12345678901234567000, and an id or an amount would be stored
 * as another number). `text` must be valid JSON (JSON.parse accepted it): this scan only tracks structure. Iterative,
 * so a deeply nested body costs a stack of frames, not a stack overflow.
 */
export function silentChange(
  text: string,
): { kind: 'duplicate'; field: string } | { kind: 'inexact'; field: string; literal: string } | null {
  const stack: Frame[] = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      const start = i;
      let escaped = false;
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c /* \ */) {
          escaped = true;
          i++; // skip the escaped character
        } else if (d === 0x22) break;
      }
      const top = stack[stack.length - 1];
      if (expectKey && top?.kind === 'object') {
        const token = text.slice(start, i + 1);
        const key = escaped ? (JSON.parse(token) as string) : token.slice(1, -1);
        top.key = key;
        if (top.keys.has(key)) return { kind: 'duplicate', field: childPath(top) };
        top.keys.add(key);
        expectKey = false;
      }
    } else if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      const start = i;
      let integer = true;
      for (; i + 1 < text.length; i++) {
        const d = text.charCodeAt(i + 1);
        if (d === 0x2e /* . */ || d === 0x65 /* e */ || d === 0x45 /* E */) integer = false;
        else if (d !== 0x2b /* + */ && d !== 0x2d && !(d >= 0x30 && d <= 0x39)) break;
      }
      const literal = text.slice(start, i + 1);
      // Up to 15 digits every integer is a double; beyond, only some are (2^53 + 1 is not).
      if (integer && literal.replace('-', '').length > 15 && BigInt(literal) !== BigInt(Number(literal)))
        return { kind: 'inexact', field: childPath(stack[stack.length - 1]), literal };
    } else if (c === 0x7b /* { */) {
      stack.push({ kind: 'object', path: childPath(stack[stack.length - 1]), keys: new Set(), key: null });
      expectKey = true;
    } else if (c === 0x5b /* [ */) {
      stack.push({ kind: 'array', path: childPath(stack[stack.length - 1]), index: 0 });
      expectKey = false;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
      expectKey = false;
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top?.kind === 'object') expectKey = true;
      else if (top?.kind === 'array') top.index++;
    }
  }
  return null;
}
