# The Python component benchmark (bench/programs/components.sh builds it with componentize-py):
# wasi:cli/run's `run` computes fib recursively (a Python call storm) and sorts words.
import sys

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

class Run:
    def run(self) -> None:
        total = sum(fib(i) for i in range(22))
        words = sorted(("delta alpha charlie bravo " * 2000).split())
        print(f"python: fib sum {total}, {len(words)} words, first {words[0]}")
