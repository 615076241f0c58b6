"""Checks every input number and name passes before it reaches a model: finite, in range, of the right type.

Schema fields are checked by `Schema` itself (`check_numbers`, run on every field of every input
schema); the arguments of the Python API that are not schema fields (`num_gpus`, a model or system
given by name) are checked here with the same one sentence the CLI prints. `divisors` factors its
argument, so an error message that lists the allowed divisors of a large size answers at once.
"""

from __future__ import annotations

import builtins
import math
import numbers
import reprlib
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from madmax.errors import ConfigError

# The largest integer any input may hold: 2**53, the last one a float64 represents exactly. Sizes are
# multiplied and turned into floats (bytes, FLOPs, seconds) throughout the simulator; beyond 2**53 they
# would lose digits, and an integer of thousands of digits would overflow a float.
MAX_INT = 2**53
# The largest magnitude of a non-integer input number: 1e30, beyond any quantity an input states (a GPU's
# 1e16 FLOP/s, a cluster's 1e15 bytes, 1e13 training tokens) and small enough that a product of ten of
# them stays within float64 (1e308) instead of turning into infinity.
MAX_FLOAT = 1e30
# The most GPUs a cluster may have: 2**20 (1,048,576), about five times the largest training clusters
# announced (about 200,000 GPUs in 2025). Rank placement and the search's degree tables hold an
# entry per GPU or per divisor of the GPU count.
MAX_GPUS = 2**20
GPUS_WHY = "five times the largest cluster built (rank placement holds an entry per GPU)"
# The largest global batch: 2**31 - 1 sequences (samples), 30,000 times the largest recommendation-model
# batch trained (65,536); the strategy search holds micro-batch sizes, divisors of it, as 32-bit integers.
MAX_GLOBAL_BATCH = 2**31 - 1
# The most (micro-batch, pipeline chunk) pairs one training iteration may have: 2**16. The program
# builder writes, and the engine schedules, each micro-batch's forward and backward on each chunk of
# each stage (about 0.2 ms and 10 kB apiece), so 2**16 pairs take seconds, 2**20 a minute and gigabytes.
# The largest published run validated (GPT 530B, 1,120 micro-batches over 35 stages) has 39,200.
MAX_SCHEDULE_STEPS = 2**16
# The most embedding tables a recommendation model may have: 2**15, eight times the 4,096 of the largest
# catalog model (DLRM-A). The workload and the table placement hold one entry per table (a model of
# 50,000 tables takes 8 s to simulate, one of ten million never answers).
MAX_TABLES = 2**15
# The most layers a model may have: 2**14, a hundred times the deepest trained (GPT 1T, 128 layers). The
# workload and the plan hold each layer (2**40 layers would never answer).
MAX_LAYERS = 2**14
# The deepest nesting a YAML or JSON input may have: the parsers recurse once per level.
MAX_DEPTH = 100
# The most values (mappings, lists and scalars, counted as often as YAML aliases repeat them) an input may
# hold: 1,000,000, a thousand times the largest catalog entry (a DLRM with hundreds of tables); a YAML alias
# bomb of a few hundred bytes expands to billions and is refused here, before anything walks it.
MAX_NODES = 1_000_000
# The largest YAML or JSON input file (a model's config.json is a few kB): 8 MiB, which PyYAML reads in
# seconds; other input files (an arrivals CSV) may be up to MAX_FILE_BYTES.
MAX_CONFIG_BYTES = 8 * 2**20


def digits(value: int) -> int:
    """Decimal digits of |value|, without converting it to text (Python refuses more than 4,300 digits)."""
    n = abs(value)
    estimate = max(1, int(n.bit_length() * math.log10(2)))
    return estimate + (n >= 10**estimate)


