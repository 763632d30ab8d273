#!/usr/bin/env bash
# Stop the test Slurm that tests/slurm/start.sh started in DIR: cancel its jobs, then stop
# slurmd, slurmctld and munged by the pids in DIR's pid files (and nothing else).
#
#   tests/slurm/stop.sh DIR [--keep]    # --keep: leave DIR (config, logs) in place
set -uo pipefail

DIR=${1:?usage: tests/slurm/stop.sh DIR [--keep]}
KEEP=${2:-}
[[ -d $DIR/munge && -d $DIR/log ]] || { echo "tests/slurm/stop.sh: $DIR was not made by start.sh" >&2; exit 1; }
export SLURM_CONF=$DIR/slurm.conf

alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }
pid_of() { [[ -f $1 ]] && tr -dc '0-9' < "$1" || true; }

# Running jobs first, so that no slurmstepd outlives its slurmd.
if [[ -f $SLURM_CONF ]] && alive "$(pid_of "$DIR/slurmctld.pid")"; then
    # shellcheck disable=SC2046
    ids=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    [[ -n ${ids// } ]] && scancel $ids 2>/dev/null
    for _ in $(seq 1 40); do
        [[ -z $(squeue -h -t PENDING,RUNNING,COMPLETING,SUSPENDED 2>/dev/null) ]] && break
        sleep 0.5
    done
fi

stop() {  # pidfile name
    local pid
    pid=$(pid_of "$1")
    alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 40); do alive "$pid" || return 0; sleep 0.25; done
    echo "tests/slurm/stop.sh: $2 (pid $pid) ignored SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
}
stop "$DIR/slurmd.pid" slurmd
stop "$DIR/slurmctld.pid" slurmctld
stop "$DIR/munge/munged.pid" munged

# the client-config link start.sh made, if it still points here
if [[ -f $DIR/linked_conf ]]; then
    { read -r link; read -r made_dirs; } < "$DIR/linked_conf"
    [[ $(readlink "$link" 2>/dev/null) == "$DIR/slurm.conf" ]] && rm -f "$link"
    for d in ${made_dirs:-}; do rmdir "$d" 2>/dev/null; done   # only the ones start.sh made, if empty
fi

[[ $KEEP == --keep ]] || rm -rf "$DIR"
exit 0
