#!/usr/bin/env bash
# The one installer (README, .ci/run, Vagrantfile). Idempotent: safe to run again.
# Debian 12 / Ubuntu 22.04+: apt packages, Open vSwitch running, a .venv made from the
# system Python with --system-site-packages (Debian's `mininet` library lives there),
# then the project with its pinned Python dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/install.sh must run as root (apt, Open vSwitch): use sudo." >&2
  exit 1
fi

APT_PACKAGES=(
  mininet openvswitch-switch      # emulator library + mnexec, and the switches
  iperf3 tcpdump ethtool iputils-ping iproute2 procps  # tools the runner calls in hosts
  python3 python3-venv python3-pip make
  tshark  # Wireshark's TCP analysis: a root test checks our retransmission counts with it
  chromium  # headless: tests open report.html/compare.html offline as a reader would
  clang llvm libbpf-dev bpftool  # the BPF programs (DCTCP, ECN marking) built below
)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "==> apt-get install ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Open vSwitch's userspace datapath sends the packets of every switch port through one
# packet socket, whose send buffer (net.core.wmem_default when ovs-vswitchd opens it)
# bounds the packets queued at all switch queues together; the kernel's default, 208 KiB,
# holds about 92 full-size frames, and a send past it is dropped where tc does not count
# (incastlab/ovs_buffer.py). Set it before Open vSwitch starts, and at every boot.
# Each switch port's receive socket (opened with every fabric) gets net.core.rmem_default:
# 208 KiB held 12 jumbo frames, and while ovs-vswitchd caught up a port lost packets there,
# uncounted by tc; 4 MiB holds ~1,800 standard or ~240 jumbo frames.
SEND_BUFFER=67108864     # incastlab.ovs_buffer.INSTALL_BYTES
RECEIVE_BUFFER=4194304   # incastlab.ovs_buffer.INSTALL_RECEIVE_BYTES
mkdir -p /etc/sysctl.d
printf '%s\n' "# incastlab: Open vSwitch's packet socket buffers (scripts/install.sh)" \
  "net.core.wmem_default = $SEND_BUFFER" "net.core.rmem_default = $RECEIVE_BUFFER" \
  > /etc/sysctl.d/60-incastlab.conf
sysctl -q -w net.core.wmem_default="$SEND_BUFFER"
sysctl -q -w net.core.rmem_default="$RECEIVE_BUFFER"

ovs_send_buffer() {  # bytes of ovs-vswitchd's unbound packet socket; empty before it exists
  ss -0 -m -p -n 2>/dev/null | grep 'ovs-vswitchd' | grep -E ':\*[[:space:]]+\*' \
    | grep -o "tb[0-9]*" | head -n 1 | tr -d tb || true
}

# Open vSwitch: systemd where it runs, ovs-ctl where there is no init system.
ovs_service() {  # start | restart
  if [ -d /run/systemd/system ]; then
    systemctl "$1" openvswitch-switch
  else
    # (a "ulimit: error setting limit" warning here is harmless)
    /usr/share/openvswitch/scripts/ovs-ctl "$1" --system-id=random --no-monitor
  fi
  ovs-vsctl --timeout=5 show >/dev/null
}
if ! ovs-vsctl --timeout=3 show >/dev/null 2>&1; then
  echo "==> starting Open vSwitch"
  ovs_service start
fi
ovs-vsctl --timeout=5 show >/dev/null
have=$(ovs_send_buffer)
if [ -n "$have" ] && [ "$have" -lt "$SEND_BUFFER" ]; then
  bridges=$(ovs-vsctl --timeout=5 list-br) || bridges="(unknown)"
  if [ -z "$bridges" ]; then
    echo "==> restarting Open vSwitch (its packet send buffer is $have bytes)"
    ovs_service restart
  else
    echo "==> note: Open vSwitch's packet send buffer is $have bytes; restart Open vSwitch" \
         "when its bridges are not in use (runs refuse queues it cannot hold)"
  fi
fi

# The venv must come from the system Python that Debian's mininet package serves.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import mininet.net' 2>/dev/null; then
  echo "==> creating .venv (system Python, --system-site-packages)"
  rm -rf .venv
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.incastlab-installed
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ]; then
  echo "==> pip install -e .[dev] (torch==2.13.0 CPU build, os-ken, pandas, ...)"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'
  touch "$stamp"
fi
# The kernel of this machine kind lacks tcp_dctcp and RED: the project's own BPF programs
# stand in for them (incastlab/bpf/), built from source here.
bash scripts/build_bpf.sh
.venv/bin/python -c 'import mininet.net, os_ken, torch, pandas, incastlab.topologies' \
  || { echo "install check failed: an import does not work" >&2; exit 1; }
echo "==> incastlab installed: .venv/bin/incastlab"
