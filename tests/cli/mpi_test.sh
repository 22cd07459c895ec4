#!/usr/bin/env bash
# m2 under mpirun (--parallel tp,ep), on this machine with oversubscription:
#  - logits byte-identical to the single-process run for R = 1, 2, 4 on the bundled model
#    and two golden tiny models; greedy tokens identical with and without MTP drafts;
#    perplexity identical; the serving API answers;
#  - m2 bench reports each rank's memory, compute and communication;
#  - launched by mpirun without --parallel: a clear error;
#  - a rank killed while serving: mpirun ends the job with an error instead of hanging.
# Usage: mpi_test.sh path/to/m2   (run from the repository root; CTest does both)
set -u
M2=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1  # more ranks than cores: waiting ranks give their core up
run() { timeout 300 mpirun --oversubscribe -np "$@"; }
failed=0
fail() { echo "FAIL: $*"; failed=1; }
ids=1,22,333,4444,55,6,777,88,9,1000,11,1200,13

for model in models/m2-tiny testdata/golden/tiny-bf16-sharded testdata/golden/tiny-mtp; do
  vocab=$(python3 -c "import json;print(json.load(open('$model/config.json'))['vocab_size'])")
  mids=$(python3 -c "print(','.join(str(int(x) % $vocab) for x in '$ids'.split(',')))")
  want=$("$M2" logits -m "$model" --ids "$mids" -t 1) && [ -n "$want" ] || fail "$model: single-process logits"
  for R in 1 2 4; do
    got=$(run "$R" "$M2" logits -m "$model" --ids "$mids" -t 1 --parallel tp,ep 2>/tmp/mpi_test_err.$$)
    [ "$got" == "$want" ] || { fail "$model: logits over $R ranks differ from one process"; cat /tmp/mpi_test_err.$$; }
  done
done
echo "logits: checked"

want=$("$M2" generate -m models/m2-tiny --ids 5,6,7,8,9,10 -n 40 --temperature 0 -t 1 2>/dev/null)
[ -n "$want" ] || fail "single-process generate printed nothing"
for R in 2 4; do
  for spec in off mtp lookup; do
    got=$(run "$R" "$M2" generate -m models/m2-tiny --ids 5,6,7,8,9,10 -n 40 --temperature 0 -t 1 --spec "$spec" \
          --draft 3 --parallel tp,ep 2>/dev/null)
    [ "$got" == "$want" ] || fail "generate over $R ranks with --spec $spec: '$got' vs '$want'"
  done
done
echo "generate: checked"

printf 'def add(a, b):\n    return a + b\n\nclass Foo:\n    pass\n' > /tmp/mpi_test_text.$$
ppl() { grep -o '"mean_nll": [0-9.e+-]*'; }
want=$("$M2" perplexity -m models/m2-tiny -f /tmp/mpi_test_text.$$ --json -t 1 2>/dev/null | ppl)
got=$(run 2 "$M2" perplexity -m models/m2-tiny -f /tmp/mpi_test_text.$$ --json -t 1 --parallel tp,ep 2>/dev/null | ppl)
[ -n "$want" ] && [ "$got" == "$want" ] || fail "perplexity over 2 ranks: '$got' vs '$want'"
echo "perplexity: checked"

bench=$(run 2 "$M2" bench -m models/m2-tiny --prefill 16 --context 64 --decode-steps 4 --repeats 1 --no-scaling \
        -t 1 --parallel tp,ep --json 2>/dev/null)
python3 - "$bench" <<'PY' || fail "bench over 2 ranks: no per-rank report"
import json, sys
j = json.loads(sys.argv[1])
ranks = j["ranks"]
assert not j["failed"], j
assert [r["rank"] for r in ranks] == [0, 1], ranks
for r in ranks:
    assert r["bytes_sent_per_token"] > 0 and r["communication_seconds_per_step"] >= 0, r
    assert 0 < r["compute_seconds_per_step"] <= r["seconds_per_step"], r
    assert r["weight_bytes"] > 0 and r["resident_bytes"] > 0, r
PY
echo "bench: checked"

err=$(run 2 "$M2" logits -m models/m2-tiny --ids 1,2 2>&1)
grep -q "without --parallel tp,ep" <<<"$err" || fail "mpirun without --parallel: no clear error: $err"

# Serving over 2 ranks, then rank 1 killed: the job must end, with an error, not hang.
port=$((20000 + $$ % 20000))
log=/tmp/mpi_test_serve.$$
run 2 "$M2" serve -m models/m2-tiny --port "$port" -t 1 --parallel tp,ep >"$log" 2>&1 &
job=$!
for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.2; done
reply=$(curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0}')
grep -q '"text"' <<<"$reply" || fail "serve over 2 ranks: no completion: $reply"
victim=""
for p in $(pgrep -f "serve -m models/m2-tiny --port $port"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
done
if [ -z "$victim" ]; then
  fail "serve: no rank 1 process found"
  kill "$job" 2>/dev/null
else
  kill -9 "$victim"
  for _ in $(seq 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$job" 2>/dev/null; then
    fail "rank 1 killed: the job is still running after 20 s"
    kill -9 "$job"
  else
    wait "$job"
    code=$?
    [ "$code" -ne 0 ] || fail "rank 1 killed: the job exited 0"
    grep -q "rank 1" "$log" || fail "rank 1 killed: no message naming it: $(tail -5 "$log")"
  fi
fi
pkill -9 -f "serve -m models/m2-tiny --port $port" 2>/dev/null
echo "rank death: checked"
rm -f /tmp/mpi_test_err.$$ /tmp/mpi_test_text.$$ "$log"
[ "$failed" -eq 0 ] && echo "all mpirun checks passed"
exit "$failed"
