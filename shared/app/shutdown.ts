// Graceful stop of the app under the Functions host: on scale-in, a redeploy or a restart the host asks the worker to
// terminate (the appTerminate hook of @azure/functions) and kills it 5 s later; a container stop sends SIGTERM. Either
// way every live processor stops claiming, gives its running handlers the grace period, then aborts them with reason
// 'shutdown' and hands their jobs back (pending, due at once, the attempt given back), so no job is left 'processing'
// for zombie rescue to find minutes later with its attempt spent. Telemetry is flushed last, so the hand-backs' events
// leave the process too.

// What is stopped: a JobProcessor (shutdown aborts after the grace period and resolves once every outcome is written).
export interface StoppableProcessor {
  shutdown(graceMs: number): Promise<void>;
}

const live = new Set<StoppableProcessor>();
let terminating: Promise<void> | undefined;

// Called by createRuntime for the processor it builds; the returned function forgets it (runtime.close()). A processor
// registered while the app is already terminating (a runtime created by a late invocation) is stopped at once.
export function registerLiveProcessor(processor: StoppableProcessor): () => void {
  live.add(processor);
  if (terminating) void processor.shutdown(0).catch(() => undefined);
  return () => {
    live.delete(processor);
  };
}

export function liveProcessorCount(): number {
  return live.size;
}

export interface TerminateOptions {
  graceMs: number;
  log?: (line: string) => void;
  // Runs after the processors have stopped (the telemetry flush).
  after?: () => Promise<void>;
}

// Stops every live processor within graceMs (plus the hand-back writes). Idempotent: the hook and SIGTERM may both
// come, and both wait for the same stop.
export function terminateApp(opts: TerminateOptions): Promise<void> {
  terminating ??= (async () => {
    const started = Date.now();
    const processors = [...live];
    opts.log?.(
      `keel: stopping ${processors.length} job processor(s); running jobs get ${opts.graceMs} ms, then are handed back`,
    );
    const results = await Promise.allSettled(processors.map((p) => p.shutdown(opts.graceMs)));
    for (const r of results) {
      if (r.status === 'rejected') opts.log?.(`keel: a processor failed to stop: ${(r.reason as Error)?.message}`);
    }
    opts.log?.(`keel: job processors stopped in ${Date.now() - started} ms`);
    if (opts.after) await opts.after().catch((err: Error) => opts.log?.(`keel: after stop: ${err.message}`));
  })();
  return terminating;
}

// What functions/app.ts hands in: @azure/functions' app.hook.appTerminate, and the process to watch for SIGTERM.
export interface GracefulShutdownWiring {
  appTerminate: (handler: () => Promise<void>) => unknown;
  process?: Pick<NodeJS.Process, 'once' | 'kill' | 'pid'>;
}

export function installGracefulShutdown(wiring: GracefulShutdownWiring, opts: TerminateOptions): void {
  wiring.appTerminate(() => terminateApp(opts));
  const proc = wiring.process;
  if (!proc) return;
  // A listener replaces Node's default exit on SIGTERM: stop gracefully, then raise the signal again (the listener is
  // gone by then), so the process still ends as a SIGTERM ends it.
  proc.once('SIGTERM', () => {
    void terminateApp(opts).finally(() => proc.kill(proc.pid, 'SIGTERM'));
  });
}
