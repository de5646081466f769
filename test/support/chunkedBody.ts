// A request body far over any body limit, sent in chunks with no Content-Length, that counts what the reader pulled:
// the ops router and the console's relay must refuse it at the limit without reading it whole (readBodyWithin).
export const BODY_CHUNK = 64 * 1024;

export function overLimitBody(total = 16 * 1024 * 1024): { body: ReadableStream<Uint8Array>; pulled: () => number } {
  let pulled = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (pulled >= total) return controller.close();
      pulled += BODY_CHUNK;
      controller.enqueue(new Uint8Array(BODY_CHUNK).fill(0x20));
    },
  });
  return { body, pulled: () => pulled };
}

// A POST streaming that body (the native Request an HttpRequest of @azure/functions wraps).
export function streamingPost(url: string, headers: Record<string, string>, body: ReadableStream<Uint8Array>): Request {
  return new Request(url, { method: 'POST', headers, body, duplex: 'half' } as RequestInit);
}
