#!/usr/bin/env bash
# Builds the Debian package (scripts/build-deb.sh) and checks it the way an
# operator's host meets it: lintian, install with apt-get, the unit
# verified and its sandbox scored, the config checked as the tickgate user,
# man pages and completions in place, the daemon answering PONG as the
# tickgate user with the installed config, the C library and the Python
# client answering as the socket does, then remove (config and fills
# database kept) and purge (nothing of the package left). Before the
# install, the daemon runs once as root with the example config, as a
# user following the README would have: the package must take over the
# root-owned /var/lib/tickgate and /run/tickgate it leaves, and its purge
# must give back what was there before it.
#
# Runs as root on a machine it may change (CI): it installs lintian, man-db,
# socat, pkg-config and python3 when missing, and installs, removes and
# purges the package. Exits non-zero at the first check that fails.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }
ok() { printf 'ok: %s\n' "$*"; }
fail() {
  printf 'FAILED: %s\n' "$*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root: the script installs and purges the package"
export DEBIAN_FRONTEND=noninteractive
# The Python client is imported below as an operator would, compiled files
# and all: their removal with the package is checked too.
unset PYTHONDONTWRITEBYTECODE

missing=()
command -v lintian >/dev/null || missing+=(lintian)
command -v man >/dev/null || missing+=(man-db)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v socat >/dev/null || missing+=(socat)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v cc >/dev/null || missing+=(gcc)
[ -x /usr/bin/python3 ] || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if dpkg-query -W -f='${Status}' tickgate 2>/dev/null | grep -q installed; then
  fail "a tickgate package is installed already: purge it first (apt-get purge tickgate)"
fi

for path in /var/lib/tickgate /run/tickgate; do
  [ -e "$path" ] && fail "$path exists already: this check makes it as a run as root would, and removes it at the end"
done

work="$(mktemp -d /tmp/tickgate-package-check.XXXXXX)"
daemon_pid=""
root_pid=""
cleanup() {
  for pid in "$daemon_pid" "$root_pid"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
}
trap cleanup EXIT

step "build the package (scripts/build-deb.sh)"
deb="$(scripts/build-deb.sh)"
deb="$(realpath "$deb")"
[ -f "$deb" ] || fail "build-deb.sh printed $deb, which is not a file"
case "$(basename "$deb")" in
  tickgate_*_amd64.deb) ok "built $deb" ;;
  *) fail "unexpected package name $(basename "$deb")" ;;
esac
dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
dpkg-deb --contents "$deb" | awk '{print $1, $2, $6, $7, $8}' >"$work/contents"
cat "$work/contents"

step "package layout"
for path in ./usr/bin/tickgate ./etc/tickgate/tickgate.toml ./usr/share/man/man1/tickgate.1.gz \
  ./usr/share/man/man1/tickgate-run.1.gz ./usr/share/man/man1/tickgate-fills-consume-kafka.1.gz \
  ./usr/share/bash-completion/completions/tickgate ./usr/share/zsh/vendor-completions/_tickgate \
  ./usr/share/fish/vendor_completions.d/tickgate.fish ./usr/lib/tickgate/libtickgate.so \
  ./usr/include/tickgate.h ./usr/share/pkgconfig/tickgate.pc ./usr/lib/python3/dist-packages/tickgate.py \
  ./usr/share/tickgate/grafana-dashboard.json ./usr/share/doc/tickgate/README.md \
  ./usr/share/doc/tickgate/docs/operations.md ./usr/share/doc/tickgate/copyright \
  ./usr/lib/sysusers.d/tickgate.conf; do
  grep -q " $path\$" "$work/contents" || grep -q " $path " "$work/contents" || fail "$path is not in the package"
done
ok "binary, config, man pages, completions, C library and header, Python client, dashboard, docs, sysusers"
unit_in_deb="$(awk '{print $3}' "$work/contents" | grep -E '^\./(usr/)?lib/systemd/system/tickgate\.service$')" \
  || fail "no tickgate.service in the package"
