#!/usr/bin/env python3
"""Hardlinks the files of one project venv that are byte-identical to the same file of another
(the same path under site-packages), so that venvs pinning the same wheels (NVIDIA's CUDA
libraries, ~4 GB, are the same in the vLLM and SGLang venvs) keep one copy on disk. pip never
writes into an installed file (it replaces files on upgrade and removes them on uninstall), so a
shared inode stays correct in both venvs. Both venvs must be on one filesystem; files that
differ, or exist in one venv only, are left alone.

usage: venv_hardlink.py VENV OTHER_VENV...    (prints what it saved)
"""
import filecmp
import glob
import os
import sys


def site_packages(venv):
    found = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    return found[0] if found else None


def link_identical(venv, other):
    """Replaces each regular file under venv's site-packages by a hardlink to other's copy when
    the two are identical; returns the bytes saved."""
    mine, theirs = site_packages(venv), site_packages(other)
    if not mine or not theirs or os.stat(mine).st_dev != os.stat(theirs).st_dev:
        return 0
    saved = 0
    for directory, _, files in os.walk(mine):
        for name in files:
            path = os.path.join(directory, name)
            twin = os.path.join(theirs, os.path.relpath(path, mine))
            try:
                a, b = os.lstat(path), os.lstat(twin)
            except FileNotFoundError:
                continue
            if not (os.path.isfile(path) and os.path.isfile(twin)) or os.path.islink(path) or os.path.islink(twin):
                continue
            # A shared inode has one mode: files whose modes differ stay apart.
            if a.st_ino == b.st_ino or a.st_size != b.st_size or a.st_mode != b.st_mode or a.st_size < 4096:
                continue
            if not filecmp.cmp(path, twin, shallow=False):
                continue
            temporary = path + ".tandem-link"
            os.link(twin, temporary)
            os.replace(temporary, path)
            saved += a.st_size
    return saved


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    venv = sys.argv[1]
    saved = sum(link_identical(venv, other) for other in sys.argv[2:] if os.path.isdir(other))
    print(f"{saved / 2**30:.1f} GiB shared with {', '.join(sys.argv[2:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
