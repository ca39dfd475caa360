#!/usr/bin/env bash
# Chaos drill: does a job keep its exactly-once promise while things break around it?
#
#   bash examples/chaos_drill.sh
#
# 1. start a cluster (3 TaskManagers x 2 slots) in a throw-away FLINKPY_HOME;
# 2. run the verification job (examples/verification_job.py) detached, checkpoints every 200 ms;
# 3. inject random faults with 'flinkpy fault chaos' for CHAOS_DURATION (default 30s);
# 4. stop the job with a savepoint, then resume it from the savepoint until its input ends;
# 5. 'flinkpy verify' its output: exit 0 only when no record was lost or duplicated.
#
# Environment: CHAOS_DURATION (30s), CHAOS_EVERY (3s), CHAOS_SEED (random), DRILL_PER_KEY (10000
# records per key, at 2000 records/s), KEEP_HOME=1 keeps
# the cluster home (logs) afterwards; FLINKPY (default: the flinkpy command on PATH, else
# 'python -m commands.main' from this checkout).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
if [[ -z "${FLINKPY:-}" ]]; then
    if command -v flinkpy >/dev/null; then FLINKPY=flinkpy; else FLINKPY="${PYTHON:-python3} -m commands.main"; fi
fi
PY="${PYTHON:-python3}"
duration="${CHAOS_DURATION:-30s}"
every="${CHAOS_EVERY:-3s}"
seed="${CHAOS_SEED:-$RANDOM}"
keys=8
per_key="${DRILL_PER_KEY:-10000}"
rate=2000

export FLINKPY_HOME="$(mktemp -d -t flinkpy-chaos-XXXXXX)"
out="$FLINKPY_HOME/output"
savepoints="$FLINKPY_HOME/savepoints"
step() { printf '\n== %s\n' "$*" >&2; }
json() { $PY -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
cleanup() {
    $FLINKPY cluster stop >/dev/null 2>&1 || true
    if [[ "${KEEP_HOME:-0}" != 1 ]]; then rm -rf "$FLINKPY_HOME"; else echo "cluster home kept: $FLINKPY_HOME" >&2; fi
}
trap cleanup EXIT

flags=(-D execution.checkpointing.interval=200ms
       -D restart-strategy.type=fixed-delay -D restart-strategy.fixed-delay.attempts=1000 -D restart-strategy.fixed-delay.delay=0s
       -D execution.checkpointing.tolerable-failed-checkpoints=1000)
job_args=(examples/verification_job.py --keys "$keys" --per-key "$per_key" --rate "$rate" --out "$out")

step "1. start a cluster in $FLINKPY_HOME"
$FLINKPY cluster start --taskmanagers 3 --slots 2 --rest-port 0 >&2

step "2. run the verification job ($keys keys x $per_key records, $rate records/s)"
jid=$($FLINKPY run -d -p 2 "${flags[@]}" --json "${job_args[@]}" | json 'd["jobs"][0]["jid"]')
echo "job $jid" >&2

step "3. chaos for $duration, one fault every $every (seed $seed)"
$FLINKPY fault chaos "$jid" --duration "$duration" --every "$every" --seed "$seed" \
    --faults kill-task,raise,fail-checkpoint,pause-task,pause-taskmanager >&2

step "4. stop with a savepoint, then resume from it until the input ends"
state=$($FLINKPY job show "$jid" --json | json 'd["state"]')
if [[ "$state" == RUNNING ]]; then
    savepoint=$($FLINKPY stop "$jid" -p "$savepoints" --json | json 'd["location"]')
    echo "savepoint $savepoint" >&2
    $FLINKPY run -p 2 "${flags[@]}" -s "$savepoint" "${job_args[@]}" >&2
else
    echo "job $jid is already $state: nothing to stop" >&2
fi

step "5. verify the output"
$FLINKPY verify "$out" --keys "$keys" --per-key "$per_key"