class _Short(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        return builtins.repr(x) if abs(x) < 10**40 else f"<an integer of {digits(x):,} digits>"


_SHORT = _Short()
_SHORT.maxstring = 160  # a long file path is shown whole, a name of thousands of characters is cut
_SHORT.maxother = 60
_SHORT.maxlong = 40
_SHORT.maxlevel = 3


def shown(value: Any) -> str:
    """`repr(value)` cut to about 160 characters and 3 levels of nesting, for an error sentence."""
    return _SHORT.repr(value)


def check_numbers(value: Any) -> Any:
    """`value` unchanged if every number in it (nested in lists, tuples and dicts too) is finite, an
    integer at most MAX_INT and any other number at most MAX_FLOAT in magnitude; else ValueError
    (pydantic prefixes the field and the value)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        if abs(int(value)) > MAX_INT:
            raise ValueError(f"has {digits(int(value)):,} digits; allowed: at most {MAX_INT:,} (2**53) "
                             "in magnitude")
    elif isinstance(value, numbers.Real):
        if not math.isfinite(float(value)):
            raise ValueError("is not a finite number; allowed: a finite number")
        if abs(float(value)) > MAX_FLOAT:
            raise ValueError(f"is out of range; allowed: at most {MAX_FLOAT:g} in magnitude")
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            check_numbers(item)
    elif isinstance(value, dict):
        for item in value.values():
            check_numbers(item)
    return value


def whole_number(value: Any, field: str, *, minimum: int = 1, maximum: int = MAX_INT, unit: str = "",
                 why: str = "") -> int:
    """`value` as an int if it is a whole number (an int, a NumPy integer, or a float or numeric string
    with no fraction, as every schema field takes it) within [minimum, maximum]; else ConfigError.
    `unit` names what is counted ("GPUs"); `why` says where the maximum comes from."""
    what = f"a whole number{' of ' + unit if unit else ''}"
    allowed = f"allowed: an integer from {minimum:,} to {maximum:,}"
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value) if any(c in value for c in ".eEnN") else int(value.strip())
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, numbers.Real):
        raise ConfigError(f"{field}={shown(value)} is not {what}; {allowed}")
    if not isinstance(number, numbers.Integral) and not float(number).is_integer():  # 8.5, NaN, infinity
        raise ConfigError(f"{field}={shown(value)} is not {what}; {allowed}")
    number = int(number)
    if number < minimum:
        must = f"a positive number{' of ' + unit if unit else ''}" if minimum == 1 else f"at least {minimum:,}"
        raise ConfigError(f"{field}={shown(value)} must be {must}; {allowed}")
    if number > maximum:
        raise ConfigError(f"{field}={shown(value)} exceeds {maximum:,}{', ' + why if why else ''}; {allowed}")
    return number


def positive_number(value: Any, field: str, unit: str) -> float:
    """`value` as a float if it is a finite number above 0 and at most MAX_FLOAT; else ConfigError."""
    allowed = f"allowed: a finite number of {unit} above 0, at most {MAX_FLOAT:g}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{field}={shown(value)} is not a number; {allowed}")
    if not 0 < value <= MAX_FLOAT:  # also false for NaN
        raise ConfigError(f"{field}={shown(value)} is out of range; {allowed}")
    return float(value)


def nonnegative_number(value: Any, field: str, unit: str) -> float:
    """`value` as a float if it is a finite number of at least 0 and at most MAX_FLOAT; else ConfigError."""
    allowed = f"allowed: a finite number of {unit}, 0 or more, at most {MAX_FLOAT:g}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{field}={shown(value)} is not a number; {allowed}")
    if not 0 <= value <= MAX_FLOAT:  # also false for NaN
        raise ConfigError(f"{field}={shown(value)} is out of range; {allowed}")
    return float(value)


def name_or_path(value: Any, field: str) -> str | Path:
    """`value` if it is a name or a path (str or Path); else ConfigError naming what was given."""
    if isinstance(value, str | Path):
        return value
    raise ConfigError(f"{field}={shown(value)} is of type {type(value).__name__}; allowed: a catalog name, a file "
                      "path or a mapping of fields")


def usable_path(value: Any, field: str) -> str | Path:
    """`value` if it is a str or Path the operating system accepts as a path (not too long, no NUL byte),
    whether or not a file is there; else ConfigError naming the field."""
    value = name_or_path(value, field)
    try:
        Path(value).is_file()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"{field}={shown(str(value))} is not a usable path ({reason}); allowed: a file path "
                          "or a shipped name") from None
    return value


# Where files a user names may be read from: anywhere (None: the CLI and the Python API, run by the user on
# their own files), or only under one folder and inside the installed package (its catalog): the web server,
# whose clients name paths on a machine that is not theirs (`madmax web --data-dir`, docs/web.md).
# A context variable, so that an app serving in a thread of a larger process (a test's) restricts its own work
# only: a process of the server's sets it once for itself (`restrict_files`), a thread for one call
# (`files_under`).
_FILE_ROOT: ContextVar[Path | None] = ContextVar("madmax_file_root", default=None)
_PACKAGE = Path(__file__).resolve().parents[1]
# The largest input file read: 64 MiB, a thousand times a large model's config.json or a sweep spec, and an
# arrivals CSV of about three million requests (about 20 bytes a row).
MAX_FILE_BYTES = 64 * 2**20


def restrict_files(root: Path | None) -> None:
    """From now on, in this context, read user-named files only under `root` (None: anywhere)."""
    _FILE_ROOT.set(None if root is None else Path(root).resolve())


@contextmanager
def files_under(root: Path | None) -> Iterator[None]:
    """`restrict_files(root)` for the duration of a `with` block."""
    token = _FILE_ROOT.set(None if root is None else Path(root).resolve())
    try:
        yield
    finally:
        _FILE_ROOT.reset(token)


def scratch_root() -> Path | None:
    """Where a scratch file that is read back under the file policy goes: inside the root when files are
    restricted (the web server's data folder), else the system's temporary folder (None)."""
    return _FILE_ROOT.get()


def file_allowed(path: str | Path) -> bool:
    """Whether the file policy (`restrict_files`) lets `path` be read: always without a root; else when it
    resolves (links followed) inside the root or inside the installed package."""
    root = _FILE_ROOT.get()
    if root is None:
        return True
    try:
        real = Path(path).resolve()
    except (OSError, ValueError, RuntimeError):
        return False
    return real.is_relative_to(root) or real.is_relative_to(_PACKAGE)


def file_rule() -> str:
    """What a 'no such file' sentence adds under a file root: that files elsewhere are not read."""
    if _FILE_ROOT.get() is None:
        return ""
    return " (this server reads files only under its data directory, madmax web --data-dir)"


def path_rule(name: object) -> str:
    """`file_rule()` for a name that is a path (has a slash), not a misspelt catalog name."""
    return file_rule() if "/" in str(name) or "\\" in str(name) else ""


def readable_file(path: str | Path, field: str, limit: int | None = None) -> Path:
    """`path` if the policy allows it and it is a regular file of at most `limit` bytes (default
    MAX_FILE_BYTES); else ConfigError. (A device such as /dev/zero, a FIFO or a folder is refused before
    anything is read from it.)"""
    limit = MAX_FILE_BYTES if limit is None else limit
    if not file_allowed(path):
        raise ConfigError(f"{field}={shown(str(path))} is outside this server's data directory; allowed: a "
                          "catalog name, the file's content, or a file under the folder `madmax web --data-dir` "
                          "names")
    try:
        info = Path(path).stat()
    except (OSError, ValueError):
        raise ConfigError(f"{field} file {shown(str(path))} does not exist") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{field}={shown(str(path))} is not a regular file; allowed: a YAML, JSON or CSV file")
    if info.st_size > limit:
        raise ConfigError(f"{field} file {shown(str(path))} is {info.st_size / 2**20:.0f} MiB; allowed: at most "
                          f"{limit // 2**20} MiB")
    return Path(path)


def is_file(path: str | Path) -> bool:
    """Whether `path` names an existing file the file policy lets be read (`file_allowed`); False for a
    name too long for a path or with a NUL byte."""
    try:
        return file_allowed(path) and Path(path).is_file()
    except (OSError, ValueError):
        return False


def writable_file(path: Path, option: str, *, make_folder: bool = False) -> Path:
    """`path` if a file can be written there: not a folder, in a folder that exists (or, with
    `make_folder`, that the writer creates); else ConfigError naming the option."""
    try:
        if path.is_dir():
            raise ConfigError(f"{option}={shown(str(path))} is a folder; allowed: a file path")
        folder = next((p for p in path.parents if p.exists()), Path("."))
        if not folder.is_dir() or (folder != path.parent and not make_folder):
            raise ConfigError(f"{option}={shown(str(path))} is in a folder that does not exist "
                              f"({shown(str(path.parent))}); allowed: a file in an existing folder")
    except OSError as exc:
        raise ConfigError(f"{option}={shown(str(path))} is not a usable path ({exc.strerror or exc})") from None
    return path


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24 (the first 13 primes as bases; Sorenson and Webster 2015)."""
    if n < 2:
        return False
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for p in bases:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _factor(n: int) -> int:
    """A non-trivial factor of the composite odd n (Pollard's rho with Floyd cycle finding)."""
    c = 1
    while True:
        x = y = 2
        d = 1
        while d == 1:
            x = (x * x + c) % n
            y = (y * y + c) % n
            y = (y * y + c) % n
            d = math.gcd(abs(x - y), n)
        if d != n:
            return d
        c += 1


def prime_factors(n: int) -> dict[int, int]:
    """{prime: exponent} of n >= 1 (trial division by small primes, then Pollard's rho)."""
    factors: dict[int, int] = {}
    for p in (2, 3, 5, 7, 11, 13):
        while n % p == 0:
            factors[p] = factors.get(p, 0) + 1
            n //= p
    stack = [n] if n > 1 else []
    while stack:
        m = stack.pop()
        if _is_prime(m):
            factors[m] = factors.get(m, 0) + 1
        else:
            d = _factor(m)
            stack += [d, m // d]
    return factors


def divisors(n: int) -> list[int]:
    """The divisors of n >= 1 in increasing order, from its prime factors (fast for any n <= MAX_INT)."""
    found = [1]
    for p, k in prime_factors(n).items():
        found = [d * p**e for d in found for e in range(k + 1)]
    return sorted(found)
