"""run.py — run every python/tests/test_*.py with unittest, and fail
instead of passing quietly when a module did not load, a module
contributed no test, nothing ran, or (DYNAPIPE_TEST_REQUIRE_ALL=1, as
ctest sets) anything was skipped. This is the command ctest and the
README run: python3 python/tests/run.py"""
import glob
import os
import sys
import unittest

TESTS = os.path.dirname(os.path.abspath(__file__))


def flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from flatten(t)
        else:
            yield t


def main():
    sys.path.insert(0, TESTS)
    loader = unittest.TestLoader()
    suite = loader.discover(TESTS, pattern="test_*.py", top_level_dir=TESTS)
    tests = list(flatten(suite))
    problems = [str(e).splitlines()[0] for e in loader.errors]
    problems += [t.id() for t in tests if t.id().startswith("unittest.loader.")]  # import failures
    modules = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(TESTS, "test_*.py"))}
    empty = sorted(m for m in modules if not any(t.id().startswith(m + ".") for t in tests))
    if problems or empty or not modules:
        print("python tests: not loaded:", problems, "no tests in:", empty, file=sys.stderr)
        return 1
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if result.testsRun == 0:
        print("python tests: no test ran", file=sys.stderr)
        return 1
    if os.environ.get("DYNAPIPE_TEST_REQUIRE_ALL") == "1" and result.skipped:
        print(f"python tests: {len(result.skipped)} skipped, and every test must run here", file=sys.stderr)
        return 1
    print(f"python tests: {result.testsRun} tests in {len(modules)} modules")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
