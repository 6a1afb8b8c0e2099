"""Runs the Python ctypes script of docs/C_API.md as the page shows it: the
```python block between <!-- ctypes:begin --> and <!-- ctypes:end -->.
Exits 77 (ctest: skipped) when numpy is missing."""
import re
import sys

try:
    import numpy  # noqa: F401  (the script needs it)
except ImportError:
    print("numpy is not installed: the script of docs/C_API.md cannot run")
    sys.exit(77)

page = open(sys.argv[1], encoding="utf-8").read()
found = re.search(r"<!-- ctypes:begin -->\s*```python\n(.*?)```\s*<!-- ctypes:end -->", page, re.S)
if not found:
    sys.exit(f"{sys.argv[1]}: no ```python block between <!-- ctypes:begin --> and <!-- ctypes:end -->")
exec(compile(found.group(1), f"{sys.argv[1]} (ctypes script)", "exec"), {"__name__": "__main__"})
