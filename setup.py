"""The mirroring loop's hot path (`worker/batches.py` and the `PartitionFlow` it updates per
record, `worker/flows.py`) compiled with mypyc: about 200 ns less per record, 8 % of a 100 B
record's CPU (docs/performance.md). Everything else about the package is in pyproject.toml.

The build needs a C compiler and Python's headers (Debian: gcc, python3-dev); an editable
install puts the compiled modules beside their sources, so an edit of either file needs the
install again (`make` does it; the tests refuse a compiled module older than its source)."""

from mypyc.build import mypycify
from setuptools import setup

HOT_PATH = ["operator/kafka_mirror/worker/batches.py", "operator/kafka_mirror/worker/flows.py"]
# Not pyproject's mypy settings: its plugin and the package's dependencies are not in the
# build's environment (their types compile as Any, as the interpreter would see them).
MYPY_OPTIONS = ["--config-file=", "--ignore-missing-imports"]

setup(ext_modules=mypycify([*MYPY_OPTIONS, *HOT_PATH], opt_level="3", separate=True))
