"""Timed events during a run: the spec's ``[[events]]``, their registry and scheduler.

A spec may list events, each at a time or at an iteration::

    [[events]]
    at_s = 4.0              # seconds since the workload started, or
    # at_iteration = 10     # the first time any counting process logged its 10th step
    action = "link_down"    # a name from the registry below
    link = ["lf2", "sp1"]   # the action's own fields
    duration_s = 3.0        # optional (actions that can be undone): undone after this

An *action* is registered once with :func:`register_action`: its own fields, a
validator (against the fabric's names and the job's placement, before anything is
touched), ``apply(ctx, event)`` which does it and returns what it recorded, and
``undo(ctx, event)`` which restores the normal state. ``undo`` must be idempotent: the
scheduler calls it after ``duration_s``, and the runner's teardown calls it again for
every event that was started (even one whose apply was interrupted), last first, on
every path out — normal end, failure, Ctrl-C, SIGTERM. The network actions live in
:mod:`incastlab.netevents`, the host actions in the modules of ``ACTION_MODULES``.

The runner starts a :class:`Scheduler` thread once the workload's processes are
launched; it fires each event at its time and writes ``events.jsonl`` in the run
directory (one JSON object a line: planned time, actual wall time and seconds since the
workload started, the action, its result or error). See docs/events.md.

No Mininet import here: the spec validates events without root.
"""
from incastlab.event_scheduler import EVENTS_FILE, FORMAT_VERSION, Scheduler, read_events
from incastlab.event_spec import (ACTION_MODULES, COMMON_FIELDS, MAX_AT_S, Action, Apply,
                                  Event, EventContext, Process, Scene, Undo, Validator,
                                  actions, as_table, describe, event_problems, normalized,
                                  register_action, scene_problems, schema_rows, sort_key,
                                  unregister_action)

__all__ = ["ACTION_MODULES", "COMMON_FIELDS", "EVENTS_FILE", "FORMAT_VERSION", "MAX_AT_S",
           "Action", "Apply", "Event", "EventContext", "Process", "Scene", "Scheduler", "Undo",
           "Validator", "actions", "as_table", "describe", "event_problems", "normalized",
           "read_events", "register_action", "scene_problems", "schema_rows", "sort_key",
           "unregister_action"]
