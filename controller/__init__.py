"""incastlab.controller: the SDN controller (os-ken, OpenFlow 1.3), one policy a file.

    python -m incastlab.controller \\
        --policy {single,ecmp,spread,adaptive,spray,flowlet,app,external} \\
        --fabric RUN/fabric.json --out RUN [--port 6653] [--poll-interval 0.5] \\
        [--spine J] [--idle-timeout S] [--hash-fields F,F,...] [--app FILE ...] \\
        [--controller 127.0.0.1:PORT]

Modules: registry.py (the policy registry and option validation), paths.py (path
computation on incastlab.topologies.fabricmap, the typed fabric.json), records.py (CSVs,
ready file, port-load window), ovs_ext.py (OVS's select-group selection method
property) — none of them imports os-ken; base.py (shared os-ken plumbing); single.py,
ecmp.py, spread.py, adaptive.py (the policies); __main__.py (the launcher).
For the user's own controller code: ryu_compat.py (the `ryu.*` → os-ken import alias the
launcher installs for `--policy app`), observer.py (readiness and port statistics beside
an app or an external controller, never touching flow tables), appkit.py (the fabric map
for apps that want it), examples/ (a Ryu-tutorial-style learning switch).

Writes into RUN: controller.log, controller_ready.json, port_stats.csv, flow_paths.csv
(formats in docs/run-directory.md).
"""
