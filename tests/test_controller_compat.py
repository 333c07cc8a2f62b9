"""Rootless tests of "bring your own controller" (policies app and external).

- the ryu -> os_ken import alias (controller/ryu_compat.py): every os-ken module is
  reachable under its Ryu name, Ryu's renamed classes and functions resolve to os-ken's,
  and what cannot be mapped fails with a message naming the module or the name;
- the launcher with --policy app: the example Ryu-style app loads, listens on 127.0.0.1
  only, and a broken app stops it with that message (exit status 3);
- the observer (readiness and port statistics) against a dummy datapath;
- the registry's and the spec's options for app and external, the appkit helper, and
  the fabric's storm watch and OVSDB decoding on hand-made inputs.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from incastlab.controller import ryu_compat
from incastlab.controller.registry import (POLICIES, OptionError, build_settings,
                                           parse_controller)
from incastlab.topologies.leafspine import LeafSpineTopo, StarTopo

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "controller" / "examples" / "learning_switch.py"

# Ryu's spelling -> os-ken's, in the modules where Ryu defined them (Ryu 4.34 sources).
RENAMED = [
    ("ryu.base.app_manager", "RyuApp", "OSKenApp"),
    ("ryu.exception", "RyuException", "OSKenException"),
    ("ryu.services.protocols.bgp.application", "RyuBGPSpeaker", "OSKenBGPSpeaker"),
    ("ryu.lib.ofctl_string", "ofp_ofctl_field_name_to_ryu", "ofp_ofctl_field_name_to_os_ken"),
    ("ryu.lib.ofctl_string", "nxm_field_name_to_ryu", "nxm_field_name_to_os_ken"),
    # re-exported under the same names
    ("ryu.lib.stplib", "RyuException", "OSKenException"),
    ("ryu.topology.switches", "RyuException", "OSKenException"),
]


@pytest.fixture
def alias():
    ryu_compat.install()
    yield
    ryu_compat.uninstall()


def os_ken_modules() -> list[str]:
    """Every module of the installed os-ken except its own test suite."""
    import os_ken
    names = []
    for info in pkgutil.walk_packages(os_ken.__path__, "os_ken.", onerror=lambda _n: None):
        if not info.name.startswith("os_ken.tests"):
            names.append(info.name)
    return names


# ---- the alias -------------------------------------------------------------------------

def test_names_convert_both_ways():
    assert ryu_compat.ryu_name("OSKenApp") == "RyuApp"
    assert ryu_compat.ryu_name("OSKEN_HUB_TYPE") == "RYU_HUB_TYPE"
    assert ryu_compat.ryu_name("nxm_field_name_to_os_ken") == "nxm_field_name_to_ryu"
    assert ryu_compat.ryu_name("Datapath") == "Datapath"
    assert ryu_compat.os_ken_name("RyuBGPSpeaker") == "OSKenBGPSpeaker"
    assert ryu_compat.os_ken_name("ofp_ofctl_field_name_to_ryu") == \
        "ofp_ofctl_field_name_to_os_ken"
    assert ryu_compat.os_ken_module("ryu.lib.packet.arp") == "os_ken.lib.packet.arp"
    with pytest.raises(ValueError):
        ryu_compat.os_ken_module("ryubar.x")


def test_every_os_ken_module_is_reachable_as_ryu(alias):
    modules = os_ken_modules()
    assert len(modules) > 200  # the walk saw the whole package, not an empty one
    mapped = failed = 0
    for name in modules:
        ryu = "ryu" + name[len("os_ken"):]
        try:
            real = importlib.import_module(name)
        except ImportError as exc:
            # os-ken's own module cannot load here (an optional dependency): the ryu
            # import must fail too, naming the ryu module and os-ken's reason
            with pytest.raises(ryu_compat.RyuCompatError) as info:
                importlib.import_module(ryu)
            assert repr(ryu) in str(info.value) and str(exc) in str(info.value)
            failed += 1
            continue
        assert importlib.import_module(ryu) is real, ryu
        mapped += 1
    assert mapped > 200 and failed < 10


@pytest.mark.parametrize("module,ryu,os_ken", RENAMED)
def test_renamed_names_resolve_to_os_kens(alias, module, ryu, os_ken):
    mod = importlib.import_module(module)
    assert getattr(mod, ryu) is getattr(mod, os_ken)
    # the from-import form a Ryu app uses, also once os-ken has loaded the module
    namespace = {}
    exec(f"from {module} import {ryu} as found", namespace)
    assert namespace["found"] is getattr(mod, os_ken)


def test_every_os_ken_spelled_name_has_its_ryu_spelling(alias):
    import re
    spelled = re.compile("OSKen|OSKEN|os_ken|osken")
    seen = 0
    for name in os_ken_modules():
        try:
            ryu_mod = importlib.import_module("ryu" + name[len("os_ken"):])
        except ImportError:
            continue
        for attr, value in list(vars(ryu_mod).items()):
            if spelled.search(attr) and not attr.startswith("__"):
                assert getattr(ryu_mod, ryu_compat.ryu_name(attr)) is value, (name, attr)
                seen += 1
    assert seen >= 8  # OSKenApp, OSKenException (x4), OSKenBGPSpeaker, two functions


def test_classic_ryu_app_imports(alias):
    from ryu.base import app_manager
    from ryu.controller import ofp_event
    from ryu.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from ryu.lib import hub
    from ryu.lib.packet import ether_types, ethernet, packet
    from ryu.ofproto import ofproto_v1_3

    import os_ken.base.app_manager
    import os_ken.controller.handler
    import ryu.base.app_manager  # noqa: F401 - now under its ryu name in sys.modules
    assert app_manager is os_ken.base.app_manager
    assert app_manager.RyuApp is os_ken.base.app_manager.OSKenApp
    assert set_ev_cls is os_ken.controller.handler.set_ev_cls
    assert (CONFIG_DISPATCHER, MAIN_DISPATCHER) == ("config", "main")
    assert ofproto_v1_3.OFP_VERSION == 4
    assert hub.spawn and ofp_event.EventOFPPacketIn and packet.Packet and ethernet.ethernet
    assert ether_types.ETH_TYPE_ARP == 0x0806
    # os-ken's own relative imports keep their real package
    assert sys.modules["ryu.base.app_manager"].__spec__.name == "os_ken.base.app_manager"


def test_missing_modules_are_named(alias):
    with pytest.raises(ryu_compat.RyuCompatError,
                       match=r"cannot import 'ryu.app.simple_switch_13': os-ken has no module "
                             r"'os_ken.app.simple_switch_13'.*copy a sample app's file"):
        importlib.import_module("ryu.app.simple_switch_13")
    with pytest.raises(ryu_compat.RyuCompatError,
                       match=r"cannot import 'ryu.cmd': .*os-ken ships no ryu-manager"):
        importlib.import_module("ryu.cmd.manager")
    with pytest.raises(ryu_compat.RyuCompatError, match=r"'ryu.nosuchpackage'"):
        importlib.import_module("ryu.nosuchpackage")


def test_the_alias_is_off_until_installed():
    ryu_compat.uninstall()
    with pytest.raises(ModuleNotFoundError, match="No module named 'ryu'"):
        importlib.import_module("ryu.base.app_manager")


def test_ryu_names_without_a_further_ryu_import(tmp_path):
    # A fresh interpreter: `from ryu.base import app_manager` loads os-ken's module under
    # its os-ken name; RyuApp must be there although no later ryu import follows.
    app = write_app(tmp_path, "one_import.py",
                    "from ryu.base import app_manager\n"
                    "class App(app_manager.RyuApp):\n    pass\n")
    code = ("from incastlab.controller import ryu_compat\n"
            f"m = ryu_compat.load_app({app!r})\n"
            "import os_ken.base.app_manager as am\n"
            "print(issubclass(m.App, am.OSKenApp))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def write_app(tmp_path, name, body) -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_load_app_names_what_cannot_be_mapped(alias, tmp_path):
    bad_name = write_app(tmp_path, "bad_name.py",
                         "from ryu.base.app_manager import RyuFoo\n")
    with pytest.raises(ryu_compat.RyuCompatError,
                       match=r"app .*bad_name.py: cannot map ryu.base.app_manager.RyuFoo: "
                             r"os-ken's os_ken.base.app_manager has no 'RyuFoo' and no "
                             r"'OSKenFoo'"):
        ryu_compat.load_app(bad_name)
    bad_attr = write_app(tmp_path, "bad_attr.py",
                         "from ryu.lib import hub\nclass A(hub.RyuThing):\n    pass\n")
    with pytest.raises(ryu_compat.RyuCompatError,
                       match=r"cannot map ryu.lib.hub.RyuThing: .*no 'RyuThing' and no "
                             r"'OSKenThing'"):
        ryu_compat.load_app(bad_attr)
    bad_module = write_app(tmp_path, "bad_module.py", "import ryu.app.rest_router\n")
    with pytest.raises(ryu_compat.RyuCompatError, match=r"'ryu.app.rest_router'"):
        ryu_compat.load_app(bad_module)
    # the app's own errors are not dressed up as mapping errors
    own = write_app(tmp_path, "own_error.py", "import not_a_module_anywhere\n")
    with pytest.raises(ModuleNotFoundError, match="not_a_module_anywhere") as info:
        ryu_compat.load_app(own)
    assert not isinstance(info.value, ryu_compat.RyuCompatError)


def test_load_app_example_and_app_manager_finds_it(alias):
    from os_ken.base import app_manager
    module = ryu_compat.load_app(str(EXAMPLE))
    assert module.__name__ == "learning_switch"
    cls = app_manager.AppManager().load_app(module.__name__)
    assert cls is module.LearningSwitch13 and issubclass(cls, app_manager.OSKenApp)


def test_an_app_file_never_shadows_a_real_module(alias, tmp_path):
    import json
    path = write_app(tmp_path, "json.py", "from ryu.base import app_manager\nX = 1\n")
    module = ryu_compat.load_app(path)
    assert module.__name__ == "json_2" and module.X == 1
    assert sys.modules["json"] is json


# ---- the observer ------------------------------------------------------------------------

class DummyDatapath:
    """os-ken's Datapath with real OF1.3 encoders; sent messages are kept."""

    def __init__(self, dpid, version="1_3"):
        self.id = self.dpid = dpid
        self.ofproto = importlib.import_module(f"os_ken.ofproto.ofproto_v{version}")
        self.ofproto_parser = importlib.import_module(f"os_ken.ofproto.ofproto_v{version}_parser")
        self.sent = []

    def send_msg(self, msg):
        msg.set_xid(len(self.sent) + 1)
        msg.serialize()  # proves it encodes in this OpenFlow version
        self.sent.append(msg)


