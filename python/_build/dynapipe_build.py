"""dynapipe_build.py — the package's own PEP 517 build backend, standard
library only, so that `pip install ./python` needs neither the network nor
setuptools or wheel (an interpreter without `wheel` cannot build a wheel
with setuptools). The package is pure Python: a wheel is a zip of the
dynapipe/ sources plus the three dist-info files (METADATA, WHEEL, RECORD);
an sdist is a tar.gz of this folder; an editable wheel holds one .pth file
pointing at this folder.
"""
import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "dynapipe"
VERSION = "0.1.0"
SUMMARY = "Python binding of the dynapipe planner: dynamic micro-batching for pipeline-parallel training"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"


def _metadata():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\nSummary: {SUMMARY}\n"
            f"Requires-Python: >=3.8\nDescription-Content-Type: text/markdown\n\n{readme}")


def _wheel_file():
    return f"Wheel-Version: 1.0\nGenerator: dynapipe_build\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _sources():
    """(archive name, file path) of every .py file of the package, sorted."""
    out = []
    pkg = os.path.join(ROOT, NAME)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                path = os.path.join(dirpath, fn)
                out.append((os.path.relpath(path, ROOT).replace(os.sep, "/"), path))
    return out


def _write_wheel(wheel_directory, files):
    """files: [(archive name, bytes)]; adds the dist-info and RECORD."""
    dist_info = f"{NAME}-{VERSION}.dist-info"
    files = list(files) + [(f"{dist_info}/METADATA", _metadata().encode()),
                           (f"{dist_info}/WHEEL", _wheel_file().encode())]
    record = io.StringIO()
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{name},sha256={digest},{len(data)}\n")
    record.write(f"{dist_info}/RECORD,,\n")
    files.append((f"{dist_info}/RECORD", record.getvalue().encode()))
    filename = f"{NAME}-{VERSION}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return filename


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for name, path in _sources():
        with open(path, "rb") as f:
            files.append((name, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(f"_{NAME}_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel in ["pyproject.toml", "README.md", "_build/dynapipe_build.py"] + [n for n, _ in _sources()]:
            tar.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        tar.addfile(info, io.BytesIO(pkg_info))
    return filename
