#!/bin/bash
while pgrep -f "pytest" >/dev/null; do
  for p in $(pgrep -f ZooKeeperServerMain); do
    port=$(grep -o "clientPort=[0-9]*" /proc/$p/cwd/zoo.cfg 2>/dev/null | cut -d= -f2)
    m=$(/work/main/.venv/bin/python -c "
from bkspark.devcluster.zookeeper import four_letter_word as f
import sys
for l in f($port,'mntr').splitlines():
    k,_,v=l.partition('\t')
    if k in ('zk_znode_count','zk_approximate_data_size','zk_avg_latency','zk_max_latency','zk_num_alive_connections'): print(f'{k[3:]}={v}', end=' ')
" 2>/dev/null)
    t=$(awk '{print ($14+$15)/100}' /proc/$p/stat)
    r=$(awk '/VmRSS/{print $2}' /proc/$p/status)
    echo "$(date +%T) pid=$p cpu_s=$t rss_kb=$r $m load=$(cut -d' ' -f1 /proc/loadavg)"
  done
  sleep 30
done