def features(dp):
    """A SwitchFeatures event as os-ken delivers it to an app: the datapath's own id is
    not set yet (os-ken's handler sets it from this message in another thread)."""
    dp.id = None
    return SimpleNamespace(msg=SimpleNamespace(datapath=dp, datapath_id=dp.dpid))


def test_observer_ready_when_every_switch_connected_and_logs_port_stats(tmp_path):
    import json

    from incastlab.controller import observer
    from incastlab.topologies.fabricmap import FabricMap
    fmap = FabricMap.from_dict(LeafSpineTopo(spines=1, leaves=2,
                                             hosts_per_leaf=2).fabric_map().to_dict())
    settings = build_settings("app", 6653, "fabric.json", str(tmp_path), fabric=fmap,
                              apps=["some.module"])
    observer.configure(settings)
    app = observer.FabricObserver()
    dps = [DummyDatapath(d) for d in fmap.dpids]
    ready = tmp_path / "controller_ready.json"
    for dp in dps[:-1]:
        app._switch_features(features(dp))
        assert not ready.exists()  # not every switch yet
    app._switch_features(features(dps[-1]))
    assert json.loads(ready.read_text())["switches"] == fmap.dpids
    assert all(dp.sent == [] for dp in dps)  # it never touches the switches' tables
    # port statistics: the map's ports only, peers from the map
    leaf = fmap.leaf(1)
    parser = dps[0].ofproto_parser

    def stat(port, tx):
        return parser.OFPPortStats(port_no=port, rx_packets=1, tx_packets=2, rx_bytes=3,
                                   tx_bytes=tx, rx_dropped=0, tx_dropped=5, rx_errors=0,
                                   tx_errors=0, rx_frame_err=0, rx_over_err=0, rx_crc_err=0,
                                   collisions=0, duration_sec=0, duration_nsec=0)
    for dp in dps:
        dp.id = dp.dpid  # set by os-ken once the switch is in MAIN_DISPATCHER
    leaf_dp = next(dp for dp in dps if dp.id == leaf.dpid)
    body = [stat(1, 100), stat(3, 300), stat(leaf_dp.ofproto.OFPP_LOCAL, 9)]
    app._port_stats(SimpleNamespace(msg=SimpleNamespace(datapath=leaf_dp, body=body)))
    app.close()
    rows = (tmp_path / "port_stats.csv").read_text().splitlines()
    assert rows[0] == "t,switch,port,peer,tx_bytes,rx_bytes,tx_packets,rx_packets,tx_dropped"
    cells = [r.split(",")[1:] for r in rows[1:]]
    assert cells == [["lf1", "1", "h1", "100", "3", "2", "1", "5"],
                     ["lf1", "3", "sp1", "300", "3", "2", "1", "5"]]


