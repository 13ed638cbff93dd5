#!/usr/bin/env bash
# Three coagent serve nodes on loopback make one JetStream cluster, and each
# runs a coordinator: one active (the holder of the leadership lease), two
# standbys following the replicated log COAGENT_LOG. The script submits an
# intent through one node and reads it back through another, prints
# `coagent status`, then kills the active node (SIGKILL) and shows a standby
# take over: it says how long that took, submits again through a surviving
# node while the failover is under way (the CLI sends the intent again until
# a coordinator answers), and prints the status again. Last it restarts the
# killed node on its data directory, shows it rejoin as a standby, and stops
# the nodes (also on Ctrl-C or a failure).
#
# Ports: clients 4222-4224 (BASE), routes 6222-6224 (ROUTES), each node's
# HTTP listener (/metrics, the console) 7070-7072 (HTTP); data under DIR (a
# temporary directory by default). Each wait has a deadline of WAIT seconds
# (60).
#
#   examples/cluster/run.sh                     # builds coagent from this source tree into DIR
#   COAGENT=./coagent examples/cluster/run.sh   # or runs the binary given
set -euo pipefail
BASE=${BASE:-4222}
ROUTES=${ROUTES:-6222}
HTTP=${HTTP:-7070}
DIR=${DIR:-$(mktemp -d)}
WAIT=${WAIT:-60}
mkdir -p "$DIR"

# The coagent to run: COAGENT if given, else one built from the source tree
# this script is in (so that the example runs the code beside it), else the
# one on PATH when there is no Go to build with.
if [[ -z ${COAGENT:-} ]]; then
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  if command -v go >/dev/null && [[ -d $src/cmd/coagent ]]; then
    echo "run.sh: building coagent from $src into $DIR/coagent" >&2
    (cd "$src" && go build -o "$DIR/coagent" ./cmd/coagent) || { echo "run.sh: go build failed" >&2; exit 1; }
    COAGENT=$DIR/coagent
  elif command -v coagent >/dev/null; then
    COAGENT=coagent
  else
    echo "run.sh: no coagent: install Go to build it, or give one with COAGENT=path/to/coagent" >&2
    exit 1
  fi
fi

