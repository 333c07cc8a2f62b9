#!/bin/sh
# Screenshot a report (report.html or compare.html) with headless Chromium, offline.
#
#   scripts/screenshot.sh REPORT.html OUT.png [WIDTH] [HEIGHT]
#
# WIDTH defaults to 1400 px (the width the reports are checked at: no horizontal
# overflow there), HEIGHT to 4000 px (a long strip of the page). Needs Debian's
# `chromium` package (apt-get install -y chromium). Every host name resolves to
# nothing (--host-resolver-rules), so a report that needed the network would show it:
# reports inline everything they draw with (plotly's JS, images, the fabric picture).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 REPORT.html OUT.png [WIDTH] [HEIGHT]" >&2; exit 2; }
report=$(realpath "$1")
out=$(realpath -m "$2")
width=${3:-1400}
height=${4:-4000}
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "$0: chromium not found (apt-get install -y chromium)" >&2; exit 2; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# --virtual-time-budget lets plotly draw before the shot; --no-sandbox: we run as root
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$profile" --host-resolver-rules="MAP * ~NOTFOUND" \
    --window-size="$width,$height" --virtual-time-budget=10000 \
    --screenshot="$out" "file://$report" >/dev/null 2>&1
[ -s "$out" ] || { echo "$0: no screenshot written" >&2; exit 1; }
echo "$out"
