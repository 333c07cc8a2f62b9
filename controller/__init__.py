"""incastlab.controller: the SDN controller (os-ken, OpenFlow 1.3), one policy a file.

    python -m incastlab.controller --policy {single,ecmp,spread,adaptive} \\
        --fabric RUN/fabric.json --out RUN [--port 6653] [--poll-interval 0.5] \\
        [--spine J] [--idle-timeout S] [--hash-fields F,F,...]

Modules: registry.py (the policy registry and option validation), paths.py (path
computation on incastlab.topologies.fabricmap, the typed fabric.json), records.py (CSVs,
ready file, port-load window), ovs_ext.py (OVS's select-group selection method
property) — none of them imports os-ken; base.py (shared os-ken plumbing); single.py,
ecmp.py, spread.py, adaptive.py (the policies); __main__.py (the launcher).

Writes into RUN: controller.log, controller_ready.json, port_stats.csv, flow_paths.csv
(formats in docs/run-directory.md).
"""
