#!/usr/bin/env bash
# Open MPI launch agent between network namespaces (mpirun --mca
# plm_rsh_agent): Open MPI runs `AGENT HOST ORTED-COMMAND-LINE` as it would
# run `ssh HOST ...`; this runs the command line in the namespace that HOST
# names, under metaroce-run with that namespace's device tree, so orted and
# the ranks it starts see the namespace's metaroce device.
#
#   MROCE_MPI_HOSTS   "HOST=NAMESPACE=SYSFS_ROOT=HOSTNAME ..." (one word per host);
#                     the command runs in its own UTS namespace named HOSTNAME,
#                     so that Open MPI and UCX take each namespace for a node
#   MROCE_MPI_LAUNCHER  path of metaroce-run
# Exits 2 with a reason for a host it does not know.
set -u
host=${1:?usage: netns_agent.sh HOST COMMAND...}; shift
for entry in ${MROCE_MPI_HOSTS:-}; do
  IFS== read -r h ns sysfs name <<<"$entry"
  [ "$h" = "$host" ] || continue
  # Like ssh: the rest is one command line for a shell (Open MPI quotes its
  # arguments for one). The launcher starts from mpirun's environment less
  # its LD_PRELOAD (mpirun's own launcher's), as over ssh: it sets its own,
  # and an inherited libasan would hide from its check for one (ldd shows a
  # preloaded library without "=>").
  exec ip netns exec "$ns" env -u LD_PRELOAD unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' \
    "${name:?no hostname for $host in MROCE_MPI_HOSTS}" "${MROCE_MPI_LAUNCHER:?MROCE_MPI_LAUNCHER unset}" \
    --sysfs-root "$sysfs" --sysfs-view on /bin/sh -c "$*"
done
echo "netns_agent.sh: host '$host' is not in MROCE_MPI_HOSTS ('${MROCE_MPI_HOSTS:-}')" >&2
exit 2
