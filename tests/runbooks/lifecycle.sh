#!/usr/bin/env bash
# Lifecycle runbook: one job through every change an operator makes to it, its output exact.
#
#   bash tests/runbooks/lifecycle.sh
#
# The job (tally_job.py) counts each key's sequence 1..PER_KEY into a tally whose state gains a
# field with each version; its VerifyingSink commits every record with the checkpoints.
#
#  1. start a cluster (2 TaskManagers x 2 slots) in a throw-away FLINKPY_HOME; run version 1;
#  2. stateless upgrade to version 2 (adds "total"): a fresh job, writing a new output directory;
#     the old job's output must be an exact prefix;
#  3. savepoint upgrade to version 3 (adds "last", which has no default) without a migration: the
#     new job raises (KeyError), and --rollback-on-failure puts version 2 back from the savepoint;
#  4. the same upgrade by hand, with the migration it needs: stop with a savepoint, add "last" to
#     every tally with flinkpy.state_processor (migrate.py), check it with 'savepoint plan
#     --check-code', run version 3 from it;
#  5. last-state upgrade to version 4 (adds "gaps", whose default needs no migration);
#  6. rescale in place 2 -> 3 -> 1;
#  7. SIGKILL of 'flinkpy upgrade' at a step (FLINKPY_UPGRADE_KILL_AT), then the same command
#     again: it continues, and nothing is lost or doubled (LIFECYCLE_KILLS, below);
#  8. 'savepoint prune --keep 1': the savepoint taken by hand in step 4 goes, every savepoint a
#     job was started from stays;
#  9. the tally's uid changes: 'run -s' refuses the savepoint, 'savepoint rewrite --rename-uid'
#     fixes it, and the job resumes from the rewritten savepoint and runs to its end;
# 10. 'flinkpy verify' and check_tally.py: every seq of every key once, every field exact.
#
# Environment: LIFECYCLE_KILLS: "some" (default) kills a last-state upgrade just after it
# submitted the new job (the re-run must adopt that job, not run the program twice); "all" kills
# at every step of a savepoint and a last-state upgrade and of a rollback (14 kills, some five to
# ten minutes more); "none" skips step 7.
# KEEP_HOME=1 keeps the cluster home (logs); FLINKPY (default: flinkpy on PATH, else 'python -m
# commands.main' from this checkout).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/../.."
if [[ -z "${FLINKPY:-}" ]]; then
    if command -v flinkpy >/dev/null; then FLINKPY=flinkpy; else FLINKPY="${PYTHON:-python3} -m commands.main"; fi
fi
PY="${PYTHON:-python3}"
kills="${LIFECYCLE_KILLS:-some}"
keys=6
# records/s and records per key: the job outlasts every step before the last, which runs it
# unpaced to its end (with all kills, paced for 20 minutes)
rate=150
per_key=3000
if [[ $kills == all ]]; then rate=100 per_key=20000; fi

export FLINKPY_HOME="$(mktemp -d -t flinkpy-lifecycle-XXXXXX)"
work="$FLINKPY_HOME/work"
sp="$work/savepoints"
job=tests/runbooks/tally_job.py
input=(--keys $keys --per-key $per_key --rate $rate)
mkdir -p "$work"
step() { printf '\n== %s (at %ss)\n' "$*" "$SECONDS" >&2; }
fail() { echo "runbook: FAILED: $*" >&2; exit 1; }
cleanup() {
    $FLINKPY cluster stop >/dev/null 2>&1 || true
    if [[ "${KEEP_HOME:-0}" != 1 ]]; then rm -rf "$FLINKPY_HOME"; else echo "cluster home kept: $FLINKPY_HOME" >&2; fi
}
trap cleanup EXIT

state_of() { $FLINKPY job show --json "$1" | jq -r .state; }
# wait_until SECONDS WHAT COMMAND...: poll COMMAND until it succeeds, or fail naming WHAT
wait_until() {
    local limit=$1 what=$2; shift 2
    local end=$((SECONDS + limit))
    until "$@"; do
        ((SECONDS < end)) || fail "no $what within ${limit}s"
        sleep 0.2
    done
}
is_state() { [[ "$(state_of "$1")" == "$2" ]]; }
has_output() { compgen -G "$1/part-*.jsonl" >/dev/null; }
running_jobs() { $FLINKPY list --json | jq '[.jobs[] | select(.state != "FINISHED" and .state != "CANCELED" and .state != "FAILED")] | length'; }
# one job runs, the one named: nothing was submitted twice
only_running() {
    [[ "$(running_jobs)" == 1 && "$(state_of "$1")" == RUNNING ]] || fail "job $1 should be the only one running: $($FLINKPY list -a 2>&1)"
}

