#!/bin/bash
# s34's benchmark runs on a quiet machine, one after another (a874f21 + 1676f87's tree).
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
stamp() { echo "== $1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
stamp client_compare; python -m bench.client_compare --no-make --entries 20000 --repeat 3 --json /tmp/s34/client_compare.json > /tmp/s34/client_compare.log 2>&1; echo rc=$?
stamp planning; python -m bench.planning --no-make --json /tmp/s34/planning.json > /tmp/s34/planning.log 2>&1; echo rc=$?
stamp bookie_compare; python -m bench.bookie_compare --no-make --entries 20000 --repeat 5 --json /tmp/s34/bookie_compare.json > /tmp/s34/bookie_compare.log 2>&1; echo rc=$?
stamp demo; make demo > /tmp/s34/make-demo.log 2>&1; echo rc=$?
stamp end
