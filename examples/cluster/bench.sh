#!/usr/bin/env bash
# coagent bench against three coagent serve nodes on loopback, one
# JetStream cluster: every node runs a coordinator (one active, the others
# standbys following the replicated log) and keeps every stream on all
# three. The agents connect across the three nodes, and beside the
# coordinator they measure raw JetStream publish to a stream of 3 replicas
# (R3 sync publish) and raw request/reply, on the same cluster in the same
# run. The script prints the result and stops the nodes when it ends (or
# on Ctrl-C).
#
# Ports: clients 4222-4224 (BASE), routes 6222-6224 (ROUTES); data under
# DIR (a temporary directory by default). AGENTS (16,64), DURATION (5s)
# and PATH_ (api) are bench's --agents, --duration and --path; arguments
# go to bench as they are (--json, --workload incr, …). N1_FLAGS, N2_FLAGS
# and N3_FLAGS add serve flags to one node (N3_FLAGS=--coordinator=false
# makes n3 a NATS node only).
#
#   examples/cluster/bench.sh            # uses `coagent` from PATH
#   COAGENT=./coagent AGENTS=64 examples/cluster/bench.sh --json
set -euo pipefail
COAGENT=${COAGENT:-coagent}
BASE=${BASE:-4222}
ROUTES=${ROUTES:-6222}
DIR=${DIR:-$(mktemp -d)}
AGENTS=${AGENTS:-16,64}
DURATION=${DURATION:-5s}
PATH_=${PATH_:-api}
mkdir -p "$DIR"

R="" URLS=""
for i in 0 1 2; do
  R+="${R:+,}nats://127.0.0.1:$((ROUTES + i))"
  URLS+="${URLS:+,}nats://127.0.0.1:$((BASE + i))"
done
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT

node() { # node N [SERVE FLAG…]
  local n=$1 i=$(($1 - 1))
  shift
  "$COAGENT" serve --data "$DIR/n$n" --listen "127.0.0.1:$((BASE + i))" \
    --cluster "127.0.0.1:$((ROUTES + i))" --routes "$R" --name "n$n" "$@" \
    >"$DIR/n$n.out" 2>&1 &
  pids+=($!)
}
# Word splitting of the N*_FLAGS is wanted: each is a list of flags.
# shellcheck disable=SC2086
{
  node 1 ${N1_FLAGS:-}
  node 2 ${N2_FLAGS:-}
  node 3 ${N3_FLAGS:-}
}

# The cluster is ready when every node serves and a coordinator decides:
# only the active one takes intents, so a decided intent means the leader
# is elected and the streams are placed. Every probe is the same intent
# (same id), decided once.
served() {
  for n in 1 2 3; do grep -q '^coagent: serving on' "$DIR/n$n.out" 2>/dev/null || return 1; done
}
probe='{"id":"01JBENCHREADY0000000000000","agent":"bench","kind":"apply","writes":[{"path":"bench.ready","op":"set","value":true}]}'
ready=""
for _ in $(seq 150); do
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { cat "$DIR"/n*.out >&2; echo "a node stopped" >&2; exit 1; }
  done
  if served && echo "$probe" | "$COAGENT" submit --nats "$URLS" - >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 0.2
done
cat "$DIR/n1.out" "$DIR/n2.out" "$DIR/n3.out" >&2
[ -n "$ready" ] || { echo "no coordinator decided within 30s" >&2; exit 1; }

echo "bench: $COAGENT bench --nats $URLS --replicas 3 --agents $AGENTS --path $PATH_ --duration $DURATION $*" >&2
"$COAGENT" bench --nats "$URLS" --replicas 3 --agents "$AGENTS" --path "$PATH_" --duration "$DURATION" "$@"
