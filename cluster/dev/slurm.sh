#!/usr/bin/env bash
# A real one-node Slurm on localhost for development and CI (Debian, run as root, no
# systemd): installs slurm-wlm and munge, writes /etc/slurm/slurm.conf for this machine
# and starts munged, slurmctld and slurmd directly (the init scripts do not start them
# here). By default no accounting daemon: `sacct` fails, so rcpforge reads job states
# from `squeue -t all`, which keeps finished jobs for MinJobAge seconds.
# RCPF_SLURM_ACCOUNTING=1 adds slurmdbd on a private MariaDB (installs slurmdbd and
# mariadb-server; the database in $STATE/mysql on 127.0.0.1:RCPF_SLURM_DB_PORT, 3307):
# `sacct` then has every job's real state, kept after squeue forgets it.
#
#
# A second, two-node cluster runs beside it for multi-node gangs: nodes n1 and n2 (one
# slurmd each, both on localhost, 1 CPU each) under their own slurmctld, on private
# ports, with their own conf, state and logs. Its clients find it through SLURM_CONF:
#   SLURM_CONF=/etc/slurm-two-node/slurm.conf sinfo
#
#   cluster/dev/slurm.sh start            install if needed, start (idempotent)
#   cluster/dev/slurm.sh stop             stop the daemons this script starts (munged too)
#   cluster/dev/slurm.sh status           daemons and `sinfo`
#   cluster/dev/slurm.sh start-two-node   the two-node cluster: start (idempotent)
#   cluster/dev/slurm.sh stop-two-node    stop it (munged stays: the one-node cluster shares it)
#   cluster/dev/slurm.sh start-limits     the limits cluster (needs `start` with accounting first)
#   cluster/dev/slurm.sh stop-limits      stop it
#
# A third cluster says no as a production one does, for tests/cluster/test_slurm_limits.py:
# one node, l1, under its own slurmctld (SLURM_CONF=/etc/slurm-limits/slurm.conf), with
# MaxArraySize=RCPF_SLURM_MAX_ARRAY (6) and accounting enforced
# (AccountingStorageEnforce=associations,limits,qos) through the one-node cluster's
# slurmdbd; the user's default QOS there, rcpf-limited, allows RCPF_SLURM_MAX_SUBMIT (8)
# submitted jobs per user (`sacctmgr -i modify qos rcpf-limited set MaxSubmitJobsPerUser=N`
# changes it at once; -1 lifts it).
set -euo pipefail

ACCOUNTING=${RCPF_SLURM_ACCOUNTING:-0}
DB_PORT=${RCPF_SLURM_DB_PORT:-3307}

CONF=/etc/slurm/slurm.conf
STATE=/var/lib/rcpforge-slurm
LOGS=/var/log/rcpforge-slurm

TWO_CONF=/etc/slurm-two-node/slurm.conf
TWO_STATE=/var/lib/rcpforge-slurm-two-node
TWO_LOGS=/var/log/rcpforge-slurm-two-node
# Away from the one-node cluster's defaults (6817, 6818); a node's own Port overrides
# SlurmdPort, so each slurmd of the pair listens on its own.
TWO_CTLD_PORT=16817
TWO_NODE_PORTS=(16821 16822)

LIMITS_CONF=/etc/slurm-limits/slurm.conf
LIMITS_STATE=/var/lib/rcpforge-slurm-limits
LIMITS_LOGS=/var/log/rcpforge-slurm-limits
LIMITS_CTLD_PORT=26817
LIMITS_NODE_PORT=26821
LIMITS_CLUSTER=rcpforge-limits
LIMITS_QOS=rcpf-limited
MAX_ARRAY=${RCPF_SLURM_MAX_ARRAY:-6}
MAX_SUBMIT=${RCPF_SLURM_MAX_SUBMIT:-8}

