"""The spec validator never crashes (issue 28): specs generated from the schema itself
(every table and field of incastlab.spec.schema, the job registry's [workload] fields,
[[jobs]], [[events]] from the action registry, sweep lists) and then mutated (values of
every TOML type, numbers beyond the ranges the schema states, unknown keys, tables
replaced or removed) end, through TOML text, in a valid spec or a SpecError whose every
line names a field, never in another exception. Derandomised, a fixed number of
examples each: the same cases on every run (CI)."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
import io
import re
import tempfile
import tomllib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incastlab import cli, jobs, multijob
from incastlab.events import actions
from incastlab.spec import (TABLES, SpecError, expand_sweep, load_spec, loads_spec, set_field,
                            validate)

REPO = Path(__file__).resolve().parents[1]
BASES = {p.name: tomllib.loads(p.read_text(encoding="utf-8"))
         for p in sorted((REPO / "specs").glob("*.toml"))}


def examples(n: int):
    return settings(derandomize=True, database=None, max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


# ------------------------------------------------------------- values of every TOML type

SAFE_KEY = st.text("abcdefghijklmnopqrstuvwxyz_0123456789-", min_size=1, max_size=10)
SCALARS = st.one_of(
    st.text(max_size=8), st.sampled_from(["", "x", "spread", "default", "1ms", "h1-eth0"]),
    st.integers(-3, 70), st.integers(-(2**63), 2**63 - 1), st.integers(),
    st.floats(), st.floats(-2, 100), st.booleans(),
    st.datetimes(max_value=dt.datetime(9999, 1, 1),
                 timezones=st.sampled_from([None, dt.timezone.utc])),
    st.dates(), st.times())
TOML_VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(SAFE_KEY, inner, max_size=3), max_leaves=6)


def schema_fields():
    """(table, field name, field metadata) of every field, read from the schema now."""
    return [(t, f.name, f.metadata) for t, cls in TABLES.items()
            for f in dataclasses.fields(cls)]


def allowed_text(meta) -> str:
    probe = meta["check"](object())
    return probe.split(" is not ", 1)[1] if probe and " is not " in probe else ""


def schema_values(table: str, name: str, meta) -> list:
    """Values the schema itself suggests for a field: its default, the shipped specs'
    values, the choices it lists and every bound it states with its neighbours (one
    side in range, the other out)."""
    f = next(f for f in dataclasses.fields(TABLES[table]) if f.name == name)
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    values = [] if default is None else [default]
    for doc in BASES.values():
        tables = [doc.get(table)] + (doc.get("jobs", []) if table == "workload" else [])
        values += [t[name] for t in tables if isinstance(t, dict) and name in t]
    text = allowed_text(meta)
    if text.startswith("one of "):
        values += text[len("one of "):].split(", ")
    for number in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?", text):
        x = float(number) if re.search(r"[.e]", number) else int(number)
        values += [x, x - 1, x + 1, x * 2, -x] + ([x - 0.001, x + 0.001]
                                                    if isinstance(x, float) else [])
    return values


def field_value(table: str, name: str, meta):
    good = st.sampled_from(schema_values(table, name, meta))
    options = [good, good, TOML_VALUES]
    if meta["sweep"] or meta["list_valued"]:
        options.append(st.lists(good, max_size=3))
    return st.one_of(options)


def job_value(name: str):
    """A value for a [[jobs]] table's key: a [workload] field's or one of its own."""
    own = {"placement": [*multijob.PLACEMENTS, "packed "], "launch": [True, False],
           "start_offset_s": [0, 1.5, multijob.MAX_OFFSET_S, multijob.MAX_OFFSET_S + 1, -1]}
    if name in own:
        return st.one_of(st.sampled_from(own[name]), TOML_VALUES)
    meta = next(m for t, n, m in schema_fields() if t == "workload" and n == name)
    return field_value("workload", name, meta)


EVENT_VALUES = [["lf2", "sp1"], ["lf1", "sp2"], ["h1", "lf1"], "lf1-eth3", "h1-eth0", "sp1",
                "lf2", "h1", "h4", "nosuch", 0, 1, 2, 99, 0.05, 0.5, 1, 1.5, 5, 10**9, 10**10]


def event_table(data) -> dict:
    """An [[events]] table from the action registry: a registered action (or not), a time,
    perhaps a duration, and its own fields."""
    registry = actions()
    name = data.draw(st.sampled_from([*registry, "nosuch"]))
    table: dict = {}
    when = data.draw(st.sampled_from(["at_s", "at_iteration", "both", "none"]))
    for key in ("at_s", "at_iteration"):
        if when in (key, "both"):
            table[key] = data.draw(st.one_of(st.sampled_from([0, 1, 3.5, 5, 12, 10**9]),
                                             TOML_VALUES))
    table["action"] = name
    if data.draw(st.booleans()):
        table["duration_s"] = data.draw(st.one_of(st.sampled_from([0, 1.0, 3, 1e9]),
                                                  TOML_VALUES))
    own = list(registry[name].fields) if name in registry else []
    for key in data.draw(st.lists(st.sampled_from(own or ["link"]), unique=True,
                                  max_size=2)):
        table[key] = data.draw(st.one_of(st.sampled_from(EVENT_VALUES), TOML_VALUES))
    return table


def jobs_tables(data) -> list[dict]:
    """[[jobs]]: one to four tables, each a registered kind (or not) with some of the
    [workload] fields and the [[jobs]] keys."""
    names = [n for t, n, _ in schema_fields() if t == "workload" and n != "kind"]
    out = []
    for _ in range(data.draw(st.integers(1, 4))):
        table = {"kind": data.draw(st.sampled_from([*jobs.JOBS, "nosuch"]))}
        for key in data.draw(st.lists(st.sampled_from(names + list(multijob.OWN_KEYS)),
                                      unique=True, max_size=3)):
            table[key] = data.draw(job_value(key))
        out.append(table)
    return out


# ------------------------------------------------------------------------ mutations

def paths(doc) -> list[tuple]:
    """Every table, field, array entry and entry field of a document."""
    out = []
    for top, content in doc.items():
        out.append((top,))
        if isinstance(content, dict):
            out += [(top, k) for k in content]
        elif isinstance(content, list):
            for i, item in enumerate(content):
                out.append((top, i))
                if isinstance(item, dict):
                    out += [(top, i, k) for k in item]
    return out


def at(doc, path):
    obj = doc
    for step in path[:-1]:
        obj = obj[step]
    return obj


def mutate(data, doc: dict) -> None:
    what = data.draw(st.sampled_from(["field", "field", "field", "replace", "delete",
                                      "unknown", "jobs", "events"]))
    if what == "field":
        table, name, meta = data.draw(st.sampled_from(schema_fields()))
        target = doc.get(table)
        if table == "workload" and isinstance(doc.get("jobs"), list) and doc["jobs"] \
                and data.draw(st.booleans()):
            target = data.draw(st.sampled_from(doc["jobs"]))
        if not isinstance(target, dict):
            target = doc[table] = {}
        target[name] = data.draw(field_value(table, name, meta))
    elif what in ("replace", "delete") and doc:
        path = data.draw(st.sampled_from(paths(doc)))
        if what == "delete":
            del at(doc, path)[path[-1]]
        else:
            at(doc, path)[path[-1]] = data.draw(TOML_VALUES)
    elif what == "unknown":
        where = data.draw(st.sampled_from([None, *TABLES]))
        name = data.draw(st.one_of(SAFE_KEY, st.sampled_from(
            [n for _, n, _ in schema_fields()] + list(TABLES))))
        target = doc if where is None else doc.setdefault(where, {})
        if isinstance(target, dict):
            target[name] = data.draw(TOML_VALUES)
    elif what == "jobs":
        doc["jobs"] = jobs_tables(data)
        if data.draw(st.booleans()):
            doc.pop("workload", None)
    elif what == "events":
        events = doc.get("events") if isinstance(doc.get("events"), list) else []
        doc["events"] = [*events, event_table(data)][-3:]


def document(data, max_mutations: int = 3) -> dict:
    base = data.draw(st.sampled_from([None, *BASES]))
    doc = copy.deepcopy(BASES[base]) if base else {}
    for _ in range(data.draw(st.integers(0, max_mutations))):
        mutate(data, doc)
    return doc


def as_read(value):
    """``value`` as TOML gives it back (a time's fold, say, is not written)."""
    return tomllib.loads(tomli_w.dumps({"v": value}))["v"]


def as_text(doc: dict) -> str | None:
    try:
        return tomli_w.dumps(doc)
    except (TypeError, ValueError):  # a shape TOML cannot write (none are expected)
        return None


# ----------------------------------------------------------------------- the outcome

def names_a_field(line: str, doc: dict) -> bool:
    """The problem starts with what it is about: a table, ``table.field``, an entry of
    [[events]] or [[jobs]] (``events[1].link``), or a name the document gave."""
    heads = {*TABLES, "events", "jobs", *map(str, doc)}
    first = re.match(r"([^\s:.\[,]+)", line)
    return bool(first) and first.group(1) in heads and bool(
        re.match(r"[^\s:]+(, [^\s:]+)*:", line))


def outcome(doc: dict):
    """Load ``doc`` as TOML text (sweeps allowed), expand it and load its TOML back:
    the Spec, or the SpecError, after asserting that no other exception occurred and
    that every problem names its field."""
    text = as_text(doc)
    if text is None:
        return None
    try:
        spec = loads_spec(text, allow_sweep=True)
    except SpecError as exc:
        assert exc.errors, exc
        bad = [e for e in exc.errors if not names_a_field(e, doc)]
        assert not bad, f"problems that name no field: {bad}\n{text}"
        return exc
    validate(spec)
    runs = expand_sweep(spec)
    assert runs and all(not point.is_sweep for _, point in runs)
    assert loads_spec(spec.to_toml(), allow_sweep=True) == spec
    return spec


@examples(400)
@given(st.data())
def test_generated_and_mutated_specs_load_cleanly_or_name_the_field(data):
    outcome(document(data))


def refused_alone(meta, value) -> bool:
    """Whether a field's own check refuses ``value`` (a sweep list value by value)."""
    if isinstance(value, list) and meta["sweep"]:
        return not value or any(meta["check"](v) is not None for v in value)
    if isinstance(value, list) and not meta["list_valued"]:
        return True
    return meta["check"](value) is not None


@examples(300)
@given(st.data())
def test_a_bad_value_in_a_shipped_spec_is_refused_by_its_name(data):
    """One field of a shipped (valid) spec set to a value its own check refuses: an
    error names that field (``jobs[i].field`` inside [[jobs]]), with the value."""
    name_of_spec = data.draw(st.sampled_from(list(BASES)))
    doc = copy.deepcopy(BASES[name_of_spec])
    table, name, meta = data.draw(st.sampled_from(schema_fields()))
    value = as_read(data.draw(st.one_of(field_value(table, name, meta), TOML_VALUES)))
    key = f"{table}.{name}"
    if table == "workload" and "jobs" in doc:
        if name in (*multijob.PLACING_KEYS, *multijob.UNSUPPORTED_KEYS):
            return  # refused in [[jobs]] whatever the value (test_multijob.py)
        index = data.draw(st.integers(0, len(doc["jobs"]) - 1))
        doc["jobs"][index][name] = value
        key = f"jobs[{index}].{name}"
    else:
        doc.setdefault(table, {})[name] = value
    result = outcome(doc)
    if result is None or not refused_alone(meta, value):
        return
    assert isinstance(result, SpecError), (key, value)
    mine = [e for e in result.errors if re.match(rf"{re.escape(key)}[:\[]", e)]
    assert mine, (key, value, result.errors)
    if not isinstance(value, (list, dict)):
        assert any(repr(value) in e for e in mine), (key, value, mine)


LOADED = {name: load_spec(REPO / "specs" / name, allow_sweep=True) for name in BASES}


@examples(200)
@given(st.sampled_from(list(LOADED)), st.sampled_from(schema_fields()), TOML_VALUES)
def test_validate_and_expand_sweep_of_a_changed_spec_object(name, field, value):
    """A Spec changed in Python (as a program using the API would) is checked as one
    loaded from TOML: validate() and expand_sweep() raise SpecError naming the field, or
    the spec is valid."""
    table, fname, meta = field
    spec = copy.deepcopy(LOADED[name])
    set_field(spec, f"{table}.{fname}", value)
    for call in (validate, expand_sweep):
        try:
            call(spec)
        except SpecError as exc:
            assert all(names_a_field(e, {}) for e in exc.errors), exc.errors
            if refused_alone(meta, value) and not (table == "workload" and spec.jobs):
                assert any(e.startswith(f"{table}.{fname}") for e in exc.errors), exc.errors
        else:
            assert not refused_alone(meta, value) or (table == "workload" and spec.jobs)


# ------------------------------------------------------------------ each field's check

def wants_number(meta) -> bool:
    return bool(re.match(r"(an integer|a number)\b", allowed_text(meta)))


@examples(300)
@given(st.sampled_from(schema_fields()), TOML_VALUES)
def test_every_check_takes_every_toml_type(field, value):
    """A field's own check answers None or a text naming the value and what is
    allowed, for any TOML value; ``true`` is no integer and no number."""
    _, _, meta = field
    answer = meta["check"](value)
    assert answer is None or isinstance(answer, str)
    if isinstance(value, bool) and wants_number(meta):
        assert answer is not None and repr(value) in answer
    if answer is not None and not isinstance(value, (list, dict)):
        assert repr(value) in answer, answer


BOOLS_FOR_NUMBERS = [(t, n) for t, n, m in schema_fields() if wants_number(m)]


@pytest.mark.parametrize("table, name", BOOLS_FOR_NUMBERS,
                         ids=[f"{t}.{n}" for t, n in BOOLS_FOR_NUMBERS])
def test_true_is_not_read_as_one(table, name):
    with pytest.raises(SpecError) as info:
        loads_spec(f"[{table}]\n{name} = true\n", allow_sweep=True)
    assert any(e.startswith(f"{table}.{name}: True is not") for e in info.value.errors), \
        info.value.errors


# ------------------------------------------------------------------------ the CLI path

@examples(25)
@given(st.data())
def test_incastlab_check_exits_0_or_2_naming_the_field(data):
    doc = document(data, max_mutations=2)
    text = as_text(doc)
    if text is None:
        return
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzzed.toml"
        path.write_text(text, encoding="utf-8")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["check", str(path)])
    assert code in (0, 2), (code, err.getvalue())
    if code == 2:
        assert err.getvalue().startswith("incastlab check: invalid spec"), err.getvalue()
        assert out.getvalue() == ""
    else:
        assert tomllib.loads(out.getvalue().partition("\n# ")[0])