@pytest.mark.parametrize("version", ["1_3", "1_5"])  # the observer alone negotiates 1.5
def test_observer_beside_an_external_controller_asks_for_the_slave_role(tmp_path, version):
    from incastlab.controller import observer
    from incastlab.topologies.fabricmap import FabricMap
    fmap = FabricMap.from_dict(StarTopo(senders=2).fabric_map().to_dict())
    settings = build_settings("external", 6654, "fabric.json", str(tmp_path), fabric=fmap,
                              controller="127.0.0.1:6653")
    observer.configure(settings)
    app = observer.FabricObserver()
    dp = DummyDatapath(fmap.dpids[0], version)
    app._switch_features(features(dp))
    app.close()
    # exactly one message, the role request: slave (no packet-ins, no table changes)
    assert [type(m).__name__ for m in dp.sent] == ["OFPRoleRequest"]
    assert dp.sent[0].role == dp.ofproto.OFPCR_ROLE_SLAVE
    assert (tmp_path / "controller_ready.json").exists()


# ---- registry, launcher, spec --------------------------------------------------------------

@pytest.fixture
def star_fabric(tmp_path):
    path = tmp_path / "fabric.json"
    StarTopo(senders=3).fabric_map().save(path)
    return str(path)


def test_registry_app_and_external(star_fabric, tmp_path):
    assert {"app", "external"} <= set(POLICIES)
    assert POLICIES["app"].user_apps and POLICIES["external"].external
    assert build_settings("external", 6654, star_fabric, str(tmp_path),
                          controller="127.0.0.1:6653").policy == "external"
    s = build_settings("app", 6653, star_fabric, str(tmp_path), apps=[str(EXAMPLE), "a.b"])
    assert s.apps == (str(EXAMPLE), "a.b")
    rel = os.path.relpath(EXAMPLE)
    assert build_settings("app", 6653, star_fabric, str(tmp_path), apps=[rel]).apps == \
        (str(EXAMPLE),)  # made absolute
    cases = [
        ({"policy": "app"}, "--policy app needs at least one --app"),
        ({"policy": "app", "apps": ["/no/such/app.py"]}, "--app '/no/such/app.py': no such"),
        ({"policy": "app", "apps": ["not a module"]}, "is not a .py file or a dotted module"),
        ({"policy": "single", "apps": ["x"]}, "--app applies only to policy app"),
        ({"policy": "external", "controller": "127.0.0.1:6653"},
         "--controller 127.0.0.1:6653 is on our own --port 6653"),
        ({"policy": "external"}, "--controller 127.0.0.1:6653 is on our own"),  # default
        ({"policy": "external", "controller": "10.0.0.1:6653"}, "--controller must be 127"),
        ({"policy": "app", "apps": ["x"], "controller": "127.0.0.1:1"},
         "--controller applies only to policy external"),
    ]
    for kwargs, message in cases:
        args = {"port": 6653, "fabric_path": star_fabric, "out_dir": str(tmp_path), **kwargs}
        with pytest.raises(OptionError, match=message):
            build_settings(**args)


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:6653", ("127.0.0.1", 6653)),
    ("127.0.0.2:7000", ("127.0.0.2", 7000)),
    ("10.0.0.1:6653", None),        # not loopback: packet-ins would leave the machine
    ("0.0.0.0:6653", None),
    ("localhost:6653", None),       # names are not resolved
    ("127.0.0.1:0", None),
    ("127.0.0.1:65536", None),
    ("127.0.0.1", None),
    ("[::1]:6653", None),
    (6653, None),
])
def test_parse_controller(text, expected):
    if expected is None:
        with pytest.raises(OptionError, match="--controller must be 127.x.y.z:PORT"):
            parse_controller(text)
    else:
        assert parse_controller(text) == expected


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_addresses(port: int) -> list[str]:
    with open("/proc/net/tcp") as f:  # state 0A = LISTEN
        return [line.split()[1] for line in f.readlines()[1:]
                if line.split()[3] == "0A" and line.split()[1].endswith(f":{port:04X}")]


