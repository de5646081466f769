#!/usr/bin/env bash
# Bicep gate: restores the Bicep CLI from NuGet (Azure.Bicep.CommandLine.linux-x64, pinned in
# bicep-cli.csproj) into tools/bicep/packages/ (gitignored), then runs `bicep build` and `bicep lint` on
# every .bicep file under infra/. Any error or warning fails the gate (infra/bicepconfig.json also raises
# the linter rules to error). It also checks that infra/main.parameters.json only names parameters that
# main.bicep declares.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
infra="${KEEL_INFRA_DIR:-$root/infra}"
version="$(sed -n 's/.*Azure.Bicep.CommandLine.linux-x64" Version="\[\([^]]*\)\]".*/\1/p' "$here/bicep-cli.csproj")"
bicep="$here/packages/azure.bicep.commandline.linux-x64/$version/tools/bicep"

if [[ -z "$version" ]]; then
  echo "check:infra: no Bicep CLI version found in bicep-cli.csproj" >&2
  exit 1
fi

if [[ ! -f "$bicep" ]]; then
  echo "== restoring Bicep CLI $version from NuGet"
  DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 DOTNET_SKIP_FIRST_TIME_EXPERIENCE=1 \
    dotnet restore "$here/bicep-cli.csproj" --nologo --verbosity quiet
fi
if [[ ! -f "$bicep" ]]; then
  echo "check:infra: restore did not produce $bicep" >&2
  exit 1
fi
chmod +x "$bicep"
echo "== $("$bicep" --version)"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

mapfile -t files < <(find "$infra" -name '*.bicep' -type f | sort)
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check:infra: no .bicep files under $infra" >&2
  exit 1
fi

failed=0
run() {
  # Runs one bicep command; fails on a non-zero exit or on any Error/Warning diagnostic in its output.
  local label="$1"
  shift
  local log
  log="$out/log.txt"
  if ! "$bicep" "$@" >"$log" 2>&1; then
    echo "FAIL $label"
    sed 's/^/    /' "$log"
    failed=1
    return
  fi
  if grep -Eq ' : (Error|Warning) ' "$log"; then
    echo "FAIL $label (diagnostics)"
    sed 's/^/    /' "$log"
    failed=1
    return
  fi
  echo "ok   $label"
}

for f in "${files[@]}"; do
  rel="${f#"$root"/}"
  name="$(basename "$f" .bicep)"
  run "build $rel" build "$f" --outfile "$out/$name.json"
  run "lint  $rel" lint "$f"
done

# main.parameters.json must parse and name only parameters main.bicep declares.
if [[ -f "$infra/main.parameters.json" && -f "$out/main.json" ]]; then
  if node -e '
    const fs = require("fs");
    const template = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const params = JSON.parse(fs.readFileSync(process.argv[2], "utf8")).parameters ?? {};
    const declared = new Set(Object.keys(template.parameters ?? {}));
    const unknown = Object.keys(params).filter((p) => !declared.has(p));
    const required = [...declared].filter((p) => !("defaultValue" in template.parameters[p]) && !(p in params));
    if (unknown.length || required.length) {
      if (unknown.length) console.error("unknown parameters: " + unknown.join(", "));
      if (required.length) console.error("required parameters without a value: " + required.join(", "));
      process.exit(1);
    }
  ' "$out/main.json" "$infra/main.parameters.json"; then
    echo "ok   infra/main.parameters.json matches main.bicep"
  else
    echo "FAIL infra/main.parameters.json"
    failed=1
  fi
fi

if [[ $failed -ne 0 ]]; then
  echo "check:infra failed" >&2
  exit 1
fi
echo "check:infra passed (${#files[@]} files)"
