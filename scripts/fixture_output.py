"""What every reference-fixture script does first (the scripts run by CTest as FIXTURES_SETUP tests): parse --out,
start from an empty directory, and, when a reference package is not installed, write DIR/SKIPPED with the reason
instead of failing (the tests then exit 77, which CTest reports as skipped, never passed)."""
import argparse
import importlib
import os
import shutil


def fresh_output_dir(description):
    """Parses --out DIR and returns DIR, emptied and created."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True)
    out = parser.parse_args().out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    return out


def skipped_without(out, script, *modules):
    """True (after writing out/SKIPPED) when one of `modules` cannot be imported."""
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as error:
        with open(os.path.join(out, "SKIPPED"), "w") as f:
            f.write(f"{', '.join(modules)} not installed ({error}); pip install -r scripts/requirements.txt\n")
        print(f"{script}: {error}, wrote SKIPPED")
        return True
    return False