unit="${unit_in_deb#.}"
ok "unit at $unit"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$work/conffiles"
[ "$(cat "$work/conffiles")" = /etc/tickgate/tickgate.toml ] \
  || fail "conffiles should be /etc/tickgate/tickgate.toml alone, got: $(cat "$work/conffiles")"
ok "conffiles: /etc/tickgate/tickgate.toml"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./postinst >"$work/postinst"
grep -q 'systemd-sysusers.*tickgate.conf' "$work/postinst" || fail "postinst does not create the user (systemd-sysusers)"
grep -q 'deb-systemd-helper enable tickgate.service' "$work/postinst" || fail "postinst does not enable the unit"
grep -q 'deb-systemd-invoke try-restart tickgate.service' "$work/postinst" || fail "postinst does not restart the unit on upgrade"
if grep -Eq 'deb-systemd-invoke (start|\$_dh_action)' "$work/postinst"; then fail "postinst starts the unit"; fi
ok "postinst: user created, unit enabled, not started on install, try-restart on upgrade"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" ./usr/bin/tickgate ./usr/lib/tickgate/libtickgate.so
for f in "$work/usr/bin/tickgate" "$work/usr/lib/tickgate/libtickgate.so"; do
  if readelf -S --wide "$f" | grep -Eq '\.debug_(info|line|abbrev|str) '; then fail "${f#"$work"} keeps debug sections"; fi
done
ok "binary and library stripped"

step "lintian (fails on errors)"
lintian --fail-on error --info --display-info "$deb" || fail "lintian found errors"
ok "lintian: no errors"

ask() { printf '%s\n' "$1" | socat -t 2 - UNIX-CONNECT:/run/tickgate/gate.sock 2>/dev/null || true; }

step "a run as root before the package: target/release/tickgate run --config config/tickgate.toml"
# The README's commands run as root leave /var/lib/tickgate/fills.db and
# /run/tickgate (gate.sock, state.shm) owned by root.
(umask 0022 && exec target/release/tickgate run --config config/tickgate.toml) >"$work/root-run.log" 2>&1 &
root_pid=$!
pong=""
for _ in $(seq 1 100); do
  pong="$(ask PING)"
  [ "$pong" = PONG ] && break
  kill -0 "$root_pid" 2>/dev/null || break
  sleep 0.2
done
[ "$pong" = PONG ] || {
  cat "$work/root-run.log"
  fail "the run as root did not answer PONG"
}
kill -TERM "$root_pid"
wait "$root_pid" || {
  cat "$work/root-run.log"
  fail "the run as root did not stop cleanly"
}
root_pid=""
[ -f /var/lib/tickgate/fills.db ] || fail "the run as root made no /var/lib/tickgate/fills.db"
[ -f /run/tickgate/state.shm ] || fail "the run as root left no /run/tickgate/state.shm"
find /var/lib/tickgate /run/tickgate -printf '%U:%G %m %p\n' | sort | tee "$work/root-state"
grep -q '^0:0 .* /var/lib/tickgate/fills.db$' "$work/root-state" || fail "fills.db is not root's"
ok "root-owned state left in /var/lib/tickgate and /run/tickgate"
find /var/lib/tickgate -printf '%U:%G %m %p\n' | sort >"$work/state-before"

# What the host has before the package, to compare after the purge. /run,
# /tmp, logs, caches and package databases change by themselves; the
# package's own paths are checked one by one below as well.
snapshot() {
  find /etc /usr /opt /var -xdev \
    \( -path /var/log -o -path /var/cache -o -path /var/tmp -o -path /var/lib/apt -o -path /var/lib/dpkg \
    -o -path /var/lib/postgresql -o -path /var/lib/nats-server -o -path /var/lib/redis \
    -o -path /var/lib/systemd/timers -o -path /var/mail -o -path /var/spool \) -prune -o -print | sort
}
snapshot >"$work/before"
grep -q '^tickgate:' /etc/passwd && had_user=1 || had_user=0

