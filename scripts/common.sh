# Shell helpers shared by scripts/setup, scripts/demo, scripts/test, ./Install and
# ./Remove.  Source it with $ROOT set to the checkout root.

# a clean PATH: the system tools first (a pyenv python3 earlier on PATH lacks python3-pcp)
PATH=/usr/lib/pcp/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

VENV="$ROOT/.venv"

# in every root scripts/matrix builds: no matrix is started inside one (scripts/matrix, .ci/run)
MATRIX_ROOT_MARKER=/etc/pmda-mmv-matrix-root

say() { echo "== $*"; }
die() { echo "${0##*/}: $*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" = 0 ] || die "must be run as root (it changes the system PCP setup)"
}

# load /etc/pcp.conf into the environment (PCP_PMDAS_DIR, PCP_TMP_DIR, ...)
pcp_env() {
    [ -f /etc/pcp.env ] || die "PCP is not installed (no /etc/pcp.env): run scripts/setup"
    unset PCP_ENV_DONE
    . /etc/pcp.env
    # without systemd as init, PCP's scripts must (re)start pmcd through $PCP_RC_DIR
    if [ ! -d /run/systemd/system ]; then
	PCP_SYSTEMDUNIT_DIR=/nonexistent-pmda-mmv
	export PCP_SYSTEMDUNIT_DIR
    fi
}

pmcd_running() {
    pmcd_wait -h local: -t 2 >/dev/null 2>&1
}

# start the system pmcd through its rc script when it is not running (no systemd here)
start_pmcd() {
    pmcd_running && return 0
    # the rc script's start first stops pmcd, and without a pid file it signals every
    # process named pmcd: refuse when others (private pmcds of tests) are running
    if pgrep -x pmcd >/dev/null; then
	die "the system pmcd is not answering but other pmcd processes run ($(pgrep -x pmcd |
	    tr '\n' ' ')); stop them, or start the system pmcd yourself ($PCP_RC_DIR/pmcd start)"
    fi
    say "starting pmcd"
    env -i PATH="$PATH" LANG=C.UTF-8 HOME=/root "$PCP_RC_DIR/pmcd" start \
	|| die "$PCP_RC_DIR/pmcd start failed"
    pmcd_wait -h local: -t 60 || die "pmcd did not start; see $PCP_LOG_DIR/pmcd/pmcd.log"
}

# the venv python imports python3-pcp, watchdog, psutil and pmda_mmv
venv_complete() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c \
	'import pcp.pmda, watchdog, psutil, pmda_mmv' >/dev/null 2>&1
}

# name the venv's python pmdammv (and pmdapmproxy), as `pmda-mmv install` does: the
# launcher runs it under that name (see deploy/pmdas/mmv/pmdammv)
name_venv_python() {
    [ -x "$VENV/bin/python" ] || die "no venv at $VENV: run scripts/setup"
    ln -sfn python "$VENV/bin/pmdammv"
    ln -sfn python "$VENV/bin/pmdapmproxy"
}
