#!/usr/bin/env bash
# Runs steps one after another (each alone on the GPU), each under its own time limit:
#   bash scripts/h200/seq.sh "SECONDS:SCRIPT [ARGS][:ENV=VAL,...]" [...]
# ("%" stands for a space, for callers that split on spaces, e.g. drive.sh: "330:camp29.sh%campaign")
# e.g. seq.sh 200:scripts/h200/oracle29.sh "330:scripts/h200/camp29.sh campaign:SECONDS_CAMPAIGN=100"
# Logs go to "$RESULTS/logs/seq-<name>.log"; the rc of each step to "$RESULTS/logs/rc.txt".
set -u
for spec in "$@"; do
  IFS=: read -r secs script envs <<< "$spec"
  read -r -a words <<< "${script//%/ }"
  name=$(basename "${words[0]}" .sh)
  env_args=()
  [ -n "${envs:-}" ] && IFS=, read -r -a env_args <<< "$envs"
  echo "=== $name ($secs s at most, $(date +%T))"
  env "${env_args[@]}" timeout --kill-after=10 "$secs" bash "${words[@]}" > "${RESULTS:-results}/logs/seq-$name.log" 2>&1
  echo "seq $name rc=$?" | tee -a "${RESULTS:-results}/logs/rc.txt"
done