step "apt-get install $deb"
apt-get install -y -qq "$deb" >"$work/apt-install.log" 2>&1 || {
  cat "$work/apt-install.log"
  fail "apt-get install"
}
dpkg-query -W -f='${Package} ${Version} ${Status}\n' tickgate
dpkg -L tickgate | sort >"$work/installed"
[ -x /usr/bin/tickgate ] || fail "/usr/bin/tickgate missing"
getent passwd tickgate >/dev/null || fail "no tickgate user"
getent group tickgate >/dev/null || fail "no tickgate group"
ok "user $(getent passwd tickgate)"
[ "$(stat -c '%U:%G %a' /etc/tickgate/tickgate.toml)" = "root:tickgate 640" ] \
  || fail "/etc/tickgate/tickgate.toml is $(stat -c '%U:%G %a' /etc/tickgate/tickgate.toml), not root:tickgate 640"
ok "/etc/tickgate/tickgate.toml root:tickgate 0640"
[ "$(stat -c '%U:%G %a' /var/lib/tickgate)" = "tickgate:tickgate 750" ] \
  || fail "/var/lib/tickgate is $(stat -c '%U:%G %a' /var/lib/tickgate 2>&1)"
ok "/var/lib/tickgate tickgate:tickgate 0750"
for f in /var/lib/tickgate/fills.db /run/tickgate /run/tickgate/state.shm; do
  [ "$(stat -c '%U:%G' "$f")" = tickgate:tickgate ] \
    || fail "$f is $(stat -c '%U:%G' "$f"): the postinst did not take over what the run as root left"
done
ok "the postinst gave the run as root's fills.db and /run/tickgate to the tickgate user"
[ -L /etc/systemd/system/multi-user.target.wants/tickgate.service ] || fail "the unit is not enabled"
ok "unit enabled (multi-user.target.wants)"

systemd_running=0
[ -d /run/systemd/system ] && systemd_running=1
# A policy-rc.d that answers 101 (Docker images ship one) forbids the
# maintainer scripts' service actions: then the upgrade's restart and the
# remove's stop cannot happen, and are checked as not happening.
invoke_allowed=1
if [ -x /usr/sbin/policy-rc.d ]; then
  rc=0
  /usr/sbin/policy-rc.d tickgate.service restart >/dev/null 2>&1 || rc=$?
  if [ $rc = 101 ]; then invoke_allowed=0; fi
fi
if [ $systemd_running = 1 ]; then
  systemctl is-enabled tickgate.service
  if systemctl is-active --quiet tickgate.service; then fail "the service was started on install"; fi
  ok "systemd: enabled, not started"
fi

step "systemd-analyze verify $unit"
systemd-analyze verify "$unit"
ok "unit verifies"
step "systemd-analyze security (exposure at most 1.4, as measured when the unit was written)"
systemd-analyze security --offline=true --threshold=14 "$unit" | tail -n 1
ok "sandbox exposure within 1.4"

step "man pages and completions"
man -w tickgate
man -w tickgate-run
man -w tickgate-fills-push
man tickgate-run 2>/dev/null | grep -q -- '--check-config' || fail "man tickgate-run has no --check-config"
ok "man -w finds the pages; man tickgate-run documents --check-config"
for f in /usr/share/bash-completion/completions/tickgate /usr/share/zsh/vendor-completions/_tickgate \
  /usr/share/fish/vendor_completions.d/tickgate.fish; do
  [ -s "$f" ] || fail "$f missing or empty"
  grep -q 'consume-kafka' "$f" || fail "$f does not complete fills consume-kafka"
done
bash -n /usr/share/bash-completion/completions/tickgate
bash -c 'source /usr/share/bash-completion/completions/tickgate && complete -p tickgate' \
  || fail "the bash completion does not register for tickgate"
ok "completions for bash, zsh and fish"

# /run/tickgate is systemd's RuntimeDirectory=: made when the unit starts,
# removed when it stops. Before a start (or without systemd) the check and
# the daemon get it as systemd makes it.
# This check made /run/tickgate (the run as root): removed at the end.
runtime_made=1
if [ ! -d /run/tickgate ]; then
  install -d -o tickgate -g tickgate -m 0750 /run/tickgate
  runtime_made=1
fi
as_tickgate() { setpriv --reuid=tickgate --regid=tickgate --init-groups --reset-env -- "$@"; }

