"""incastlab: analysis — run directory in, reconciled numbers and a report out.

Reads only the files of a run directory (docs/run-directory.md); never imports Mininet
or os-ken, so a report can be rebuilt on any machine. See analysis/README.md.

Entry points:
    build_report(run_dir, out_dir=None) -> {'metrics', 'summary', 'report': Path,
                                            'plots': [Path]}
    compare_runs(run_dirs, out_dir) -> {'report', 'table', 'metrics': Path,
                                        'plots': [Path]}
    analyse(run_dir) -> Analysis (every table and metric, nothing written)
    read_pcap(path) -> DataFrame (one row per captured frame)
"""
from .pcap import PcapError, parse_pcap_bytes, read_pcap

__all__ = ["analyse", "build_report", "compare_runs", "read_pcap", "parse_pcap_bytes",
           "PcapError"]


def __getattr__(name):
    # the report side imports matplotlib: load it only when it is asked for
    if name in ("analyse", "build_report"):
        from . import report
        return getattr(report, name)
    if name == "compare_runs":
        from .compare import compare_runs
        return compare_runs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
