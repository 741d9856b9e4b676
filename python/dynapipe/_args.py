"""_args.py — the checks every public argument of the package goes through
before anything reaches C or a result: type, range, uniqueness and
embedded NULs (a C string would end there). A failure raises TypeError (the
wrong kind of value) or ValueError (the right kind, a bad value) whose
message starts with the argument's name, e.g. "sample_ids[3] = 7 appears
twice (also at sample_ids[1])".
"""
import math
import operator
import os
from collections.abc import Mapping, Set

INT32_MAX = 2**31 - 1


def _type_name(value):
    return type(value).__name__


def check_int(name, value, lo, hi):
    """value as an int in [lo, hi]; TypeError for a non-integer (bool and
    float included), ValueError out of range."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {_type_name(value)}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name} = {v} is out of range [{lo}, {hi}]")
    return v


def check_opt_int(name, value, lo, hi):
    """None -> 0 (the C library's "not given"), else check_int."""
    return 0 if value is None else check_int(name, value, lo, hi)


def check_bool(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {_type_name(value)}")
    return value


def check_choice(name, value, choices):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {_type_name(value)}")
    if value not in choices:
        raise ValueError(f"{name} = {value!r}; use one of {', '.join(choices)}")
    return value


def check_str(name, value):
    """A non-empty str without NUL (it reaches C as a C string)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {_type_name(value)}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    if "\0" in value:
        raise ValueError(f"{name} = {value!r} contains a NUL character")
    return value


def check_path_or_name(name, value):
    """A preset name or a path (str or os.PathLike of str): non-empty, no NUL."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string or path, not {_type_name(value)}")
    return check_str(name, value)


def check_sequence(name, values, what="integers"):
    """values as a list: an ordered sequence with a length (list, tuple,
    range, array); a str, bytes, mapping (a dict's keys are no list of
    lengths), set or bare iterator is refused with TypeError."""
    if (isinstance(values, (str, bytes, bytearray, Mapping, Set)) or not hasattr(values, "__len__")
            or not hasattr(values, "__iter__")):
        raise TypeError(f"{name} must be a sequence of {what} (a list or tuple), not {_type_name(values)}")
    return list(values)


def check_ints(name, values, lo, hi):
    """A list of ints in [lo, hi] from a sequence; names the first bad one."""
    out = check_sequence(name, values)
    # Fast path for the common case (plain ints in range); otherwise check
    # each element to name the first bad one.
    if all(type(v) is int for v in out) and (not out or (min(out) >= lo and max(out) <= hi)):
        return out
    return [check_int(f"{name}[{i}]", v, lo, hi) for i, v in enumerate(out)]


def check_unique(name, values):
    """ValueError naming the first value that appears twice in values."""
    if len(set(values)) == len(values):
        return values
    first = {}
    for i, v in enumerate(values):
        if v in first:
            raise ValueError(f"{name}[{i}] = {v} appears twice (also at {name}[{first[v]}])")
        first[v] = i
    return values


def check_json(name, value):
    """A dict in a JSON format (model, machine): string keys, values that
    JSON holds exactly (str, int, finite float, bool, None, lists and dicts
    of them), no NUL in any string. Returns value."""
    if isinstance(value, str):
        if "\0" in value:
            raise ValueError(f"{name} = {value!r} contains a NUL character")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} = {value} is not a finite number")
    elif value is None or isinstance(value, (bool, int)):
        pass
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{name}: key {k!r} must be a string, not {_type_name(k)}")
            if "\0" in k:
                raise ValueError(f"{name}: key {k!r} contains a NUL character")
            check_json(f"{name}[{k!r}]", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_json(f"{name}[{i}]", v)
    else:
        raise TypeError(f"{name} must hold JSON values (str, int, float, bool, None, list, dict), "
                        f"not {_type_name(value)}")
    return value
