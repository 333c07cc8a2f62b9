"""topology.congestion_control = "dctcp": which implementation a run gets (the kernel's
tcp_dctcp, else the project's BPF one), the refusal when neither can run, and the run
state's record of a registered struct_ops that clean-up reads. No root needed: nothing
here registers anything (tests/test_dctcp_root.py does)."""
from __future__ import annotations

import json
import shutil

import pytest

from incastlab import bpf, clean, congestion, state
from incastlab.spec import SpecError, load_spec

KERNEL = ["reno", "bbr", "cubic"]  # this machine kind: no tcp_dctcp


def test_dctcp_prefers_the_kernels_and_falls_back_to_ours():
    kernel = congestion.resolve("dctcp", KERNEL + ["dctcp"], "not built")
    assert (kernel.kernel_name, kernel.implementation, kernel.needs_ecn) == \
        ("dctcp", "kernel", True)
    ours = congestion.resolve("dctcp", KERNEL, None)
    assert (ours.kernel_name, ours.implementation, ours.needs_ecn) == \
        ("incast_dctcp", "bpf", True)
    assert ours.as_dict()["spec_name"] == "dctcp"
    cubic = congestion.resolve("cubic", KERNEL, "not built")
    assert (cubic.kernel_name, cubic.implementation, cubic.needs_ecn) == \
        ("cubic", "kernel", False)


def test_dctcp_refused_when_neither_kernel_nor_bpf_build_can_run():
    with pytest.raises(congestion.CongestionUnavailable) as info:
        congestion.resolve("dctcp", KERNEL, "bpftool is not installed")
    message = str(info.value)
    assert message.startswith("topology.congestion_control: 'dctcp' needs the kernel's "
                              "tcp_dctcp")
    assert "reno, bbr, cubic" in message and "bpftool is not installed" in message
    with pytest.raises(congestion.CongestionUnavailable, match="'bbr' is not available"):
        congestion.resolve("bbr", ["reno", "cubic"], None)
    assert congestion.describe_dctcp(KERNEL, "x").startswith("unavailable (x)")
    assert "BPF" in congestion.describe_dctcp(KERNEL, None)
    assert "kernel" in congestion.describe_dctcp(KERNEL + ["dctcp"], "x")


def test_an_unbuilt_bpf_object_is_the_reason_given(tmp_path, monkeypatch):
    if shutil.which("bpftool") is None or not congestion.BTF.exists():
        pytest.skip("no bpftool or no kernel BTF: the reason given would be that")
    assert congestion.bpf_dctcp_problem() is None  # built (the installer ran)
    monkeypatch.setattr(bpf, "BUILD_DIR", tmp_path)  # an empty build directory
    problem = congestion.bpf_dctcp_problem()
    assert problem is not None and "is not built" in problem
    assert "scripts/build_bpf.sh" in problem


def test_spec_accepts_dctcp_and_refuses_other_names_and_types():
    assert load_spec(None, ["topology.congestion_control='dctcp'"]) \
        .topology.congestion_control == "dctcp"
    for bad, shown in (("'vegas'", "'vegas'"), ("3", "3"), ("['dctcp', 7]", "7")):
        with pytest.raises(SpecError) as info:
            load_spec(None, [f"topology.congestion_control={bad}"])
        message = str(info.value)
        assert "topology.congestion_control: " in message and shown in message
        assert "is not one of cubic, reno, bbr, dctcp" in message


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setattr(state, "STATE_DIR", d)
    return d


def test_state_records_struct_ops_and_old_state_files_still_clean(state_dir):
    run = state.RunState.create("runs/x")
    assert run.data[congestion.STATE_KIND] == []
    run.add(congestion.STATE_KIND, [congestion.BPF_DCTCP])
    run.add(congestion.STATE_KIND, [congestion.BPF_DCTCP])  # recorded once
    again = state.RunState.load(run.path)
    assert again.data[congestion.STATE_KIND] == ["incast_dctcp"]
    # a state file written before struct_ops were recorded has no such list
    old = state_dir / "1-1.json"
    old.write_text(json.dumps({"owner": {"pid": 1, "start": -1}, "run_dir": None,
                               "created": 0, "bridges": [], "interfaces": [],
                               "netns": [], "processes": []}))
    assert clean.leftovers(state.RunState.load(old)) == []
