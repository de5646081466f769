// How a per-feature schema declares the fixed-name settings it parses from the environment it is handed (the
// composition root's: shared/app/environment.ts). shared/app/settingsIndex.ts lists every schema; telemetry, a leaf,
// declares the same shape without importing this.
export interface SettingDeclaration {
  readonly name: string;
  readonly type: string; // what the value must be
  readonly default: string; // what applies when it is unset ('unset': the feature stays off)
  readonly doc: string;
}
