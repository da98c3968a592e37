#!/usr/bin/env bash
# `make synth`: synthesizes the CDK app offline with the pinned CDK CLI (package.json), with the
# AwsSolutions checks of cdk-nag. Fails on any finding that is not acknowledged in stacks/.
set -euo pipefail
cd "$(dirname "$0")/.."

export CDK_DISABLE_CLI_TELEMETRY=true
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x .venv/bin/python ]; then
  echo "synth: .venv/ is missing; run 'make venv' first" >&2
  exit 1
fi

# Install the CLI locally, exactly as locked (npm ci), once per lock file version.
stamp=node_modules/.spotline-installed
if [ ! -x node_modules/.bin/cdk ] || [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
  if [ -f package-lock.json ]; then
    npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
  else
    npm install --no-audit --no-fund --ignore-scripts --loglevel=error
  fi
  touch "$stamp"
fi

out=cdk.out
rm -rf "$out"
# The committed context names no account: the stack is account-agnostic (its AZs are Fn::GetAZs,
# resolved at deploy time), so synth makes no lookup and calls nothing of AWS.
if ! npx --no-install cdk synth --no-notices --quiet --output "$out" "$@"; then
  echo "synth: failed (see the findings above, or $out/validation-report.json)" >&2
  exit 1
fi

# cdk-nag makes synth fail on errors and warnings; double-check the report in case a CLI version
# treats a failed validation as a warning.
report="$out/validation-report.json"
if [ -f "$report" ]; then
  .venv/bin/python - "$report" <<'PY'
import json
import sys

report = json.load(open(sys.argv[1]))
failed = [
    f"{plugin['pluginName']}: {violation['ruleName']} at "
    + ", ".join(c["constructPath"] for c in violation["violatingConstructs"])
    for plugin in report.get("pluginReports", [])
    for violation in plugin.get("violations", [])
]
if failed:
    print("synth: unacknowledged findings:\n  " + "\n  ".join(failed), file=sys.stderr)
    sys.exit(1)
PY
fi
template=$(ls "$out"/Spotline-*.template.json)
resources=$(.venv/bin/python -c "import json, sys; print(len(json.load(open(sys.argv[1]))['Resources']))" "$template")
echo "synth: ok ($template, $resources resources, no unacknowledged cdk-nag findings)"
