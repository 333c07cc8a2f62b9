"""Packaging for incastlab.

The top-level folders are fixed by the design (see README, "Layout"); this file maps
them into one import namespace: topologies/ -> incastlab.topologies, and so on.

Pins and why:
- torch==2.13.0: the CPU build that lies on this machine kind's disk; any other
  version makes pip fetch a multi-GB CUDA build.
- os-ken (not ryu): Ryu 4.34 neither installs nor runs on Python >= 3.10
  (setuptools and eventlet breakage). os-ken is Ryu's maintained fork with the
  same app API (app_manager, ofp_event, set_ev_cls, ofproto_v1_3).
- mininet is NOT a pip dependency: Debian's `mininet` package provides the library
  for /usr/bin/python3 together with `mnexec`, and the venv is created with
  --system-site-packages so it sees it (PyPI has no matching mnexec).
"""
from setuptools import find_packages, setup

# The four folders mapped into the namespace; every package under them and under
# incastlab/ is found, not listed, so a new subpackage cannot be left out of the wheel.
SUBPACKAGES = ["topologies", "controller", "apps", "analysis"]
PACKAGES = find_packages(include=["incastlab", "incastlab.*"]) + [
    f"incastlab.{folder}{'.' + sub if sub else ''}"
    for folder in SUBPACKAGES for sub in ["", *find_packages(where=folder)]]

setup(
    name="incastlab",
    version="0.1.0",
    description="Packet-level emulation testbed for distributed deep-learning traffic",
    python_requires=">=3.11",  # tomllib; Debian 12 and Ubuntu 24.04 ship 3.11/3.12
    packages=PACKAGES,
    package_dir={"incastlab": "incastlab", **{f"incastlab.{n}": n for n in SUBPACKAGES}},
    include_package_data=True,
    install_requires=[
        "torch==2.13.0",
        "os-ken>=4.0,<5",
        "numpy>=1.24",
        "pandas>=2.0",
        "pyarrow>=14",
        "matplotlib>=3.7",
        "scikit-learn>=1.3",
        "scapy>=2.5",
        "tomli-w>=1.0",
        # interactive figures in report.html (zoom into 10 ms queue samples, hover a
        # flow); its JS is inlined into the report, so the page still opens offline
        "plotly>=5.18",
        # live progress on a terminal: phases, a bar per worker with time left
        "rich>=13",
    ],
    extras_require={
        "dev": ["pytest>=7.4", "ruff>=0.4", "dpkt>=1.9",
                # coverage of the unit and root tiers (docs/testing.md)
                "pytest-cov>=5",
                # property-based tests of the spec validator (fixed seed in the unit tier)
                "hypothesis>=6.90",
                # the unit tier on both cores (-n auto)
                "pytest-xdist>=3.5",
                # mutation testing, benchmarks/mutation_score.py (not in CI: slow).
                # mutmut 3 mutates a copy (mutants/), never the working tree.
                "mutmut>=3.3,<4"],
    },
    entry_points={"console_scripts": ["incastlab = incastlab.cli:main"]},
)
