#!/usr/bin/env bash
# A two-node Slurm cluster on this one machine, for testing `dlbench jobscript` with real sbatch.
#   scripts/slurm-local.sh start    start its own munged (own key and socket), slurmctld and slurmd n1, n2; wait for idle
#   scripts/slurm-local.sh status   sinfo of the local cluster
#   scripts/slurm-local.sh stop     kill the daemons this script started, remove the state folder
# Installs nothing: needs slurm-wlm and munge (Debian: apt-get install slurm-wlm munge) and root (slurmd, munge
# key). Everything lives under $DLBENCH_SLURM_DIR (default /tmp/dlbench-slurm-$UID); client commands need
#   export SLURM_CONF=$DLBENCH_SLURM_DIR/slurm.conf
# Ports: $DLBENCH_SLURM_PORT (controller, default 16817), +1 and +2 for the slurmd of n1 and n2 (not the
# default 6817-6819, so a site's own Slurm on this host is left alone).
set -euo pipefail
DIR=${DLBENCH_SLURM_DIR:-/tmp/dlbench-slurm-$(id -u)}
PORT=${DLBENCH_SLURM_PORT:-16817}
CONF=$DIR/slurm.conf
TIMEOUT=${DLBENCH_SLURM_TIMEOUT:-60}

die() { echo "slurm-local: $*" >&2; exit 1; }

kill_pidfile() {  # kill the process whose id the file holds (if alive), wait for it to go
    local f=$1 pid
    [ -s "$f" ] || return 0
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
}

cluster_pids() {  # processes of this cluster's jobs: slurmstepd and its tasks carry SLURM_CONF=$CONF
    local e
    for e in /proc/[0-9]*/environ; do
        { tr '\0' '\n' < "$e"; } 2>/dev/null | grep -qxF "SLURM_CONF=$CONF" && { e=${e#/proc/}; echo "${e%/environ}"; }
    done
    return 0
}

stop() {
    [ -d "$DIR" ] || { echo "slurm-local: not running ($DIR absent)"; return 0; }
    if [ -s "$DIR"/slurmctld.pid ] && kill -0 "$(cat "$DIR"/slurmctld.pid)" 2>/dev/null; then
        # cancel what is still queued or running, give it a moment to end
        local ids
        ids=$(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null || true)
        if [ -n "$ids" ]; then
            # shellcheck disable=SC2086
            SLURM_CONF=$CONF scancel $ids 2>/dev/null || true
            for _ in $(seq 30); do [ -z "$(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
        fi
    fi
    local M=""
    [ -s "$DIR"/munge.dir ] && M=$(cat "$DIR"/munge.dir)
    for f in "$DIR"/slurmd-n1.pid "$DIR"/slurmd-n2.pid "$DIR"/slurmctld.pid ${M:+"$M"/munged.pid}; do
        kill_pidfile "$f"
    done
    case "$M" in /tmp/dlbench-munge.*) rm -rf "$M" ;; esac
    local left
    left=$(cluster_pids | grep -vx "$$" || true)
    # shellcheck disable=SC2086
    [ -z "$left" ] || kill -9 $left 2>/dev/null || true
    rm -rf "$DIR"
    echo "slurm-local: stopped, $DIR removed"
}

start() {
    for b in slurmctld slurmd sinfo sbatch munged munge; do
        command -v "$b" >/dev/null || die "$b not found: install slurm-wlm and munge (apt-get install slurm-wlm munge)"
    done
    [ "$(id -u)" = 0 ] || die "needs root (slurmd, the munge key); running as uid $(id -u)"
    [ -e "$DIR" ] && die "$DIR exists: a cluster is running or was not stopped; run: $0 stop"
    local p
    for p in "$PORT" $((PORT + 1)) $((PORT + 2)); do  # another Slurm there would answer our clients
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            die "port $p is in use (another Slurm?); choose others with DLBENCH_SLURM_PORT=N (N, N+1, N+2)"
        fi
    done
    mkdir -p "$DIR"/state "$DIR"/spool "$DIR"/log
    # munge: this cluster's own munged (own 1 KiB key owned by munge, mode 400; own socket, pid, log and seed
    # in its own folder), never the host's: two local clusters (or the host's munged) cannot stop each other's.
    # The folder is under /tmp, not $DIR: munged wants every directory above its socket searchable by all, which
    # a private $DIR (pytest's tmp_path) is not; $DIR/munge.dir says where it is, for stop
    local M
    M=$(mktemp -d /tmp/dlbench-munge.XXXXXX)
    echo "$M" > "$DIR"/munge.dir
    dd if=/dev/urandom of="$M"/munge.key bs=1024 count=1 status=none
    chown -R munge:munge "$M"; chmod 755 "$M"; chmod 400 "$M"/munge.key
    su -s /bin/sh munge -c "munged --socket=$M/munge.socket --key-file=$M/munge.key --pid-file=$M/munged.pid \
--log-file=$M/munged.log --seed-file=$M/munged.seed" \
        || { tail -3 "$M"/munged.log >&2 2>/dev/null || true; rm -rf "$DIR" "$M"; die "munged did not start"; }
    for _ in $(seq 50); do munge -S "$M"/munge.socket -n 2>/dev/null | unmunge -S "$M"/munge.socket >/dev/null 2>&1 \
        && break; sleep 0.1; done
    munge -S "$M"/munge.socket -n | unmunge -S "$M"/munge.socket >/dev/null \
        || { stop >/dev/null; die "munge does not answer after starting munged"; }
    local host mem
    host=$(hostname -s)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))  # MiB per node: a quarter each
    cat > "$CONF" <<CONF
ClusterName=dlbenchlocal
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$M/munge.socket
CredType=cred/munge
SlurmctldPort=$PORT
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
ReturnToService=2
SchedulerType=sched/backfill
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
NodeName=n1 NodeHostname=$host Port=$((PORT + 1)) CPUs=1 RealMemory=$mem State=UNKNOWN
NodeName=n2 NodeHostname=$host Port=$((PORT + 2)) CPUs=1 RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF
    mkdir -p "$DIR"/spool/n1 "$DIR"/spool/n2
    # absolute -f: the daemons change directory
    slurmctld -f "$CONF" || { stop >/dev/null; die "slurmctld did not start"; }
    slurmd -f "$CONF" -N n1 || { stop >/dev/null; die "slurmd n1 did not start"; }
    slurmd -f "$CONF" -N n2 || { stop >/dev/null; die "slurmd n2 did not start"; }
    export SLURM_CONF=$CONF
    local t=0
    until [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -ge 2 ]; do
        t=$((t + 1))
        if [ "$t" -gt $((TIMEOUT * 2)) ]; then
            echo "slurm-local: nodes not idle after ${TIMEOUT}s:" >&2
            sinfo -N >&2 || true
            tail -5 "$DIR"/log/*.log >&2 || true
            stop >/dev/null; exit 1
        fi
        sleep 0.5
    done
    sinfo
    echo "slurm-local: up; export SLURM_CONF=$CONF"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) [ -f "$CONF" ] || die "not running ($CONF absent)"; SLURM_CONF=$CONF sinfo ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
