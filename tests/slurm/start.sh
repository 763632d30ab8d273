#!/usr/bin/env bash
# Start a throw-away single-node Slurm (munged + slurmctld + slurmd, as root) for the tests.
#
#   tests/slurm/start.sh [DIR]      # DIR: a new or empty folder; default: mktemp -d
#   . DIR/env.sh                    # SLURM_CONF for sbatch/squeue/scontrol/scancel
#   tests/slurm/stop.sh DIR         # stops exactly the daemons this script started
#
# Everything lives under DIR: slurm.conf, gres.conf, cgroup.conf, a private munge key and
# socket, state, spool, logs, pid files and the fake GPU devices (links to /dev/null). The ports
# are picked free at start, so this Slurm neither reads nor disturbs a system Slurm or munge.
# Node: shaped like a GPU node so that profiles/slurm's requests fit: 4 GPUs (gres gpu:4, files
# dev/fakegpu0..3), 64 CPUs and 512 GB by default (SDPOCL_SLURM_GPUS, SDPOCL_SLURM_CPUS,
# SDPOCL_SLURM_MEM_MB), whatever the machine has (SlurmdParameters=config_overrides; no cgroups, so
# nothing is enforced; Slurm still sets CUDA_VISIBLE_DEVICES per job step). cons_tres,
# MinJobAge 3600 (finished jobs stay visible to `scontrol show job` and to squeue-based status
# checks), no accounting.
#
# Installs Slurm from the Debian packages (slurmctld slurmd slurm-client munge) when missing.
# Prints DIR on the last line of stdout.
set -euo pipefail
# the daemons live in sbin, which a non-login PATH may lack
export PATH="$PATH:/usr/sbin:/sbin"

die() { echo "tests/slurm/start.sh: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "must run as root (slurmd and munged are started as root)"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
        || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || die "Slurm is not installed and apt-get is unavailable"
    echo "installing slurmctld slurmd slurm-client munge from Debian packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge >&2
fi
# Debian's packages enable systemd units; nothing here uses them (no systemd in containers).

if [[ -e /etc/slurm/slurm.conf ]]; then
    die "/etc/slurm/slurm.conf exists (a system Slurm): jobs' nested srun would read it, not this test config"
elif [[ -L /run/slurm/conf/slurm.conf ]]; then
    # left by an earlier start.sh: stale if that Slurm's slurmctld is gone, else still running
    other=$(dirname "$(readlink /run/slurm/conf/slurm.conf)")
    pid=$(cat "$other/slurmctld.pid" 2>/dev/null || true)
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        die "another test Slurm is running in $other; stop it with: $(dirname "$0")/stop.sh $other"
    fi
    echo "tests/slurm/start.sh: removing the stale link /run/slurm/conf/slurm.conf -> $other" >&2
    rm -f /run/slurm/conf/slurm.conf
elif [[ -e /run/slurm/conf/slurm.conf ]]; then
    die "/run/slurm/conf/slurm.conf exists (a configless Slurm's cache?): jobs' nested srun would read it"
fi

DIR=${1:-$(mktemp -d /tmp/sdpocl-slurm.XXXXXX)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
[[ -z $(ls -A "$DIR") ]] || die "$DIR is not empty"
chmod 0755 "$DIR"
# On any failure from here on: stop whatever was started, keep DIR (logs) for diagnosis.
cleanup_on_failure() {
    local rc=$?
    if [[ $rc -ne 0 ]]; then
        echo "tests/slurm/start.sh: failed (rc $rc); logs:" >&2
        tail -n 30 "$DIR"/log/*.log >&2 2>/dev/null || true
        "$(dirname "$0")/stop.sh" "$DIR" --keep >&2 || true
        echo "tests/slurm/start.sh: daemons stopped, $DIR kept" >&2
    fi
}
trap cleanup_on_failure EXIT
mkdir -p "$DIR"/{state,spool,log,dev,munge}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
while [[ $SLURMD_PORT == "$CTLD_PORT" ]]; do SLURMD_PORT=$(free_port); done

HOST=$(hostname -s)
NODE=sdpocl-node
GPUS=${SDPOCL_SLURM_GPUS:-4}
CPUS=${SDPOCL_SLURM_CPUS:-64}
MEM_MB=${SDPOCL_SLURM_MEM_MB:-512000}
[[ $GPUS =~ ^[1-9][0-9]*$ ]] || die "SDPOCL_SLURM_GPUS must be a positive integer, not '$GPUS'"
# Fake GPUs: links to /dev/null. slurmd wants character or block devices (a plain file is "not a
# valid character or block device": the node still counts gpu:N, but steps get no
# CUDA_VISIBLE_DEVICES); with devices, every job step sees its own GPUs' indices, as on a GPU node.
for i in $(seq 0 $((GPUS - 1))); do ln -s /dev/null "$DIR/dev/fakegpu$i"; done

# --- munge: a private key, socket and pid file --------------------------------------------
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$DIR/munge/munge.key"
munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"

# --- config ---------------------------------------------------------------------------------
cat > "$DIR/slurm.conf" <<EOF
# Written by tests/slurm/start.sh: a single-node test cluster, everything under $DIR.
ClusterName=sdpocl-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
GresTypes=gpu
DefMemPerCPU=1000
# finished jobs stay in slurmctld's memory for an hour: scontrol show job and squeue-based
# status checks (no accounting database here) see them
MinJobAge=3600
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
# the node is declared, not detected: CPUs and memory above the machine's are accepted
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$NODE NodeHostname=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:$GPUS State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

cat > "$DIR/gres.conf" <<EOF
AutoDetect=off
NodeName=$NODE Name=gpu File=$DIR/dev/fakegpu[0-$((GPUS - 1))]
EOF

# Read by slurmd only for cgroup plugins; none is used (proctrack/linuxproc, task/none), so
# this also works in containers without a delegated cgroup tree.
cat > "$DIR/cgroup.conf" <<EOF
CgroupAutomount=no
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF

# Slurm client commands run inside jobs without SLURM_CONF: the Snakemake jobstep plugin
# (snakemake-executor-plugin-slurm-jobstep 0.6) drops every SLURM_* variable but the job's
# identity before its nested `srun`. Without SLURM_CONF, Slurm's clients read
# /etc/slurm/slurm.conf, then /run/slurm/conf/slurm.conf (the configless cache, on tmpfs): link
# the latter to this config for as long as this Slurm runs (stop.sh removes the link).
LINK=/run/slurm/conf/slurm.conf
made_dirs=""
for d in /run/slurm /run/slurm/conf; do
    [[ -d $d ]] || { mkdir "$d"; made_dirs="$d $made_dirs"; }   # deepest first, for stop.sh
done
ln -s "$DIR/slurm.conf" "$LINK"
printf '%s\n%s\n' "$LINK" "$made_dirs" > "$DIR/linked_conf"

cat > "$DIR/env.sh" <<EOF
export SLURM_CONF=$DIR/slurm.conf
EOF
export SLURM_CONF=$DIR/slurm.conf

# --- daemons --------------------------------------------------------------------------------
slurmctld -i        # -i: ignore (empty) saved state
slurmd -N "$NODE"

for _ in $(seq 1 60); do
    state=$(sinfo -h -n "$NODE" -o '%t' 2>/dev/null || true)
    if [[ $state == idle ]]; then
        echo "$DIR"
        exit 0
    fi
    sleep 0.5
done
die "node $NODE did not become idle within 30 s (state: '${state:-}')"
