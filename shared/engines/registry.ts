// THE list of engines. Adding one: its folder under shared/engines/ with an index.ts exporting a descriptor
// (shared/engines/descriptor.ts), one line here, and the other steps in docs/architecture.md ("Adding an engine").
import { instrumentDriver } from '../telemetry/index.js';
import type { TransferEngineRules } from '../transfer/config.js';
import type { EngineCapabilities, EngineDescriptor } from './descriptor.js';
import { postgres } from './postgres/index.js';
import { sqlserver } from './sqlserver/index.js';
import { oracle } from './oracle/index.js';

const FACTORIES = ['openJobStore', 'openJournal', 'migrateControl', 'transferEndpoints', 'closeShared'] as const;

// Each factory instruments the engine's driver (when telemetry is on) before it loads the driver: only the engines a
// deployment uses have their driver loaded, and the instrumentation is in place by then.
function instrumented(engine: EngineDescriptor): EngineDescriptor {
  const wrapped: Record<string, unknown> = { ...engine };
  for (const name of FACTORIES) {
    const factory = engine[name] as ((...args: unknown[]) => Promise<unknown>) | undefined;
    if (!factory) continue;
    wrapped[name] = (...args: unknown[]) => {
      instrumentDriver(engine.telemetryDriver);
      return factory.apply(engine, args);
    };
  }
  return wrapped as unknown as EngineDescriptor;
}

export const ENGINES: readonly EngineDescriptor[] = [postgres, sqlserver, oracle].map(instrumented);

export function engineNamed(name: string): EngineDescriptor {
  const engine = ENGINES.find((e) => e.name === name);
  if (!engine) throw new Error(`unknown engine "${name}" (known: ${ENGINES.map((e) => e.name).join(', ')})`);
  return engine;
}

// The names of the engines that can do `capability`, for validation messages and enums.
export function enginesWith(capability: keyof EngineCapabilities): [string, ...string[]] {
  const names = ENGINES.filter((e) => e.capabilities[capability]).map((e) => e.name);
  if (names.length === 0) throw new Error(`no engine provides ${capability}`);
  return names as [string, ...string[]];
}

// The transfer configuration's engine rules (shared/transfer/config.ts), from the descriptors.
export function transferEngineRules(engines: readonly EngineDescriptor[] = ENGINES): TransferEngineRules {
  const sources: Record<string, NonNullable<EngineDescriptor['transferSourceRules']>> = {};
  const targets: Record<string, NonNullable<EngineDescriptor['transferTargetRules']>> = {};
  for (const e of engines) {
    if (e.capabilities.transferSource) {
      if (!e.transferSourceRules)
        throw new Error(`engine ${e.name} is a transfer source but declares no transferSourceRules`);
      sources[e.name] = e.transferSourceRules;
    }
    if (e.capabilities.transferTarget) {
      if (!e.transferTargetRules)
        throw new Error(`engine ${e.name} is a transfer target but declares no transferTargetRules`);
      targets[e.name] = e.transferTargetRules;
    }
  }
  return { sources, targets };
}