step "1. start a cluster in $FLINKPY_HOME; run version 1"
$FLINKPY cluster start --taskmanagers 2 --slots 2 --rest-port 0 >&2
jid=$($FLINKPY run -d -p 2 --json $job --version 1 --out "$work/a" "${input[@]}" | jq -r '.jobs[0].jid')
wait_until 60 "committed output of job $jid" has_output "$work/a"

step "2. stateless upgrade to version 2: a fresh job, its own output"
jid=$($FLINKPY upgrade --json --mode stateless -p 2 "$jid" $job --version 2 --out "$work/b" "${input[@]}" | jq -r '."new-jid"')
$PY tests/runbooks/check_tally.py "$work/a" --keys $keys --per-key $per_key --prefix >&2

step "3. savepoint upgrade to version 3 without a migration: it raises, and is rolled back"
rc=0
$FLINKPY upgrade --json --mode savepoint --rollback-on-failure --ready-timeout 60s -p 2 --savepoint-path "$sp" \
    "$jid" $job --version 3 --out "$work/b" "${input[@]}" >"$work/rollback.json" || rc=$?
[[ $rc == 15 ]] || fail "the upgrade to a version that cannot read its state exited $rc, not 15"
jq -r .error.message "$work/rollback.json" | grep -q "KeyError: 'last'" || fail "no root cause named: $(jq -c .error "$work/rollback.json")"
[[ "$(jq -r .outcome "$work/rollback.json")" == rolled-back ]] || fail "not rolled back"
jid=$(jq -r '."rollback-jid"' "$work/rollback.json")
wait_until 60 "rolled-back job $jid RUNNING" is_state "$jid" RUNNING
only_running "$jid"

step "4. the savepoint upgrade to version 3 by hand, with a state_processor migration"
stopped=$($FLINKPY stop --json -p "$sp" "$jid" | jq -r .location)
$PY tests/runbooks/migrate.py "$stopped" "$sp/with-last" last >/dev/null
$FLINKPY savepoint plan --check-code "$sp/with-last" $job --version 3 --out "$work/b" "${input[@]}" >&2
jid=$($FLINKPY run -d -p 2 --json -s "$sp/with-last" $job --version 3 --out "$work/b" "${input[@]}" | jq -r '.jobs[0].jid')

step "5. last-state upgrade to version 4 (its new field has a default: no migration)"
$FLINKPY upgrade --json --mode last-state -p 2 "$jid" $job --version 4 --out "$work/b" "${input[@]}" >"$work/last-state.json"
[[ "$(jq -r .mode "$work/last-state.json")" == last-state ]] || fail "last-state fell back: $(jq -c .steps "$work/last-state.json")"
jq -r .snapshot "$work/last-state.json" | grep -q /chk- || fail "last-state did not restore a checkpoint"
jid=$(jq -r '."new-jid"' "$work/last-state.json")

step "6. rescale in place 2 -> 3 -> 1"
$FLINKPY job rescale -p 3 "$jid" >&2
$FLINKPY job rescale -p 1 "$jid" >&2
[[ "$($FLINKPY job show --json "$jid" | jq -c '[.rescales[].to | [.[]] | max]')" == "[3,1]" ]] || fail "rescale history: $($FLINKPY job show --json "$jid" | jq -c .rescales)"
[[ "$($FLINKPY job show --json "$jid" | jq -r .restarts)" == 0 ]] || fail "a rescale counted as a restart"

