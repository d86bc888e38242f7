"""``python -m metrale_export.contract [--write | --check]`` (contract/generate.py's ``main``)."""

import sys

from .generate import main

if __name__ == "__main__":  # importing the module (pkgutil.walk_packages) runs nothing
    raise SystemExit(main(sys.argv[1:]))
