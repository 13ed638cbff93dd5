#!/usr/bin/env bash
# Three coagent serve nodes on loopback make one JetStream cluster; n1 runs
# the coordinator, every stream is kept on all three. The script submits an
# intent through n2, reads it back through n3, and stops the nodes when it
# ends (or on Ctrl-C). Ports: clients 4222-4224 (BASE), routes 6222-6224
# (ROUTES); data under DIR (a temporary directory by default).
#
#   examples/cluster/run.sh            # uses `coagent` from PATH
#   COAGENT=./coagent examples/cluster/run.sh
set -euo pipefail
COAGENT=${COAGENT:-coagent}
BASE=${BASE:-4222}
ROUTES=${ROUTES:-6222}
DIR=${DIR:-$(mktemp -d)}
mkdir -p "$DIR"

R=""
for i in 0 1 2; do R+="${R:+,}nats://127.0.0.1:$((ROUTES + i))"; done
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT

node() { # node N COORDINATOR
  local n=$1 i=$(($1 - 1))
  "$COAGENT" serve --data "$DIR/n$n" --listen "127.0.0.1:$((BASE + i))" \
    --cluster "127.0.0.1:$((ROUTES + i))" --routes "$R" --name "n$n" --coordinator="$2" \
    >"$DIR/n$n.out" 2>&1 &
  pids+=($!)
}
node 2 false
node 3 false
node 1 true

# The coordinator prints its start line once the cluster holds its streams.
for _ in $(seq 100); do
  grep -q "serving on" "$DIR/n1.out" 2>/dev/null && break
  sleep 0.2
done
cat "$DIR/n1.out" "$DIR/n2.out" "$DIR/n3.out"
grep -q "serving on" "$DIR/n1.out" || { echo "the coordinator did not start" >&2; exit 1; }

echo '{"agent":"w1","kind":"apply","writes":[{"path":"report.title","op":"set","value":"Q3"}]}' |
  "$COAGENT" submit --nats "nats://127.0.0.1:$((BASE + 1))" -
"$COAGENT" state --nats "nats://127.0.0.1:$((BASE + 2))" report.title