step "tickgate run --config /etc/tickgate/tickgate.toml --check-config, as the tickgate user"
(cd / && as_tickgate /usr/bin/tickgate run --config /etc/tickgate/tickgate.toml --check-config)
ok "the installed config passes its check as the tickgate user"

step "the daemon answers PONG"
if [ $systemd_running = 1 ]; then
  systemctl start tickgate.service
  systemctl is-active tickgate.service
else
  echo "systemd is not PID 1 here: starting /usr/bin/tickgate as the tickgate user, as the unit would"
  (
    cd /var/lib/tickgate
    umask 0077
    exec setpriv --reuid=tickgate --regid=tickgate --init-groups --reset-env -- \
      /usr/bin/tickgate run --config /etc/tickgate/tickgate.toml
  ) >"$work/daemon.log" 2>&1 &
  daemon_pid=$!
fi
wait_pong() {
  local pong=""
  for _ in $(seq 1 100); do
    pong="$(ask PING)"
    [ "$pong" = PONG ] && return 0
    if [ -n "$daemon_pid" ] && ! kill -0 "$daemon_pid" 2>/dev/null; then break; fi
    sleep 0.2
  done
  if [ -n "$daemon_pid" ]; then cat "$work/daemon.log"; fi
  if [ $systemd_running = 1 ]; then journalctl -u tickgate.service --no-pager -n 50 || true; fi
  fail "no PONG from /run/tickgate/gate.sock (got '${pong}')"
}
wait_pong
ok "PING -> PONG on /run/tickgate/gate.sock"
stat -c '%n %U:%G %a' /run/tickgate/gate.sock /run/tickgate/state.shm

step "the C library (pkg-config, header) and the Python client answer as the socket does"
[ "$(pkg-config --modversion tickgate)" = "$(dpkg-query -W -f='${Version}' tickgate | sed 's/-[^-]*$//')" ] \
  || fail "pkg-config --modversion tickgate is not the package's version"
# shellcheck disable=SC2046
cc -o "$work/check" clients/c/tests/check.c $(pkg-config --cflags --libs tickgate)
chmod 0755 "$work" "$work/check"
as_tickgate "$work/check" /run/tickgate/state.shm /run/tickgate/gate.sock "$(date +%s%N)" EURUSD NOSUCH \
  || fail "the installed libtickgate and the socket disagree"
ok "libtickgate (linked by pkg-config flags) answers EURUSD and NOSUCH as the socket does"
want="$(ask 'CHECK EURUSD')"
got="$(cd / && /usr/bin/python3 -c 'import tickgate; print(tickgate.Client().check("EURUSD").line, end="")')"
[ -n "$want" ] && [ "$got" = "$want" ] || fail "the Python client answered '$got', the socket '$want'"
ok "python3 -c 'import tickgate' (the packaged client and library): $got"
ls /usr/lib/python3/dist-packages/__pycache__/tickgate.cpython-*.pyc \
  || fail "importing the client as root wrote no compiled file (the remove check below would prove nothing)"

if [ $systemd_running = 1 ]; then
  step "apt-get install --reinstall (configured as an upgrade): the running service is restarted"
  pid_before="$(systemctl show -p MainPID --value tickgate.service)"
  apt-get install -y -qq --reinstall "$deb" >"$work/apt-reinstall.log" 2>&1 || {
    cat "$work/apt-reinstall.log"
    fail "apt-get install --reinstall"
  }
  wait_pong
  pid_after="$(systemctl show -p MainPID --value tickgate.service)"
  if [ $invoke_allowed = 1 ]; then
    [ "$pid_after" != 0 ] && [ "$pid_after" != "$pid_before" ] \
      || fail "the service was not restarted by the upgrade (main pid $pid_before, then $pid_after)"
    ok "restarted: main pid $pid_before, then $pid_after; PONG"
  else
    [ "$pid_after" = "$pid_before" ] || fail "the service restarted although policy-rc.d forbids it"
    echo "note: /usr/sbin/policy-rc.d forbids service actions here: the restart on upgrade is not exercised"
    ok "the service kept running through the upgrade (main pid $pid_after); PONG"
    systemctl stop tickgate.service
  fi