def test_launcher_runs_the_ryu_style_example_on_loopback_only(star_fabric, tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "incastlab.controller", "--policy", "app",
                             "--app", str(EXAMPLE), "--port", str(port), "--fabric",
                             star_fabric, "--out", str(tmp_path)], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 20
        listening = []
        while time.time() < deadline and not listening and proc.poll() is None:
            listening = listening_addresses(port)
            time.sleep(0.1)
        assert listening == [f"0100007F:{port:04X}"]  # 127.0.0.1 only
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = (tmp_path / "controller.log").read_text()
    assert "policy app on 127.0.0.1" in log and "Traceback" not in log
    assert "learning_switch.py loaded as module learning_switch" in log
    assert "instantiating app learning_switch of LearningSwitch13" in log
    assert "instantiating app incastlab.controller.observer of FabricObserver" in log


def test_launcher_stops_on_an_app_it_cannot_map(star_fabric, tmp_path):
    bad = write_app(tmp_path, "tutorial.py",
                    "from ryu.app import simple_switch_13\n"
                    "class Mine(simple_switch_13.SimpleSwitch13):\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "incastlab.controller", "--policy", "app",
                          "--app", bad, "--port", str(free_port()), "--fabric", star_fabric,
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    message = ("tutorial.py: cannot map ryu.app.simple_switch_13: os-ken's os_ken.app has no "
               "'simple_switch_13' (of Ryu's apps os-ken keeps only ryu.app.ofctl")
    assert message in out.stderr
    assert message in (tmp_path / "controller.log").read_text()


def test_spec_routing_app_and_external(tmp_path):
    from incastlab.runner import policy_args
    from incastlab.spec import SpecError, load_spec
    spec = load_spec(str(REPO / "specs" / "own-controller.toml"))
    assert spec.routing.policy == "app"
    cwd = os.getcwd()
    os.chdir(REPO)  # the spec's app path is relative to where incastlab runs
    try:
        assert policy_args(spec) == ["--poll-interval", "0.2", "--app", str(EXAMPLE)]
    finally:
        os.chdir(cwd)
    empty = tmp_path / "empty.toml"
    empty.write_text("[routing]\npolicy = \"app\"\n")
    with pytest.raises(SpecError, match="routing.app: missing; policy app needs"):
        load_spec(str(empty))
    with pytest.raises(SpecError, match=r"routing.controller: '10.1.1.1:6653' is not "
                                        r"127.x.y.z:PORT"):
        load_spec(str(empty), ["routing.policy=external", "routing.controller=10.1.1.1:6653"])
    ext = load_spec(str(empty), ["routing.policy=external",
                                 "routing.controller=127.0.0.1:7001"])
    assert policy_args(ext) == ["--poll-interval", "0.2", "--controller", "127.0.0.1:7001"]


def test_appkit_offers_the_fabric_map(tmp_path, monkeypatch):
    from incastlab.controller import appkit
    monkeypatch.delenv(appkit.ENV_FABRIC, raising=False)
    assert appkit.fabric_map() is None
    path = tmp_path / "fabric.json"
    StarTopo(senders=2).fabric_map().save(path)
    monkeypatch.setenv(appkit.ENV_FABRIC, str(path))
    fmap = appkit.fabric_map()
    assert [h.name for h in fmap.hosts] == ["h1", "h2", "h3"]


# ---- fabric side: external address, OVSDB, storm watch ---------------------------------

def test_external_controller_from_policy_args():
    from incastlab.fabric import FabricError, external_controller
    assert external_controller("ecmp", ["--controller", "127.0.0.1:1"]) is None
    assert external_controller("external", []) == ("127.0.0.1", 6653)
    assert external_controller("external", ["--poll-interval", "0.2", "--controller",
                                            "127.0.0.3:7777"]) == ("127.0.0.3", 7777)
    with pytest.raises(FabricError, match="--controller must be 127"):
        external_controller("external", ["--controller", "192.168.1.1:6653"])


def test_ovsdb_values_decoded():
    from incastlab.fabric_watch import ovs_value as _ovs_value
    assert _ovs_value(["uuid", "ab-cd"]) == "ab-cd"
    assert _ovs_value(["set", []]) == []
    assert _ovs_value(["set", [["uuid", "a"], ["uuid", "b"]]]) == ["a", "b"]
    assert _ovs_value(["map", [["k", "v"]]]) == {"k": "v"}
    assert _ovs_value(True) is True and _ovs_value("lf1") == "lf1"


def test_storm_watch_rates(monkeypatch):
    from incastlab.fabric import FabricError, StormWatch
    samples = iter([(0.0, 0), (1.0, 150), (2.0, 450), (2.5, 1000)])
    monkeypatch.setattr(StormWatch, "_sample", lambda self: next(samples))
    watch = StormWatch(["lf1-eth3"], spines=2, limit_pps=300)
    assert watch.check() == 150.0
    assert watch.check() == 300.0  # at the limit is not a storm
    with pytest.raises(FabricError, match=r"1100 packets/s circulate on the switch-to-switch "
                                          r"links on a fabric with loops \(2 spines\).*"
                                          r"star or a leaf-spine with one spine.*stopped"):
        watch.check()
    assert watch.peak_pps == 1100.0


def test_storm_watch_reads_kernel_counters():
    from incastlab.fabric import StormWatch
    base = int(Path("/sys/class/net/lo/statistics/tx_packets").read_text())
    watch = StormWatch(["lo", "no-such-iface0"], spines=2)
    t, total = watch._sample()
    assert total >= base  # lo's counter, the missing interface counted as nothing