# upgrade_killed_at POINT EXPECTED_RC FLAGS... -- ARGS...: the upgrade SIGKILLed at POINT, then the
# same command again, which must continue it and exit EXPECTED_RC; sets jid to the job that runs
upgrade_killed_at() {
    local point=$1 want=$2 rc=0 old=$jid; shift 2
    FLINKPY_UPGRADE_KILL_AT=$point $FLINKPY upgrade --json "$@" >/dev/null 2>"$work/killed.err" || rc=$?
    [[ $rc == 137 ]] || fail "the upgrade to be killed at $point exited $rc: $(tail -3 "$work/killed.err")"
    [[ -f "$FLINKPY_HOME/upgrades/$old.json" ]] || fail "no journal left by the upgrade killed at $point"
    rc=0
    $FLINKPY upgrade --json "$@" >"$work/rerun.json" 2>"$work/rerun.err" || rc=$?
    [[ $rc == "$want" ]] || fail "the upgrade run again after a kill at $point exited $rc: $(tail -3 "$work/rerun.err")"
    grep -q "Continuing the interrupted upgrade of job $old" "$work/rerun.err" || fail "the re-run after a kill at $point did not continue"
    if [[ $point == *:submitted ]]; then
        grep -q "submitted by the interrupted attempt" "$work/rerun.err" || fail "the job submitted before the kill at $point was not adopted"
    fi
    [[ ! -f "$FLINKPY_HOME/upgrades/$old.json" ]] || fail "the journal outlived the upgrade killed at $point"
    jid=$(jq -r 'if .outcome == "rolled-back" then ."rollback-jid" else ."new-jid" end' "$work/rerun.json")
    wait_until 60 "job $jid RUNNING after the kill at $point" is_state "$jid" RUNNING
    only_running "$jid"
    echo "killed at $point, run again: job $jid runs" >&2
}

step "7. SIGKILL of flinkpy upgrade at its steps, then the same command again ($kills)"
same=(--version 4 --out "$work/b" "${input[@]}")
case "$kills" in
    none) points=() ;;
    some) points=("last-state submit:submitted") ;;
    all) points=("savepoint inspect" "savepoint check-plan" "savepoint stop" "savepoint stop:requested" "savepoint submit"
                 "savepoint submit:submitted" "savepoint health" "last-state cancel" "last-state submit"
                 "last-state submit:submitted" "last-state dispose"
                 "rollback rollback-cancel" "rollback rollback-submit" "rollback rollback-submit:submitted") ;;
    *) fail "LIFECYCLE_KILLS=$kills: use none, some or all" ;;
esac
for entry in "${points[@]}"; do
    read -r mode point <<<"$entry"
    if [[ $mode == rollback ]]; then  # a broken release, rolled back to version 4 from its savepoint
        upgrade_killed_at "$point" 15 --mode savepoint --rollback-on-failure --ready-timeout 60s -p 2 --savepoint-path "$sp" \
            "$jid" $job "${same[@]}" --fail
    else
        upgrade_killed_at "$point" 0 --mode "$mode" -p 2 --savepoint-path "$sp" "$jid" $job "${same[@]}"
    fi
done

step "8. prune the savepoints to each job's newest"
# the stop's savepoint of step 4 is its job's older one, and no job started from it: it goes;
# step 3's savepoint and the migrated one of step 4 stay (jobs were started from them)
$FLINKPY savepoint prune --json --keep 1 "$sp" >"$work/prune.json"
disposed=$(jq -r '.savepoints[] | select(.dispose) | .path' "$work/prune.json")
[[ "$disposed" == "$stopped" ]] || fail "prune disposed of [$disposed], not just $stopped: $(jq -c .savepoints "$work/prune.json")"
[[ ! -e "$stopped/_metadata" ]] || fail "prune left $stopped"
for kept in "$sp/with-last" "$(jq -r .snapshot "$work/rollback.json")"; do
    [[ -f "$kept/_metadata" ]] || fail "prune removed $kept, which a job was started from"
done

step "9. a renamed uid: refused, the savepoint rewritten, resumed to the end"
savepoint=$($FLINKPY stop --json -p "$sp" "$jid" | jq -r .location)
rc=0
$FLINKPY run -d -s "$savepoint" $job --version 4 --uid counts --out "$work/b" "${input[@]}" 2>"$work/refused.err" || rc=$?
[[ $rc == 7 ]] || fail "run -s with the tally's state unclaimed exited $rc, not 7: $(cat "$work/refused.err")"
grep -q "uid tally" "$work/refused.err" || fail "the refusal does not name the uid: $(cat "$work/refused.err")"
$FLINKPY savepoint rewrite "$savepoint" "$sp/renamed" --rename-uid tally=counts >&2
$FLINKPY run -p 2 -s "$sp/renamed" $job --version 4 --uid counts --out "$work/b" --keys $keys --per-key $per_key >&2

step "10. verify the output"
$FLINKPY verify "$work/b" --keys $keys --per-key $per_key
$PY tests/runbooks/check_tally.py "$work/b" --keys $keys --per-key $per_key
echo "runbook: every step done, the output exact"
