"""Finding the library: DYNAPIPE_LIB (a file or its folder; a wrong one is
an error, not a fallback), the build tree of a source checkout, an installed
prefix (test_install.py); the struct mirrors match the library's sizes.
Each case runs in a fresh interpreter, since a process loads the library
once."""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from dyntest import PYTHON_DIR, dynapipe

PROBE = ("import json, dynapipe; path, how = dynapipe.find_library(); "
         "p = dynapipe.Planner(model='gpt', max_seqlen=512, stages=2); "
         "print(json.dumps([path, how, p.plan([100, 30], [5, 9]).to_dict()['microbatches']]))")


def probe(env_changes, cwd, path_entry):
    env = {k: v for k, v in os.environ.items() if k not in ("DYNAPIPE_LIB", "DYNAPIPE_PREFIX", "PKG_CONFIG_PATH")}
    env.update(env_changes)
    env["PYTHONPATH"] = path_entry
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return r


def the_library():
    """The library this process loaded (the one the other cases point at)."""
    return dynapipe._lib.load().dynapipe_path


class Loader(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        with dynapipe.Planner(model="gpt", max_seqlen=512, stages=2) as p:
            self.want = p.plan([100, 30], [5, 9]).to_dict()["microbatches"]

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_dynapipe_lib_file_and_folder(self):
        lib = os.path.realpath(the_library())
        for value in (lib, os.path.dirname(lib)):
            r = probe({"DYNAPIPE_LIB": value}, self.tmp, PYTHON_DIR)
            self.assertEqual(r.returncode, 0, r.stderr)
            path, how, mbs = json.loads(r.stdout)
            self.assertEqual(how, "DYNAPIPE_LIB")
            self.assertEqual(mbs, self.want)

    def test_dynapipe_lib_wrong_is_an_error(self):
        r = probe({"DYNAPIPE_LIB": os.path.join(self.tmp, "nowhere", "libdynapipe.so")}, self.tmp, PYTHON_DIR)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("DYNAPIPE_LIB=", r.stderr)
        self.assertIn("no such file", r.stderr)
        not_a_lib = os.path.join(self.tmp, "libdynapipe.so")
        with open(not_a_lib, "w") as f:
            f.write("not a library\n")
        r = probe({"DYNAPIPE_LIB": not_a_lib}, self.tmp, PYTHON_DIR)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("could not be loaded", r.stderr)

    def test_build_tree(self):
        # A checkout in miniature: the package beside CMakeLists.txt and
        # include/dynapipe/plan.h, the library in build/.
        repo = os.path.join(self.tmp, "checkout")
        shutil.copytree(os.path.join(PYTHON_DIR, "dynapipe"), os.path.join(repo, "python", "dynapipe"))
        os.makedirs(os.path.join(repo, "include", "dynapipe"))
        os.makedirs(os.path.join(repo, "build"))
        for name in ("CMakeLists.txt", os.path.join("include", "dynapipe", "plan.h")):
            open(os.path.join(repo, name), "w").close()
        os.symlink(os.path.realpath(the_library()), os.path.join(repo, "build", "libdynapipe.so"))
        r = probe({}, self.tmp, os.path.join(repo, "python"))
        self.assertEqual(r.returncode, 0, r.stderr)
        path, how, mbs = json.loads(r.stdout)
        self.assertEqual((path, how), (os.path.join(repo, "build", "libdynapipe.so"), "build tree"))
        self.assertEqual(mbs, self.want)
        # Without the library there, and nothing installed: the error lists where it looked.
        os.remove(os.path.join(repo, "build", "libdynapipe.so"))
        r = probe({"DYNAPIPE_PREFIX": os.path.join(self.tmp, "empty")}, self.tmp, os.path.join(repo, "python"))
        if r.returncode != 0:  # (a system-wide install would be found instead)
            self.assertIn("libdynapipe.so not found", r.stderr)
            self.assertIn(os.path.join(repo, "build", "libdynapipe.so"), r.stderr)

    def test_struct_mirrors(self):
        lib = dynapipe._lib.load()
        for name, mirror in dynapipe._lib._MIRRORS.items():
            self.assertEqual(lib.dyn_abi_sizeof(name.encode()), ctypes.sizeof(mirror), name)
        self.assertEqual(lib.dyn_abi_sizeof(b"dyn_no_such_struct"), 0)
        self.assertEqual(lib.dyn_version().decode(), dynapipe.__version__)


if __name__ == "__main__":
    unittest.main()
