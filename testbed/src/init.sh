#!/bin/sh
# /init of the pathpilot testbed VM (busybox sh). Sets the guest up, then
# serves commands from the host over the virtio-serial port "pp.agent".
#
# Protocol, one line per message (see testbed/src/machine.rs):
#   host -> guest: HELLO | C <id> <timeout-s> <base64 script> | OFF
#   guest -> host: @@READY <uptime>
#                  @@R <id> <rc> / @@O / <base64 stdout> / @@E / <base64 stderr> / @@Z <id>
# base64 keeps the framing binary-safe: payload lines never start with '@'.
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export DM_DISABLE_UDEV=1 HOME=/root TERM=linux
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm /dev/mapper /tmp /run /share
mount -t devpts devpts /dev/pts 2>/dev/null
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t bpf bpffs /sys/fs/bpf 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
SHELL_MODE=; SHARE=; DEBUG=
for a in $(cat /proc/cmdline); do
  case "$a" in
    pp.shell=1) SHELL_MODE=1;;
    pp.share=1) SHARE=1;;
    pp.debug=1) DEBUG=1;;
  esac
done
[ -n "$DEBUG" ] && echo "pp-init: $(cut -d' ' -f1 /proc/uptime) s: /init started"
for m in $(cat /etc/pathpilot-testbed/modules); do
  modprobe "$m" 2>/dev/null || echo "pp-init: modprobe $m failed"
  [ -n "$DEBUG" ] && echo "pp-init: $(cut -d' ' -f1 /proc/uptime) s: loaded $m"
done
if [ -n "$SHARE" ]; then
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none share /share \
    || echo "pp-init: cannot mount the 9p share at /share"
fi
PORT=
i=0
while [ -z "$PORT" ] && [ $i -lt 100 ]; do
  for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name" 2>/dev/null)" = pp.agent ] && PORT=/dev/${p##*/}
  done
  [ -z "$PORT" ] && sleep 0.05
  i=$((i + 1))
done
echo "pp-init: ready at $(cut -d' ' -f1 /proc/uptime) s; disks: $(ls /sys/block | grep '^sd' | tr '\n' ' ')agent: ${PORT:-none}"

agent() {
  mkdir -p /tmp/.pp
  served=
  while :; do
    exec 3<>"$PORT"
    while IFS=' ' read -r kind id t arg <&3; do
      served=1
      case "$kind" in
      HELLO) echo "@@READY $(cut -d' ' -f1 /proc/uptime)" >&3 ;;
      C)
        echo "$arg" | base64 -d >/tmp/.pp/cmd
        (cd / && exec timeout -s KILL "$t" sh /tmp/.pp/cmd) </dev/null >/tmp/.pp/out 2>/tmp/.pp/err 3>&-
        rc=$?
        { echo "@@R $id $rc"; echo "@@O"; base64 /tmp/.pp/out; echo "@@E"; base64 /tmp/.pp/err; echo "@@Z $id"; } >&3
        ;;
      OFF) exec 3>&-; return ;;
      esac
    done
    exec 3>&-
    # EOF before anything was served: the host end is not open yet. EOF
    # after: the host went away (test process killed), so power off rather
    # than leave an orphaned VM running.
    [ -n "$served" ] && return
    sleep 0.05
  done
}

if [ -n "$SHELL_MODE" ]; then
  [ -n "$PORT" ] && agent &
  echo "pp-init: interactive shell; exit (or Ctrl-D) powers off"
  setsid cttyhack sh -l
elif [ -n "$PORT" ]; then
  agent
else
  echo "pp-init: no agent port; powering off"
fi
sync
# With QEMU's -no-reboot, a reboot makes QEMU exit: no ACPI needed.
reboot -f
