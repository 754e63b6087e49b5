#!/usr/bin/env bash
# A one-machine Slurm cluster (Debian's slurm-wlm 22.05: munged, slurmctld, slurmd on this host), for the
# node check's batch job (tests/test_docker_nodecheck.py). Run as root.
#   scripts/slurm-local.sh start   install if missing, write the config, start the daemons, wait for the node
#   scripts/slurm-local.sh stop    stop the daemons
# The node offers this machine's CPUs; there is no pyxis here, so the job script starts the image with docker.
set -euo pipefail
conf=/etc/slurm/slurm.conf
log=/var/log/imgbuild-slurm
host=$(hostname -s)
GPUS=8   # declared, not real: see gres.conf in start()

die() { echo "slurm-local: $*" >&2; exit 1; }

stop() {
    pkill -x slurmd 2>/dev/null || true
    pkill -x slurmctld 2>/dev/null || true
    pkill -x munged 2>/dev/null || true
}

up() {
    case "$(sinfo -h -N -o %t 2>/dev/null | head -n 1)" in idle|mix|alloc) return 0 ;; esac
    return 1
}

start() {
    [ "$(id -u)" = 0 ] || die "run as root"
    if [ -s "$conf" ] && grep -q '^GresTypes=gpu' "$conf" && command -v sinfo >/dev/null && up; then
        echo "slurm-local: already up ($(sinfo -h -N -o '%N %t %c CPUs' | head -n 1))"
        return 0
    fi
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y --no-install-recommends \
            slurm-wlm munge >/dev/null || die "apt-get install slurm-wlm munge failed"
    fi
    mkdir -p "$log" /var/spool/slurmd /var/spool/slurmctld /run/munge /etc/slurm
    [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
    chown munge:munge /etc/munge/munge.key /run/munge && chmod 400 /etc/munge/munge.key
    cpus=$(nproc)
    mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
    cat > "$conf" <<EOF
# Written by imgbuild's scripts/slurm-local.sh: a one-machine cluster for tests.
ClusterName=imgbuild-local
SlurmctldHost=$host
AuthType=auth/munge
SlurmUser=root
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=$log/slurmctld.log
SlurmdLogFile=$log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
GresTypes=gpu
NodeName=$host CPUs=$cpus RealMemory=$mem Gres=gpu:$GPUS State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    # Declared GPUs: this host has none, and no job here uses them. They let Slurm's scheduler judge a GPU
    # job's request (sbatch --test-only of node-check's GPU script, tests/test_node_gpus.py). Slurm wants a
    # device file per GPU; these are character devices with /dev/null's numbers, so nothing can misuse them.
    # Where mknod is not allowed (a container without CAP_MKNOD), a plain file stands in: Slurm reads the
    # path, and with task/none nothing constrains devices by it.
    for i in $(seq 0 $((GPUS - 1))); do
        [ -e "/dev/imgbuild-gpu$i" ] || mknod -m 600 "/dev/imgbuild-gpu$i" c 1 3 2>/dev/null || : > "/dev/imgbuild-gpu$i"
    done
    echo "NodeName=$host Name=gpu File=/dev/imgbuild-gpu[0-$((GPUS - 1))]" > /etc/slurm/gres.conf
    stop
    # A test cluster keeps no jobs: the controller's saved state would keep a node drained for a reason an
    # older configuration gave.
    rm -rf /var/spool/slurmctld/*
    runuser -u munge -- /usr/sbin/munged --force
    /usr/sbin/slurmctld
    /usr/sbin/slurmd
    for _ in $(seq 60); do
        state=$(sinfo -h -N -o %t 2>/dev/null | head -n 1 || true)
        case "$state" in idle|mix|alloc) echo "slurm-local: node $host is $state ($cpus CPUs)"; return 0 ;; esac
        sleep 1
    done
    tail -n 20 "$log"/slurmctld.log "$log"/slurmd.log >&2 || true
    die "the node did not come up (state: ${state:-none})"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 start|stop" ;;
esac