R=""
for i in 0 1 2; do R+="${R:+,}nats://127.0.0.1:$((ROUTES + i))"; done
url() { echo "nats://127.0.0.1:$((BASE + $1 - 1))"; }
declare -A pid out from
stop() { kill "${pid[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT

node() { # node N OUTFILE: start node nN, its output in OUTFILE
  local n=$1 i=$(($1 - 1))
  out[$n]=$2 from[$n]=0
  "$COAGENT" serve --data "$DIR/n$n" --listen "127.0.0.1:$((BASE + i))" \
    --cluster "127.0.0.1:$((ROUTES + i))" --routes "$R" --name "n$n" \
    --http "127.0.0.1:$((HTTP + i))" \
    >"${out[$n]}" 2>&1 &
  pid[$n]=$!
}

fail() { # fail MESSAGE: say what every node printed, then why the script stops
  for n in "${!out[@]}"; do echo "--- n$n (${out[$n]})" >&2; cat "${out[$n]}" >&2; done
  echo "run.sh: $1" >&2
  exit 1
}

# await PATTERN N…: wait until one of nodes N… prints a line matching
# PATTERN past its line from[N] (0 if unset), and print that node's
# number. A node that stops meanwhile, or no such line within WAIT
# seconds, fails the script.
await() {
  local pattern=$1 deadline=$((SECONDS + WAIT)) n
  shift
  while ((SECONDS < deadline)); do
    for n in "$@"; do
      if tail -n "+$((${from[$n]:-0} + 1))" "${out[$n]}" 2>/dev/null | grep -q -- "$pattern"; then
        echo "$n"
        return
      fi
      kill -0 "${pid[$n]}" 2>/dev/null || fail "n$n stopped while waiting for \"$pattern\""
    done
    sleep 0.05
  done
  fail "no node of $* printed \"$pattern\" within ${WAIT}s"
}

# answered N…: wait until a read through each of nodes N… is answered. A
# node that has just joined may not know the active coordinator's
# subscriptions yet (its routes are still exchanging them), and a read
# through it then finds no responders.
answered() {
  local deadline=$((SECONDS + WAIT)) n
  for n in "$@"; do
    until "$COAGENT" state --nats "$(url "$n")" report.title >/dev/null 2>&1; do
      ((SECONDS < deadline)) || fail "no read through n$n was answered within ${WAIT}s"
      kill -0 "${pid[$n]}" 2>/dev/null || fail "n$n stopped"
      sleep 0.1
    done
  done
}

others() { # others N: the two nodes other than nN
  local n
  for n in 1 2 3; do ((n == $1)) || echo "$n"; done
}

intent() { # intent VALUE: an apply that sets report.title to VALUE
  echo '{"agent":"w1","kind":"apply","writes":[{"path":"report.title","op":"set","value":"'"$1"'"}]}'
}

node 1 "$DIR/n1.out"
node 2 "$DIR/n2.out"
node 3 "$DIR/n3.out"

# Each node prints its start line once the cluster holds the streams, and
# the member that takes the lease says it is the active coordinator.
a=$(await "is the active coordinator" 1 2 3)
for n in 1 2 3; do await "serving on" "$n" >/dev/null; done
cat "$DIR/n1.out" "$DIR/n2.out" "$DIR/n3.out"
answered 1 2 3
read -r b c <<<"$(others "$a" | tr "\n" " ")"

echo "\$ coagent submit --nats $(url "$b") -    # through n$b"
intent Q3 | "$COAGENT" submit --nats "$(url "$b")" - 2>&1
echo "\$ coagent state --nats $(url "$c") report.title    # through n$c"
"$COAGENT" state --nats "$(url "$c")" report.title 2>&1
echo "\$ coagent status --nats $(url "$b")"
"$COAGENT" status --nats "$(url "$b")" >"$DIR/status.out" 2>&1 || { cat "$DIR/status.out" >&2; fail "status failed"; }
cat "$DIR/status.out"
# The node to kill is the one the table says is active (the first to say
# so may have stepped down since).
active=$(grep -Eo '^n[1-3] +active' "$DIR/status.out" | cut -c2) || true
[[ $active =~ ^[1-3]$ ]] || fail "the status shows no single active coordinator"
a=$active
read -r b c <<<"$(others "$a" | tr "\n" " ")"
# Only what the nodes print after the kill counts as taking over.
for n in 1 2 3; do from[$n]=$(wc -l <"${out[$n]}"); done

echo "\$ kill -9 ${pid[$a]}    # n$a, the active coordinator"
start=$(date +%s%N)
# (The braces keep bash's "Killed" notice out of the output.)
{ kill -9 "${pid[$a]}" && wait "${pid[$a]}"; } 2>/dev/null || true
unset "pid[$a]"
# The submit goes out at once, while nobody is active yet: it is sent
# again until the new active coordinator answers.
intent Q4 | "$COAGENT" submit --nats "$(url "$c")" - >"$DIR/submit.out" 2>&1 &
submit=$!
new=$(await "is the active coordinator" "$b" "$c")
took=$((($(date +%s%N) - start) / 1000000))
tail -n "+$((from[$new] + 1))" "${out[$new]}" | grep "is the active coordinator"
printf 'n%s took over %d.%03ds after n%s was killed\n' "$new" $((took / 1000)) $((took % 1000)) "$a"
echo "\$ coagent submit --nats $(url "$c") -    # through n$c, sent right after the kill"
wait "$submit" || { cat "$DIR/submit.out" >&2; fail "the submit during the failover failed"; }
cat "$DIR/submit.out"
answered "$b"
echo "\$ coagent state --nats $(url "$b") report.title"
"$COAGENT" state --nats "$(url "$b")" report.title 2>&1
echo "\$ coagent status --nats $(url "$c")"
"$COAGENT" status --nats "$(url "$c")" 2>&1

echo "\$ coagent serve --data $DIR/n$a … --name n$a    # n$a again, on its data directory"
node "$a" "$DIR/n$a.again.out"
await "serving on" "$a" >/dev/null
cat "$DIR/n$a.again.out"
# It has rejoined once its coordinator has folded the log to its end (its
# row says standby, 0 groups behind) and its NATS node holds the log's
# stream again (the log's line says it is current, or its leader).
deadline=$((SECONDS + WAIT))
until "$COAGENT" status --nats "$(url "$a")" >"$DIR/status.out" 2>&1 &&
  grep -Eq "^n$a +standby +[0-9]+ +[0-9]+ +0 groups" "$DIR/status.out" &&
  grep -Eq "^log .*(leader n$a,|n$a \(current\))" "$DIR/status.out"; do
  ((SECONDS < deadline)) || { cat "$DIR/status.out" >&2; fail "n$a did not rejoin as a standby within ${WAIT}s"; }
  kill -0 "${pid[$a]}" 2>/dev/null || fail "n$a stopped"
done
echo "\$ coagent status --nats $(url "$a")"
cat "$DIR/status.out"
