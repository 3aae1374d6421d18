#!/usr/bin/env bash
# Ends what MetaRoCE tests started (by recorded pid) and removes the network
# namespaces they created (all named mroce-*). Safe to run at any time.
run_dir=${E2E_RUN_DIR:-/run/metaroce-test}
if [ -f "$run_dir/pids" ]; then
  while read -r pid; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
  done < "$run_dir/pids"
  sleep 0.2
  while read -r pid; do
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  done < "$run_dir/pids"
  rm -f "$run_dir/pids"
fi
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^mroce-'); do
  ip netns del "$ns" 2>/dev/null
done
exit 0
