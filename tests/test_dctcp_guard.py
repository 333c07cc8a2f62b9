"""incastlab/bpf/dctcp_guard.h, the bounds our BPF DCTCP checks every value it reads
back against, compiled for the host and fed the values the issue-26 probe saw the
kernel's CWR/PRR path write (ssthresh 0x81104110, cwnd 1e8..2e9) and ordinary ones."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from incastlab import bpf

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
typedef unsigned int __u32;
typedef unsigned long long __u64;
#include "dctcp_guard.h"
int main(int argc, char **argv)
{
	__u32 a = (__u32)strtoul(argv[2], 0, 0), b = (__u32)strtoul(argv[3], 0, 0);
	switch (argv[1][0]) {
	case 's': printf("%d\n", dctcp_ssthresh_absurd(a, b)); break;
	case 'c': printf("%d\n", dctcp_cwnd_absurd(a, b)); break;
	case 'r': printf("%u\n", dctcp_reduced_cwnd(a, b)); break;
	case 'w': printf("%u\n", dctcp_window_in_reduction(a, b)); break;
	case 'f': printf("%u\n", dctcp_window_after_absurd(a)); break;
	}
	return 0;
}
"""


@pytest.fixture(scope="module")
def guard(tmp_path_factory):
    cc = shutil.which("clang") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (scripts/install.sh installs clang)")
    work = tmp_path_factory.mktemp("guard")
    (work / "harness.c").write_text(HARNESS)
    exe = work / "harness"
    subprocess.run([cc, "-Wall", "-Werror", "-I", str(bpf.SOURCE_DIR), "-o", str(exe),
                    str(work / "harness.c")], check=True, capture_output=True)

    def call(op: str, a: int, b: int = 0) -> int:
        out = subprocess.run([str(exe), op, str(a), str(b)], check=True,
                             capture_output=True, text=True)
        return int(out.stdout)
    return call


MSS = 1448
SANE_MAX = 0x7FFFFFFF // MSS  # no socket can fill more (sk_sndbuf is an int)


def test_the_probes_absurd_values_are_caught(guard):
    assert guard("s", 0x81104110, MSS) == 1
    assert guard("c", 100_000_000, MSS) == 1
    assert guard("c", 2_000_000_000, MSS) == 1
    assert guard("c", SANE_MAX + 1, MSS) == 1
    assert guard("s", SANE_MAX + 1, MSS) == 1
    assert guard("c", 0xFFFFFFFF, 0) == 1  # an mss of 0 must not divide by zero


def test_ordinary_values_pass(guard):
    assert guard("s", 0x7FFFFFFF, MSS) == 0  # the kernel's "infinite" initial threshold
    for value in (2, 10, 100, 5861, SANE_MAX):
        assert guard("s", value, MSS) == 0
        assert guard("c", value, MSS) == 0


def test_reduction_is_alpha_over_two_and_never_below_two(guard):
    assert guard("r", 100, 1024) == 50   # alpha = 1: halve
    assert guard("r", 100, 512) == 75    # alpha = 1/2: cut by a quarter
    assert guard("r", 100, 0) == 100     # no marks: no cut
    assert guard("r", 3, 1024) == 2
    assert guard("r", 0xFFFFFFFF, 1024) == 0x80000000  # no 32-bit overflow in cwnd*alpha


def test_window_in_reduction_and_after_an_absurd_value(guard):
    assert guard("w", 100, 60) == 60     # cut to the threshold set on entry
    assert guard("w", 40, 60) == 40      # never raised in CWR/Recovery
    assert guard("w", 100, 0) == 2       # at least 2 packets
    assert guard("f", 37) == 37          # restart from what is in flight
    assert guard("f", 0) == 2
