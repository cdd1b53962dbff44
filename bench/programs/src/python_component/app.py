# The Python component benchmark (bench/programs/components.sh builds it with componentize-py):
# wasi:cli/run's `run` runs the script its arguments name, as `python SCRIPT ARGS...` would
# (`wprof run --dir data::/data python_component.wasm /data/bench.py`); without one, it
# computes fib recursively (a Python call storm) and sorts words.
#
# componentize-py runs this module's top level when it builds the component and keeps the
# interpreter's memory as it stands then: the modules a script imports must be imported
# here, since the component carries no other part of the standard library.
import json  # noqa: F401 (for the scripts)
import re  # noqa: F401
import sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Run:
    def run(self) -> None:
        if len(sys.argv) > 1:
            path = sys.argv[1]
            sys.argv = sys.argv[1:]
            with open(path) as f:
                code = compile(f.read(), path, "exec")
            exec(code, {"__name__": "__main__", "__file__": path})
            return
        total = sum(fib(i) for i in range(22))
        words = sorted(("delta alpha charlie bravo " * 2000).split())
        print(f"python: fib sum {total}, {len(words)} words, first {words[0]}")
