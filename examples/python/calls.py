"""Calls a few functions with a no-op profile function set, so that Python 3.11's
python:function__entry probe fires (python/cpython#98894)."""
import sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def greet(name):
    return f"hello, {name}"


def main():
    print(greet("gprobe"), fib(5))


sys.setprofile(lambda frame, event, arg: None)
main()
sys.setprofile(None)