else
  step "stop"
  kill -TERM "$daemon_pid"
  rc=0
  wait "$daemon_pid" || rc=$?
  daemon_pid=""
  [ $rc = 0 ] || {
    cat "$work/daemon.log"
    fail "the daemon exited $rc on SIGTERM"
  }
  [ -e /run/tickgate/gate.sock ] && fail "the gate socket is left after a clean stop"
  if [ $runtime_made = 1 ]; then rm -rf /run/tickgate; fi
  ok "stopped cleanly"
fi
[ -f /var/lib/tickgate/fills.db ] || fail "the daemon made no /var/lib/tickgate/fills.db"
ok "fills database $(stat -c '%n %U:%G %a' /var/lib/tickgate/fills.db)"

step "apt-get remove tickgate: the config and the fills database stay"
apt-get remove -y -qq tickgate >"$work/apt-remove.log" 2>&1 || {
  cat "$work/apt-remove.log"
  fail "apt-get remove"
}
if [ $systemd_running = 1 ] && [ $invoke_allowed = 1 ]; then
  if systemctl is-active --quiet tickgate.service; then fail "remove did not stop the service"; fi
  [ -e /run/tickgate ] && fail "/run/tickgate left after the service stopped"
  ok "remove stopped the service and systemd removed /run/tickgate"
fi
[ -e /usr/bin/tickgate ] && fail "/usr/bin/tickgate left after remove"
[ -e "$unit" ] && fail "$unit left after remove"
[ -f /etc/tickgate/tickgate.toml ] || fail "remove deleted the config"
[ -f /var/lib/tickgate/fills.db ] || fail "remove deleted the fills database"
ls /usr/lib/python3/dist-packages/__pycache__/tickgate.* 2>/dev/null && fail "compiled Python client left after remove"
ok "binary, unit and compiled Python gone; /etc/tickgate/tickgate.toml and /var/lib/tickgate/fills.db kept"

step "apt-get purge tickgate: nothing of the package is left"
apt-get purge -y -qq tickgate >"$work/apt-purge.log" 2>&1 || {
  cat "$work/apt-purge.log"
  fail "apt-get purge"
}
left=0
while read -r path; do
  [ -n "$path" ] || continue
  if [ -e "$path" ] && ! grep -qxF "$path" "$work/before"; then
    echo "left: $path"
    left=1
  fi
done <"$work/installed"
# /var/lib/tickgate was there before the package (the run as root): the
# purge keeps what it held then, owners and modes as they were.
find /var/lib/tickgate -printf '%U:%G %m %p\n' 2>/dev/null | sort >"$work/state-after" || true
if ! diff -u "$work/state-before" "$work/state-after"; then
  echo "left or taken: /var/lib/tickgate differs from before the install"
  left=1
fi
for path in /etc/tickgate /run/tickgate /etc/systemd/system/multi-user.target.wants/tickgate.service \
  /var/lib/systemd/deb-systemd-helper-enabled/tickgate.service.dsh-also \
  /var/lib/systemd/deb-systemd-helper-masked/tickgate.service; do
  if [ -e "$path" ]; then
    echo "left: $path"
    left=1
  fi
done
if dpkg-statoverride --list /etc/tickgate/tickgate.toml; then
  echo "left: the statoverride of /etc/tickgate/tickgate.toml"
  left=1
fi
snapshot >"$work/after"
if ! diff -u "$work/before" "$work/after" >"$work/diff"; then
  echo "the host's file list before install and after purge differ:"
  cat "$work/diff"
  left=1
fi
[ $left = 0 ] || fail "the purge left files of the package behind"
ok "every packaged path, /etc/tickgate, the unit's enablement and the statoverride are gone; /var/lib/tickgate holds what it held before the install, root's again; the file list of /etc /usr /opt /var equals the one before install"
rm -rf /var/lib/tickgate
if [ $had_user = 0 ] && getent passwd tickgate >/dev/null; then
  echo "note: the tickgate user and group stay after the purge, as Debian keeps system users (docs/operations.md)"
fi

rm -rf "$work"
step "package checks passed"
