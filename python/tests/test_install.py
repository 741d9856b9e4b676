"""`pip install` of python/ with no network (--no-index), into a target
folder outside the checkout; that copy finds an installed C library
(cmake --install, the install_setup fixture: DYNAPIPE_TEST_PREFIX) by
DYNAPIPE_PREFIX and by pkg-config, and plans what the checkout's package
plans."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from dyntest import PYTHON_DIR, REPO, dynapipe, require
from test_loader import probe


class PipInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.target = os.path.join(cls.tmp, "site")
        cls.pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                                  "--disable-pip-version-check", "--target", cls.target, PYTHON_DIR],
                                 capture_output=True, text=True, timeout=300)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_installed_package(self):
        self.assertEqual(self.pip.returncode, 0, self.pip.stdout + self.pip.stderr)
        files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(self.target, "dynapipe", "*.py")))
        want = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PYTHON_DIR, "dynapipe", "*.py")))
        self.assertEqual(files, want)
        version = dynapipe.__version__
        self.assertTrue(glob.glob(os.path.join(self.target, f"dynapipe-{version}.dist-info", "RECORD")))
        # One version everywhere: the package, its build backend, pyproject.toml, the C header.
        with open(os.path.join(PYTHON_DIR, "pyproject.toml")) as f:
            self.assertIn(f'version = "{version}"', f.read())
        with open(os.path.join(PYTHON_DIR, "_build", "dynapipe_build.py")) as f:
            self.assertIn(f'VERSION = "{version}"', f.read())
        with open(os.path.join(REPO, "include", "dynapipe", "version.h")) as f:
            self.assertIn(f'#define DYN_VERSION_STRING "{version}"', f.read())
        # The source tree is left as it was (the backend writes only the wheel).
        self.assertFalse(glob.glob(os.path.join(PYTHON_DIR, "*.egg-info")))
        self.assertFalse(os.path.exists(os.path.join(PYTHON_DIR, "build")))

    def test_finds_an_installed_prefix(self):
        self.assertEqual(self.pip.returncode, 0, self.pip.stderr)
        prefix = os.environ.get("DYNAPIPE_TEST_PREFIX", "")
        require(prefix and glob.glob(os.path.join(prefix, "lib*", "libdynapipe.so")),
                "an installed prefix in DYNAPIPE_TEST_PREFIX (ctest's install_setup)")
        with dynapipe.Planner(model="gpt", max_seqlen=512, stages=2) as p:
            want = p.plan([100, 30], [5, 9]).to_dict()["microbatches"]
        libdir = os.path.dirname(glob.glob(os.path.join(prefix, "lib*", "libdynapipe.so"))[0])
        for env in ({"DYNAPIPE_PREFIX": prefix}, {"PKG_CONFIG_PATH": os.path.join(libdir, "pkgconfig")}):
            with self.subTest(env=env):
                r = probe(env, self.tmp, self.target)
                self.assertEqual(r.returncode, 0, r.stderr)
                path, how, mbs = json.loads(r.stdout)
                self.assertEqual(how, "installed")
                self.assertEqual(os.path.realpath(os.path.dirname(path)), os.path.realpath(libdir))
                self.assertEqual(mbs, want)


if __name__ == "__main__":
    unittest.main()