running() { [ -s "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }

install_packages() {
    local wanted="slurm-wlm munge"
    [ "$ACCOUNTING" = 1 ] && wanted="$wanted slurmdbd mariadb-server"
    if command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v sbatch >/dev/null \
        && { [ "$ACCOUNTING" != 1 ] || { command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null; }; }; then
        return
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $wanted >/dev/null
}

# The settings both dev clusters share, for the controller whose state and logs are in
# $1 and $2.
common_conf() {
    cat <<EOF
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# Without this a requeued job waits about 2 minutes for its old credential to expire.
AuthInfo=cred_expire=10
StateSaveLocation=$1/ctld
SlurmctldPidFile=$1/slurmctld.pid
SlurmctldLogFile=$2/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
MailProg=/bin/true
# Jobs start as soon as they are submitted, not in waves 3 s apart; a requeued job, which
# no event wakes the scheduler for once its BeginTime passes, waits at most 2 s for the
# next scheduling pass (the default passes are 30 and 60 s apart).
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=2
# Finished jobs stay visible to squeue for 10 minutes: the job states without sacct.
MinJobAge=600
KillWait=5
EOF
}

# Preemption, for tests/cluster/test_slurm_preemption.py: a job of partition urgent (the
# higher PriorityTier) takes the node from the jobs of a preemptible-* partition, which
# Slurm then cancels (CANCEL) or requeues (REQUEUE) after a short GraceTime. debug, the
# default partition, is never preempted (PreemptMode=OFF) and preempts nothing (the same
# tier as the preemptible ones): it behaves as it did without them. The global
# PreemptMode is only the default of a partition that sets none (OFF is refused there
# with partition_prio). A preemptible partition's jobs share CPUs (up to 4 a CPU), so a
# test's few jobs all run at once on the small node.
write_conf() {
    local cpus mem
    cpus=$(nproc)
    # Leave 1 GiB to the system; Slurm refuses a node that reports less than RealMemory.
    mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
    mkdir -p /etc/slurm "$STATE/ctld" "$STATE/d" "$LOGS"
    {
        echo "# Generated by cluster/dev/slurm.sh: one node on localhost."
        echo "ClusterName=rcpforge-dev"
        common_conf "$STATE" "$LOGS"
        cat <<EOF
SlurmdSpoolDir=$STATE/d
SlurmdPidFile=$STATE/slurmd.pid
SlurmdLogFile=$LOGS/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP PreemptMode=OFF
PartitionName=preemptible-cancel Nodes=localhost MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=2 OverSubscribe=FORCE:4
PartitionName=preemptible-requeue Nodes=localhost MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=2 OverSubscribe=FORCE:4
PartitionName=urgent Nodes=localhost MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
    } >"$CONF"
    if [ "$ACCOUNTING" = 1 ]; then
        cat >>"$CONF" <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
EOF
    fi
}

# MariaDB in a folder of our own (not the package's /var/lib/mysql), on loopback.
start_mariadb() {
    local data="$STATE/mysql" sock="$STATE/mysql/mysqld.sock"
    if ! running "$STATE/mysql/mariadb.pid"; then
        if [ ! -d "$data/mysql" ]; then
            mkdir -p "$data" && chown mysql:mysql "$data"
            mariadb-install-db --user=mysql --datadir="$data" --auth-root-authentication-method=socket \
                >"$LOGS/mariadb-install.log" 2>&1 || { echo "mariadb-install-db failed, see $LOGS" >&2; exit 1; }
        fi
        setsid mariadbd --user=mysql --datadir="$data" --socket="$sock" --port="$DB_PORT" \
            --bind-address=127.0.0.1 --pid-file="$STATE/mysql/mariadb.pid" --log-error="$data/mariadb.log" \
            </dev/null >/dev/null 2>&1 &
    fi
    for _ in $(seq 1 60); do
        mariadb --socket="$sock" -e "SELECT 1" >/dev/null 2>&1 && break
        sleep 0.5
    done
    if [ ! -s "$STATE/dbpass" ]; then
        (umask 077; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$STATE/dbpass")
    fi
    mariadb --socket="$sock" <<SQL || { echo "MariaDB did not come up, see $STATE/mysql/mariadb.log" >&2; exit 1; }
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$STATE/dbpass")';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$STATE/dbpass")';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

start_slurmdbd() {
    if ! running "$STATE/slurmdbd.pid"; then
        (umask 077; cat >/etc/slurm/slurmdbd.conf <<EOF
# Generated by cluster/dev/slurm.sh (RCPF_SLURM_ACCOUNTING=1).
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=$STATE/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$STATE/dbpass")
StorageLoc=slurm_acct_db
EOF
        )
        slurmdbd
    fi
    for _ in $(seq 1 60); do
        sacctmgr -n list cluster >/dev/null 2>&1 && break
        sleep 0.5
    done
    sacctmgr -n list cluster >/dev/null 2>&1 || { echo "slurmdbd did not answer, see $LOGS/slurmdbd.log" >&2; exit 1; }
    # slurmctld only sends job records for a cluster the database knows.
    sacctmgr -n -P list cluster format=cluster | grep -qx rcpforge-dev || sacctmgr -i add cluster rcpforge-dev >/dev/null
}

# A slurmctld started with other accounting settings keeps them: restart it.
ctld_accounting_matches() {
    local type
    type=$(scontrol show config 2>/dev/null | awk -F= '/^AccountingStorageType/ {gsub(/ /, "", $2); print $2}')
    if [ "$ACCOUNTING" = 1 ]; then [ "$type" = accounting_storage/slurmdbd ]; else [ "$type" != accounting_storage/slurmdbd ]; fi
}

start_munge() {
    # (no pgrep: procps is not in a minimal Debian image)
    if running /run/munge/munged.pid; then return; fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
    chmod 700 /etc/munge && chmod 400 /etc/munge/munge.key
    su -s /bin/sh munge -c "/usr/sbin/munged"
}

start() {
    install_packages
    local before
    before=$(cat "$CONF" 2>/dev/null || true)
    write_conf
    start_munge
    if [ "$ACCOUNTING" = 1 ]; then
        start_mariadb
        start_slurmdbd
    fi
    if running "$STATE/slurmctld.pid" && ! ctld_accounting_matches; then
        scontrol shutdown slurmctld >/dev/null 2>&1 || true
        for _ in $(seq 1 40); do running "$STATE/slurmctld.pid" || break; sleep 0.25; done
    fi
    # A controller started from another conf (an older script's, without the preemptible
    # partitions) re-reads this one; reconfigure keeps the jobs running, stop would not.
    if running "$STATE/slurmctld.pid" && { [ "$before" != "$(cat "$CONF")" ] || ! scontrol show partition urgent >/dev/null 2>&1; }; then
        scontrol reconfigure
    fi
    running "$STATE/slurmctld.pid" || slurmctld -f "$CONF"
    running "$STATE/slurmd.pid" || slurmd -f "$CONF" -N localhost
    wait_up localhost 1 "$LOGS"
}

# Until all $2 nodes of the cluster that SLURM_CONF (or the default conf) names answer
# idle, mixed or allocated; $1: the nodes, for scontrol; $3: the logs to look at if not.
wait_up() {
    local nodes=$1 count=$2 logs=$3
    for _ in $(seq 1 60); do
        if [ "$(sinfo -h -N -o %T 2>/dev/null | grep -cE '^(idle|mixed|allocated)')" -ge "$count" ]; then
            scontrol update NodeName="$nodes" State=RESUME >/dev/null 2>&1 || true
            echo "slurm up: $(sinfo -h -o '%P %D %T %c')"
            return
        fi
        # A node left down or drained by an earlier run comes back on RESUME.
        scontrol update NodeName="$nodes" State=RESUME >/dev/null 2>&1 || true
        sleep 0.5
    done
    echo "slurm did not come up; see $logs" >&2
    exit 1
}

write_two_node_conf() {
    mkdir -p "$(dirname "$TWO_CONF")" "$TWO_STATE/ctld" "$TWO_LOGS"
    {
        echo "# Generated by cluster/dev/slurm.sh start-two-node: nodes n1 and n2, both on localhost."
        echo "ClusterName=rcpforge-two-node"
        common_conf "$TWO_STATE" "$TWO_LOGS"
        # %n: each slurmd of the pair keeps its spool, pid and log apart.
        cat <<EOF
SlurmctldPort=$TWO_CTLD_PORT
SlurmdSpoolDir=$TWO_STATE/d%n
SlurmdPidFile=$TWO_STATE/d%n.pid
SlurmdLogFile=$TWO_LOGS/d%n.log
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${TWO_NODE_PORTS[0]} CPUs=1 RealMemory=1000 State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${TWO_NODE_PORTS[1]} CPUs=1 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOF
    } >"$TWO_CONF"
}

start_two_node() {
    install_packages
    write_two_node_conf
    start_munge
    export SLURM_CONF=$TWO_CONF
    running "$TWO_STATE/slurmctld.pid" || slurmctld -f "$TWO_CONF"
    for node in n1 n2; do
        running "$TWO_STATE/d$node.pid" || slurmd -f "$TWO_CONF" -N "$node"
    done
    wait_up n1,n2 2 "$TWO_LOGS"
}

stop_two_node() {
    if command -v scontrol >/dev/null && running "$TWO_STATE/slurmctld.pid"; then
        SLURM_CONF=$TWO_CONF scontrol shutdown >/dev/null 2>&1 || true
    fi
    stop_daemons "$TWO_STATE/dn1.pid" "$TWO_STATE/dn2.pid" "$TWO_STATE/slurmctld.pid"
    echo "two-node slurm stopped"
}

write_limits_conf() {
    mkdir -p "$(dirname "$LIMITS_CONF")" "$LIMITS_STATE/ctld" "$LIMITS_STATE/d" "$LIMITS_LOGS"
    {
        echo "# Generated by cluster/dev/slurm.sh start-limits: one node, l1, with limits enforced."
        echo "ClusterName=$LIMITS_CLUSTER"
        common_conf "$LIMITS_STATE" "$LIMITS_LOGS"
        cat <<EOF
SlurmctldPort=$LIMITS_CTLD_PORT
SlurmdSpoolDir=$LIMITS_STATE/d
SlurmdPidFile=$LIMITS_STATE/slurmd.pid
SlurmdLogFile=$LIMITS_LOGS/slurmd.log
MaxArraySize=$MAX_ARRAY
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations,limits,qos
JobAcctGatherType=jobacct_gather/none
NodeName=l1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$LIMITS_NODE_PORT CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=l1 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
    } >"$LIMITS_CONF"
}

# The limits cluster in the accounting database: the cluster, root's association on it,
# and the QOS that holds the submit limit, root's default there.
limits_accounts() {
    sacctmgr -n -P list cluster format=cluster | grep -qx "$LIMITS_CLUSTER" \
        || sacctmgr -i add cluster "$LIMITS_CLUSTER" >/dev/null
    sacctmgr -n -P show qos format=name | grep -qx "$LIMITS_QOS" \
        || sacctmgr -i add qos "$LIMITS_QOS" >/dev/null
    sacctmgr -i modify qos "$LIMITS_QOS" set MaxSubmitJobsPerUser="$MAX_SUBMIT" >/dev/null || true
    sacctmgr -n -P show assoc where cluster="$LIMITS_CLUSTER" user=root format=user | grep -qx root \
        || sacctmgr -i add user root account=root cluster="$LIMITS_CLUSTER" >/dev/null
    sacctmgr -i modify user root where cluster="$LIMITS_CLUSTER" set qos=normal,"$LIMITS_QOS" \
        defaultqos="$LIMITS_QOS" >/dev/null || true
}

start_limits() {
    if ! sacctmgr -n list cluster >/dev/null 2>&1; then
        echo "the limits cluster needs accounting: run RCPF_SLURM_ACCOUNTING=1 $0 start first" >&2
        exit 1
    fi
    install_packages
    write_limits_conf
    start_munge
    limits_accounts
    export SLURM_CONF=$LIMITS_CONF
    running "$LIMITS_STATE/slurmctld.pid" || slurmctld -f "$LIMITS_CONF"
    running "$LIMITS_STATE/slurmd.pid" || slurmd -f "$LIMITS_CONF" -N l1
    wait_up l1 1 "$LIMITS_LOGS"
}

stop_limits() {
    if command -v scontrol >/dev/null && running "$LIMITS_STATE/slurmctld.pid"; then
        SLURM_CONF=$LIMITS_CONF scontrol shutdown >/dev/null 2>&1 || true
    fi
    stop_daemons "$LIMITS_STATE/slurmd.pid" "$LIMITS_STATE/slurmctld.pid"
    echo "limits slurm stopped"
}

# Wait for each daemon whose pid file is given to end (scontrol shutdown asked it to);
# kill the ones that do not.
stop_daemons() {
    for pidfile in "$@"; do
        for _ in $(seq 1 20); do running "$pidfile" || break; sleep 0.25; done
        if running "$pidfile"; then kill "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null || true; fi
    done
}

stop() {
    if command -v scontrol >/dev/null && running "$STATE/slurmctld.pid"; then
        scontrol shutdown >/dev/null 2>&1 || true
    fi
    stop_daemons "$STATE/slurmd.pid" "$STATE/slurmctld.pid"
    # The accounting daemons, where an accounting start left them running.
    for pidfile in "$STATE/slurmdbd.pid" "$STATE/mysql/mariadb.pid"; do
        if running "$pidfile"; then
            kill "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null || true
            for _ in $(seq 1 40); do running "$pidfile" || break; sleep 0.25; done
        fi
    done
    if running /run/munge/munged.pid; then kill "$(cat /run/munge/munged.pid)"; fi
    echo "slurm stopped"
}

status() {
    for pidfile in "$STATE/slurmctld.pid" "$STATE/slurmd.pid" "$STATE/slurmdbd.pid" "$STATE/mysql/mariadb.pid"; do
        if running "$pidfile"; then echo "$(basename "$pidfile" .pid): running"; else echo "$(basename "$pidfile" .pid): stopped"; fi
    done
    sinfo 2>/dev/null || true
    if running "$TWO_STATE/slurmctld.pid"; then
        echo "two-node cluster (SLURM_CONF=$TWO_CONF):"
        SLURM_CONF=$TWO_CONF sinfo 2>/dev/null || true
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    start-two-node) start_two_node ;;
    stop-two-node) stop_two_node ;;
    start-limits) start_limits ;;
    stop-limits) stop_limits ;;
    *) echo "usage: $0 start|stop|status|start-two-node|stop-two-node|start-limits|stop-limits" >&2; exit 2 ;;
esac
