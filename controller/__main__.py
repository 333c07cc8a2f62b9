"""Launcher: ``python -m incastlab.controller --policy NAME --fabric FABRIC_JSON --out DIR``.

os-ken ships no manager command, so this starts the policy's app with
``AppManager.run_apps``. Policy ``app`` runs the user's own apps (``--app FILE.py`` or
``--app MODULE``, repeatable) beside observer.py, with ``ryu.*`` imports resolved to
os-ken (ryu_compat.py, installed here and nowhere else); an app that cannot be imported
exits with status 3 and says which module or name failed.

Policy ``external`` runs observer.py alone, as a second controller (slave role) beside
the one the user runs.

Every option is validated (registry.build_settings) before os-ken is imported and
before anything listens; a refusal names the option and its allowed values and exits
with status 2. The OpenFlow listener binds 127.0.0.1 only.
Logs go to DIR/controller.log.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from incastlab.controller.registry import POLICIES, OptionError, build_settings

EXIT_BAD_OPTION = 2
EXIT_BAD_APP = 3     # a user app (policy app) could not be imported
LISTEN_HOST = "127.0.0.1"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m incastlab.controller",
        description="incastlab SDN controller (os-ken, OpenFlow 1.3).",
        epilog="policies: " + "; ".join(f"{n}: {s.summary}" for n, s in POLICIES.items()))
    p.add_argument("--policy", required=True, help=f"one of {', '.join(POLICIES)}")
    p.add_argument("--port", type=int, default=6653, help="OpenFlow TCP port on 127.0.0.1")
    p.add_argument("--fabric", required=True, help="fabric.json written by the runner")
    p.add_argument("--out", required=True, help="run directory (must exist)")
    p.add_argument("--poll-interval", type=float, default=None,
                   help="port statistics polling interval, seconds (default 0.5)")
    p.add_argument("--spine", type=int, default=None,
                   help="single: the spine every inter-leaf flow crosses (default 1)")
    p.add_argument("--idle-timeout", type=int, default=None,
                   help="spread, adaptive: idle timeout of per-flow entries, seconds "
                        "(default 10)")
    p.add_argument("--hash-fields", default=None,
                   help="ecmp: comma-separated fields OVS hashes when the switch speaks "
                        "OpenFlow 1.5 (default ip_src,ip_dst,ip_proto,tcp_src,tcp_dst)")
    p.add_argument("--app", dest="apps", action="append", default=None,
                   help="app: an os-ken or Ryu app, a .py file or a module name "
                        "(repeatable); its ryu.* imports resolve to os_ken.*")
    p.add_argument("--controller", default=None,
                   help="external: the controller you run (127.0.0.1:PORT); ours then "
                        "only observes, as an OpenFlow slave")
    return p.parse_args(argv)


def setup_logging(out_dir: str) -> None:
    handler = logging.FileHandler(os.path.join(out_dir, "controller.log"))
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = build_settings(args.policy, args.port, args.fabric, args.out,
                                  poll_interval=args.poll_interval, spine=args.spine,
                                  idle_timeout=args.idle_timeout,
                                  hash_fields=args.hash_fields, apps=args.apps,
                                  controller=args.controller)
    except OptionError as e:
        print(f"incastlab.controller: {e}", file=sys.stderr)
        return EXIT_BAD_OPTION

    setup_logging(settings.out_dir)
    # Imported only now: a refused option never pays for (or logs from) os-ken.
    from os_ken import cfg
    from os_ken.base import app_manager
    from os_ken.controller import controller as _ofp_options  # noqa: F401
    from os_ken.controller import ofp_handler as _ofp_handler  # noqa: F401

    # Both modules above register CLI options; oslo.config refuses registrations
    # after CONF() has parsed, so they are imported first.

    from incastlab.controller import base, observer

    cfg.CONF(args=[], project="os_ken")
    cfg.CONF.set_override("ofp_listen_host", LISTEN_HOST)
    cfg.CONF.set_override("ofp_tcp_listen_port", settings.port)
    base.configure(settings)
    observer.configure(settings)
    log = logging.getLogger("incastlab.controller")
    log.info("policy %s on %s:%d, fabric %s (%d switches), poll %.3f s",
             settings.policy, LISTEN_HOST, settings.port, settings.fabric_path,
             len(settings.fabric.dpids), settings.poll_interval)
    apps = [POLICIES[settings.policy].module]
    if POLICIES[settings.policy].user_apps:
        try:
            apps += load_user_apps(settings)
        except ImportError as e:  # RyuCompatError, or the app's own missing import
            log.error("%s", e)
            logging.shutdown()
            print(f"incastlab.controller: {e}", file=sys.stderr)
            return EXIT_BAD_APP

    manager = app_manager.AppManager.get_instance()

    def stop(signum, frame):
        # os-ken's native hub runs real threads that block in accept()/recv() and
        # cannot be killed, so a graceful run_apps exit would hang: close our apps
        # (flushes CSVs) and leave.
        log.info("signal %d: stopping", signum)
        for app in list(manager.applications.values()):
            if isinstance(app, (base.FabricApp, observer.FabricObserver)):
                app.close()
        logging.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    app_manager.AppManager.run_apps(apps)
    return 0


def load_user_apps(settings) -> list[str]:
    """Import the user's apps with ``ryu.*`` resolved to os-ken (ryu_compat), after
    offering them the fabric map (appkit); return the names to give run_apps. A
    module that cannot be mapped raises RyuCompatError naming it."""
    from incastlab.controller import appkit, ryu_compat

    os.environ[appkit.ENV_FABRIC] = os.path.abspath(settings.fabric_path)
    ryu_compat.install()
    log = logging.getLogger("incastlab.controller")
    names = []
    for app in settings.apps:
        module = ryu_compat.load_app(app)
        log.info("app %s loaded as module %s (ryu.* -> os_ken.*)", app, module.__name__)
        names.append(module.__name__)  # run_apps finds it in sys.modules by this name
    return names


if __name__ == "__main__":
    sys.exit(main())
