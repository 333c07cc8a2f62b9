"""incastlab: analysis — run directory in, reconciled numbers and a report out.

Reads only the files of a run directory (docs/run-directory.md); never imports Mininet
or os-ken, so a report can be rebuilt on any machine.

Entry points:
    build_report(run_dir, out_dir=None) -> {'metrics', 'summary', 'report': Path,
                                            'plots': [Path]}
    compare_runs(run_dirs, out_dir) -> {'table', 'report': Path, 'plots': [Path]}
    read_pcap(path) -> DataFrame (one row per captured frame)
"""
from .compare import compare_runs
from .pcap import PcapError, parse_pcap_bytes, read_pcap
from .report import analyse, build_report

__all__ = ["analyse", "build_report", "compare_runs", "read_pcap", "parse_pcap_bytes",
           "PcapError"]
